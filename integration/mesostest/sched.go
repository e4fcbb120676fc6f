// Package mesostest drives mesos-local from tests the way a framework does: through mesos-go's
// scheduler client, with an event backlog so that a test can wait for the event it expects
// while others stay queued.
package mesostest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/encoding"
	"github.com/mesos/mesos-go/api/v1/lib/encoding/codecs"
	"github.com/mesos/mesos-go/api/v1/lib/httpcli"
	"github.com/mesos/mesos-go/api/v1/lib/httpcli/httpsched"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"
	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/integration/mesoslocal"
)

// Wait is how long any single expected event may take; the knobs in tests are short.
const Wait = 15 * time.Second

func QuietLogger() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	if os.Getenv("MESOSLOCAL_TEST_LOG") != "" {
		l.SetOutput(os.Stderr)
		l.SetLevel(logrus.DebugLevel)
	}
	return l
}

// NewCluster starts a cluster with fast test knobs; change adjusts them.
func NewCluster(t testing.TB, change ...func(*mesoslocal.Options)) *mesoslocal.Cluster {
	t.Helper()
	o := mesoslocal.Options{
		Agents: 1, AgentResources: "cpus:4;mem:4096;disk:1000;ports:[31000-32000]", WorkDir: t.TempDir(),
		HeartbeatInterval: time.Second, AllocationInterval: 50 * time.Millisecond,
		AgentPingTimeout: 100 * time.Millisecond, MaxAgentPingTimeouts: 3,
		StatusUpdateRetryMin: 200 * time.Millisecond, StatusUpdateRetryMax: 2 * time.Second,
		ExecutorRegistrationTimeout: 10 * time.Second, ExecutorShutdownGracePeriod: 500 * time.Millisecond,
		ExecutorReregistrationTimeout: 3 * time.Second, RecoveryTimeout: 20 * time.Second,
		Logger: QuietLogger(),
	}
	for _, ch := range change {
		ch(&o)
	}
	c, err := mesoslocal.New(o)
	if err != nil {
		t.Fatalf("mesoslocal.New: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Sched is a framework driven through mesos-go's httpsched client.
type Sched struct {
	t           testing.TB
	caller      calls.Caller
	FrameworkID string
	cancel      context.CancelFunc
	ctx         context.Context
	mu          sync.Mutex
	backlog     []scheduler.Event
	events      chan scheduler.Event
	closed      chan struct{} // closed when the event stream ends
	resp        mesos.Response
}

func FrameworkInfo(caps ...mesos.FrameworkInfo_Capability_Type) *mesos.FrameworkInfo {
	info := &mesos.FrameworkInfo{User: "test", Name: "mesoslocal-test", FailoverTimeout: Ptr(3600.0), Checkpoint: Ptr(true)}
	for _, c := range caps {
		info.Capabilities = append(info.Capabilities, mesos.FrameworkInfo_Capability{Type: c})
	}
	return info
}

func PAInfo() *mesos.FrameworkInfo {
	return FrameworkInfo(mesos.FrameworkInfo_Capability_PARTITION_AWARE)
}

func Ptr[T any](v T) *T { return &v }

func newCaller(endpoint, mediaType string) calls.Caller {
	cli := httpcli.New(
		httpcli.Endpoint(endpoint+"/api/v1/scheduler"),
		httpcli.Codec(codecs.ByMediaType[encoding.MediaType(mediaType)]),
		httpcli.Do(httpcli.With(httpcli.Timeout(Wait))),
	)
	return httpsched.NewCaller(cli, httpsched.AllowReconnection(true))
}

// Subscribe subscribes a framework and waits for SUBSCRIBED.
func Subscribe(t testing.TB, endpoint, mediaType string, info *mesos.FrameworkInfo) *Sched {
	t.Helper()
	s, first := TrySubscribe(t, endpoint, mediaType, info)
	if first.Type != scheduler.Event_SUBSCRIBED {
		t.Fatalf("first event = %v; want SUBSCRIBED", first.String())
	}
	return s
}

// TrySubscribe subscribes and returns the first event, whatever it is.
func TrySubscribe(t testing.TB, endpoint, mediaType string, info *mesos.FrameworkInfo) (*Sched, scheduler.Event) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &Sched{t: t, caller: newCaller(endpoint, mediaType), cancel: cancel, ctx: ctx,
		events: make(chan scheduler.Event, 10000), closed: make(chan struct{})}
	call := calls.Subscribe(info)
	if info.ID != nil {
		call = call.With(calls.SubscribeTo(info.ID.Value))
	}
	resp, err := s.caller.Call(ctx, call)
	if err != nil {
		cancel()
		t.Fatalf("SUBSCRIBE: %v", err)
	}
	s.resp = resp
	go func() {
		defer close(s.closed)
		for {
			var ev scheduler.Event
			if err := resp.Decode(&ev); err != nil {
				return
			}
			s.events <- ev
		}
	}()
	t.Cleanup(s.Close)
	first := s.Await("first event", func(scheduler.Event) bool { return true })
	if first.Type == scheduler.Event_SUBSCRIBED {
		s.FrameworkID = first.Subscribed.FrameworkID.Value
	}
	return s, first
}

// Close drops the subscription connection.
func (s *Sched) Close() {
	s.cancel()
	if s.resp != nil {
		s.resp.Close()
	}
}

// Call sends a non-SUBSCRIBE call for this framework.
func (s *Sched) Call(c *scheduler.Call) error {
	c = c.With(calls.Framework(s.FrameworkID))
	resp, err := s.caller.Call(context.Background(), c)
	if resp != nil {
		resp.Close()
	}
	return err
}

func (s *Sched) MustCall(c *scheduler.Call) {
	s.t.Helper()
	if err := s.Call(c); err != nil {
		s.t.Fatalf("%v call: %v", c.Type, err)
	}
}

// Await returns the first event (backlog first) for which match holds; others stay queued.
func (s *Sched) Await(what string, match func(scheduler.Event) bool) scheduler.Event {
	s.t.Helper()
	ev, ok := s.AwaitFor(Wait, match)
	if !ok {
		s.t.Fatalf("no %s within %v; the events not yet taken: %s", what, Wait, s.pending())
	}
	return ev
}

// pending describes the backlog, so that a failed wait says what came instead.
func (s *Sched) pending() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	heartbeats := 0
	for _, ev := range s.backlog {
		switch ev.Type {
		case scheduler.Event_HEARTBEAT:
			heartbeats++
		case scheduler.Event_UPDATE:
			st := ev.Update.Status
			out = append(out, fmt.Sprintf("UPDATE %s %s %s %q", st.TaskID.Value, st.GetState(), st.GetReason(), st.GetMessage()))
		case scheduler.Event_OFFERS:
			var offers []string
			for _, o := range ev.Offers.Offers {
				offers = append(offers, fmt.Sprintf("%s on %s: %v", o.ID.Value, o.AgentID.Value, mesos.Resources(o.Resources)))
			}
			out = append(out, "OFFERS ["+strings.Join(offers, "; ")+"]")
		default:
			out = append(out, ev.Type.String())
		}
	}
	if heartbeats > 0 {
		out = append(out, fmt.Sprintf("%d HEARTBEATs", heartbeats))
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}

func (s *Sched) AwaitFor(d time.Duration, match func(scheduler.Event) bool) (scheduler.Event, bool) {
	s.mu.Lock()
	for i, ev := range s.backlog {
		if match(ev) {
			s.backlog = append(s.backlog[:i], s.backlog[i+1:]...)
			s.mu.Unlock()
			return ev, true
		}
	}
	s.mu.Unlock()
	deadline := time.After(d)
	for {
		select {
		case ev := <-s.events:
			if match(ev) {
				return ev, true
			}
			s.mu.Lock()
			s.backlog = append(s.backlog, ev)
			s.mu.Unlock()
		case <-deadline:
			return scheduler.Event{}, false
		}
	}
}

// None checks that no matching event arrives within d (used only where the spec says an
// event must not be sent; d is generous compared with the knobs that would send it).
func (s *Sched) None(what string, d time.Duration, match func(scheduler.Event) bool) {
	s.t.Helper()
	if ev, ok := s.AwaitFor(d, match); ok {
		s.t.Fatalf("unexpected %s: %v", what, ev.String())
	}
}

func IsType(t scheduler.Event_Type) func(scheduler.Event) bool {
	return func(ev scheduler.Event) bool { return ev.Type == t }
}

func (s *Sched) Offers() []mesos.Offer {
	s.t.Helper()
	return s.Await("OFFERS", IsType(scheduler.Event_OFFERS)).Offers.Offers
}

// OfferOn waits for an offer of the given agent.
func (s *Sched) OfferOn(agentID string) mesos.Offer {
	s.t.Helper()
	for {
		for _, o := range s.Offers() {
			if o.AgentID.Value == agentID {
				return o
			}
			s.MustCall(calls.Decline(o.ID).With(calls.RefuseSeconds(0)))
		}
	}
}

func UpdateOf(taskID string, states ...mesos.TaskState) func(scheduler.Event) bool {
	return func(ev scheduler.Event) bool {
		if ev.Type != scheduler.Event_UPDATE || ev.Update.Status.TaskID.Value != taskID {
			return false
		}
		if len(states) == 0 {
			return true
		}
		for _, st := range states {
			if *ev.Update.Status.State == st {
				return true
			}
		}
		return false
	}
}

// Update waits for an update of a task in one of the states.
func (s *Sched) Update(taskID string, states ...mesos.TaskState) mesos.TaskStatus {
	s.t.Helper()
	return s.Await("UPDATE of "+taskID, UpdateOf(taskID, states...)).Update.Status
}

// Ack acknowledges an update that carries a uuid.
func (s *Sched) Ack(st mesos.TaskStatus) {
	s.t.Helper()
	if len(st.UUID) == 0 {
		s.t.Fatalf("ack of an update without uuid: %v", st.String())
	}
	s.MustCall(calls.Acknowledge(st.AgentID.Value, st.TaskID.Value, st.UUID))
}

// Launch accepts an offer with tasks.
func (s *Sched) Launch(o mesos.Offer, tasks ...mesos.TaskInfo) {
	s.t.Helper()
	s.MustCall(calls.Accept(calls.OfferOperations{calls.OpLaunch(tasks...)}.WithOffers(o.ID)).With(calls.RefuseSeconds(0)))
}

// Scalars builds cpus/mem resources.
func Scalars(cpus, mem float64) []mesos.Resource {
	return []mesos.Resource{
		{Name: "cpus", Type: mesos.SCALAR.Enum(), Scalar: &mesos.Value_Scalar{Value: cpus}, Role: Ptr("*")},
		{Name: "mem", Type: mesos.SCALAR.Enum(), Scalar: &mesos.Value_Scalar{Value: mem}, Role: Ptr("*")},
	}
}

// MasterState fetches /master/state.
func MasterState(t testing.TB, c *mesoslocal.Cluster) map[string]any {
	t.Helper()
	return getJSON(t, c.URL()+"/master/state")
}

// AgentState fetches an agent's own /state, at the address the master's state gives in the
// agent's pid (slave(1)@ip:port), as an operator's tools do on a real cluster.
func AgentState(t testing.TB, c *mesoslocal.Cluster, agentID string) map[string]any {
	t.Helper()
	for _, sl := range MasterState(t, c)["slaves"].([]any) {
		if m := sl.(map[string]any); m["id"] == agentID {
			_, addr, _ := strings.Cut(m["pid"].(string), "@")
			return getJSON(t, "http://"+addr+"/state")
		}
	}
	t.Fatalf("no agent %s in /master/state", agentID)
	return nil
}

func getJSON(t testing.TB, url string) map[string]any {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return doc
}

// Terminal acknowledges a task's updates until a terminal one, which it returns (acknowledged).
func (s *Sched) Terminal(taskID string) mesos.TaskStatus {
	s.t.Helper()
	for {
		st := s.Update(taskID)
		if len(st.UUID) > 0 {
			s.Ack(st)
		}
		switch *st.State {
		case mesos.TASK_FINISHED, mesos.TASK_FAILED, mesos.TASK_KILLED, mesos.TASK_ERROR, mesos.TASK_LOST,
			mesos.TASK_DROPPED, mesos.TASK_GONE, mesos.TASK_GONE_BY_OPERATOR:
			return st
		}
	}
}

// Closed returns a channel closed when the framework's event stream has ended.
func (s *Sched) Closed() <-chan struct{} { return s.closed }
