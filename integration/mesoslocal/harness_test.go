package mesoslocal_test

import (
	"context"
	"encoding/json"
	"errors"
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

const executorModeEnv = "MESOSLOCAL_TEST_EXECUTOR"

// codec is the scheduler and executor codec of this run of the suite: JSON, or protobuf when
// TestWholeSuiteUnderProtobuf runs the suite again.
var codec = "application/json"

func TestMain(m *testing.M) {
	if mode := os.Getenv(executorModeEnv); mode != "" {
		os.Exit(runTestExecutor(mode))
	}
	if c := os.Getenv("MESOSLOCAL_TEST_CODEC"); c != "" {
		codec = c
	}
	os.Exit(m.Run())
}

// wait is how long any single expected event may take; the knobs in tests are short.
const wait = 15 * time.Second

var media = []string{"application/json", "application/x-protobuf"}

// forEachCodec runs a wire-level test once per codec.
func forEachCodec(t *testing.T, f func(t *testing.T, media string)) {
	for _, m := range media {
		t.Run(strings.TrimPrefix(m, "application/"), func(t *testing.T) { f(t, m) })
	}
}

func quietLogger() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	if os.Getenv("MESOSLOCAL_TEST_LOG") != "" {
		l.SetOutput(os.Stderr)
		l.SetLevel(logrus.DebugLevel)
	}
	return l
}

// newCluster starts a cluster with fast test knobs; change adjusts them.
func newCluster(t testing.TB, change ...func(*mesoslocal.Options)) *mesoslocal.Cluster {
	t.Helper()
	o := mesoslocal.Options{
		Agents: 1, AgentResources: "cpus:4;mem:4096;disk:1000;ports:[31000-32000]", WorkDir: t.TempDir(),
		HeartbeatInterval: time.Second, AllocationInterval: 50 * time.Millisecond,
		AgentPingTimeout: 100 * time.Millisecond, MaxAgentPingTimeouts: 3,
		StatusUpdateRetryMin: 200 * time.Millisecond, StatusUpdateRetryMax: 2 * time.Second,
		ExecutorRegistrationTimeout: 10 * time.Second, ExecutorShutdownGracePeriod: 500 * time.Millisecond,
		ExecutorReregistrationTimeout: 3 * time.Second, RecoveryTimeout: 20 * time.Second,
		Logger: quietLogger(),
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

// sched is a framework driven through mesos-go's httpsched client.
type sched struct {
	t       testing.TB
	caller  calls.Caller
	fwID    string
	cancel  context.CancelFunc
	ctx     context.Context
	mu      sync.Mutex
	backlog []scheduler.Event
	events  chan scheduler.Event
	closed  chan struct{} // the event stream ended
	resp    mesos.Response
}

func frameworkInfo(caps ...mesos.FrameworkInfo_Capability_Type) *mesos.FrameworkInfo {
	info := &mesos.FrameworkInfo{User: "test", Name: "mesoslocal-test", FailoverTimeout: ptrTo(3600.0), Checkpoint: ptrTo(true)}
	for _, c := range caps {
		info.Capabilities = append(info.Capabilities, mesos.FrameworkInfo_Capability{Type: c})
	}
	return info
}

func paInfo() *mesos.FrameworkInfo {
	return frameworkInfo(mesos.FrameworkInfo_Capability_PARTITION_AWARE)
}

func ptrTo[T any](v T) *T { return &v }

func caller(endpoint, mediaType string) calls.Caller {
	cli := httpcli.New(
		httpcli.Endpoint(endpoint+"/api/v1/scheduler"),
		httpcli.Codec(codecs.ByMediaType[codecsType(mediaType)]),
		httpcli.Do(httpcli.With(httpcli.Timeout(wait))),
	)
	return httpsched.NewCaller(cli, httpsched.AllowReconnection(true))
}

func codecsType(m string) encoding.MediaType { return encoding.MediaType(m) }

// subscribe subscribes a framework and waits for SUBSCRIBED.
func subscribe(t testing.TB, endpoint, mediaType string, info *mesos.FrameworkInfo) *sched {
	t.Helper()
	s, first := trySubscribe(t, endpoint, mediaType, info)
	if first.Type != scheduler.Event_SUBSCRIBED {
		t.Fatalf("first event = %v; want SUBSCRIBED", first.String())
	}
	return s
}

// trySubscribe subscribes and returns the first event, whatever it is.
func trySubscribe(t testing.TB, endpoint, mediaType string, info *mesos.FrameworkInfo) (*sched, scheduler.Event) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	s := &sched{t: t, caller: caller(endpoint, mediaType), cancel: cancel, ctx: ctx,
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
	t.Cleanup(s.close)
	first := s.await("first event", func(scheduler.Event) bool { return true })
	if first.Type == scheduler.Event_SUBSCRIBED {
		s.fwID = first.Subscribed.FrameworkID.Value
	}
	return s, first
}

// close drops the subscription connection.
func (s *sched) close() {
	s.cancel()
	if s.resp != nil {
		s.resp.Close()
	}
}

// call sends a non-SUBSCRIBE call for this framework.
func (s *sched) call(c *scheduler.Call) error {
	c = c.With(calls.Framework(s.fwID))
	resp, err := s.caller.Call(context.Background(), c)
	if resp != nil {
		resp.Close()
	}
	return err
}

func (s *sched) mustCall(c *scheduler.Call) {
	s.t.Helper()
	if err := s.call(c); err != nil {
		s.t.Fatalf("%v call: %v", c.Type, err)
	}
}

// await returns the first event (backlog first) for which match holds; others stay queued.
func (s *sched) await(what string, match func(scheduler.Event) bool) scheduler.Event {
	s.t.Helper()
	ev, ok := s.awaitFor(wait, match)
	if !ok {
		s.t.Fatalf("no %s within %v", what, wait)
	}
	return ev
}

func (s *sched) awaitFor(d time.Duration, match func(scheduler.Event) bool) (scheduler.Event, bool) {
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

// none checks that no matching event arrives within d (used only where the spec says an
// event must not be sent; d is generous compared with the knobs that would send it).
func (s *sched) none(what string, d time.Duration, match func(scheduler.Event) bool) {
	s.t.Helper()
	if ev, ok := s.awaitFor(d, match); ok {
		s.t.Fatalf("unexpected %s: %v", what, ev.String())
	}
}

func isType(t scheduler.Event_Type) func(scheduler.Event) bool {
	return func(ev scheduler.Event) bool { return ev.Type == t }
}

func (s *sched) offers() []mesos.Offer {
	s.t.Helper()
	return s.await("OFFERS", isType(scheduler.Event_OFFERS)).Offers.Offers
}

// offerOn waits for an offer of the given agent.
func (s *sched) offerOn(agentID string) mesos.Offer {
	s.t.Helper()
	for {
		for _, o := range s.offers() {
			if o.AgentID.Value == agentID {
				return o
			}
			s.mustCall(calls.Decline(o.ID).With(calls.RefuseSeconds(0)))
		}
	}
}

func updateOf(taskID string, states ...mesos.TaskState) func(scheduler.Event) bool {
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

// update waits for an update of a task in one of the states.
func (s *sched) update(taskID string, states ...mesos.TaskState) mesos.TaskStatus {
	s.t.Helper()
	return s.await("UPDATE of "+taskID, updateOf(taskID, states...)).Update.Status
}

// ack acknowledges an update that carries a uuid.
func (s *sched) ack(st mesos.TaskStatus) {
	s.t.Helper()
	if len(st.UUID) == 0 {
		s.t.Fatalf("ack of an update without uuid: %v", st.String())
	}
	s.mustCall(calls.Acknowledge(st.AgentID.Value, st.TaskID.Value, st.UUID))
}

// launch accepts an offer with tasks.
func (s *sched) launch(o mesos.Offer, tasks ...mesos.TaskInfo) {
	s.t.Helper()
	s.mustCall(calls.Accept(calls.OfferOperations{calls.OpLaunch(tasks...)}.WithOffers(o.ID)).With(calls.RefuseSeconds(0)))
}

// scalar builds cpus/mem resources.
func scalars(cpus, mem float64) []mesos.Resource {
	return []mesos.Resource{
		{Name: "cpus", Type: mesos.SCALAR.Enum(), Scalar: &mesos.Value_Scalar{Value: cpus}, Role: ptrTo("*")},
		{Name: "mem", Type: mesos.SCALAR.Enum(), Scalar: &mesos.Value_Scalar{Value: mem}, Role: ptrTo("*")},
	}
}

// testExecutor is an ExecutorInfo running this test binary as an executor in the given mode.
func testExecutor(id, mode string) *mesos.ExecutorInfo {
	if codec == "application/x-protobuf" {
		mode += ",protobuf"
	}
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	return &mesos.ExecutorInfo{
		ExecutorID: mesos.ExecutorID{Value: id},
		Command: &mesos.CommandInfo{Value: &exe, Shell: ptrTo(false), Arguments: []string{exe},
			Environment: &mesos.Environment{Variables: []mesos.Environment_Variable{{Name: executorModeEnv, Value: ptrTo(mode)}}}},
		Resources: scalars(0.1, 32),
	}
}

// task builds a task for the test executor; data tells the executor what to do with it.
func task(id string, o mesos.Offer, exec *mesos.ExecutorInfo, data string) mesos.TaskInfo {
	return mesos.TaskInfo{Name: id, TaskID: mesos.TaskID{Value: id}, AgentID: o.AgentID, Executor: exec,
		Resources: scalars(0.5, 64), Data: []byte(data)}
}

// masterState fetches /master/state.
func masterState(t testing.TB, c *mesoslocal.Cluster) map[string]any {
	t.Helper()
	resp, err := http.Get(c.URL() + "/master/state")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var doc map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

var errTimeout = errors.New("timeout")

// terminal acknowledges a task's updates until a terminal one, which it returns (acknowledged).
func (s *sched) terminal(taskID string) mesos.TaskStatus {
	s.t.Helper()
	for {
		st := s.update(taskID)
		if len(st.UUID) > 0 {
			s.ack(st)
		}
		switch *st.State {
		case mesos.TASK_FINISHED, mesos.TASK_FAILED, mesos.TASK_KILLED, mesos.TASK_ERROR, mesos.TASK_LOST,
			mesos.TASK_DROPPED, mesos.TASK_GONE, mesos.TASK_GONE_BY_OPERATOR:
			return st
		}
	}
}
