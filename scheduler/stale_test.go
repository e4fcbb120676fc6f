package scheduler

import (
	"context"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/encoding"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state/statetest"
	"github.com/ejcloud/ejcloud/taskid"
)

// droppableMesos subscribes at once and sends only the events a test sends; drop ends the
// current event stream, as a master that fails over or closes the connection does, and the
// leader must subscribe again. It records SUBSCRIBEs and KILLs.
type droppableMesos struct {
	mu      sync.Mutex
	subs    []time.Time // when each SUBSCRIBE came
	kills   []string
	dropped chan struct{}
	events  chan scheduler.Event
}

func newDroppableMesos() *droppableMesos {
	return &droppableMesos{dropped: make(chan struct{}), events: make(chan scheduler.Event, 16)}
}

func (m *droppableMesos) subscribe(context.Context, string, string) (*subscription, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.subs = append(m.subs, time.Now())
	return &subscription{caller: m, resp: stream{m.dropped, m.events}, frameworkID: "fw-stale", heartbeat: time.Hour}, nil
}

func (m *droppableMesos) subscriptions() []time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]time.Time(nil), m.subs...)
}

func (m *droppableMesos) killed() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.kills...)
}

// drop ends the streams open now; later subscriptions get a stream of their own.
func (m *droppableMesos) drop() {
	m.mu.Lock()
	defer m.mu.Unlock()
	close(m.dropped)
	m.dropped = make(chan struct{})
}

func (m *droppableMesos) Call(_ context.Context, c *scheduler.Call) (mesos.Response, error) {
	if c.Type == scheduler.Call_KILL {
		m.mu.Lock()
		m.kills = append(m.kills, c.Kill.TaskID.Value)
		m.mu.Unlock()
	}
	return nil, nil
}

type stream struct {
	dropped <-chan struct{}
	events  <-chan scheduler.Event
}

func (s stream) Decode(u encoding.Unmarshaler) error {
	select {
	case ev := <-s.events:
		*u.(*scheduler.Event) = ev
		return nil
	case <-s.dropped:
		return io.EOF
	}
}

func (stream) Close() error { return nil }

// A leader whose only ZooKeeper member is cut off from the quorum must not kill a task nor
// subscribe to Mesos again when its event stream ends: that member still shows its election
// node, but the quorum has expired its session and elected another instance. Its
// confirmation, which only a quorum can answer, is refused; the other instance subscribes.
func TestALeaderCutOffFromTheQuorumDoesNotSubscribe(t *testing.T) {
	t.Parallel()
	tm := statetest.Timing{Tick: 500 * time.Millisecond, InitLimit: 20, SyncLimit: 20} // the isolated member serves 10 s
	e := statetest.StartPartitionableEnsemble(t, 3, tm)
	x := (e.Leader() + 1) % 3 // a follower
	var others []string
	for i, addr := range e.Servers() {
		if i != x {
			others = append(others, addr)
		}
	}
	env := statetest.Env{Servers: e.Servers(), Namespace: "ejcloud"}

	mb := newDroppableMesos()
	var mu sync.Mutex
	var refused []error
	cfgB := testConfig(t, env)
	cfgB.ZKServers, cfgB.ZKSessionTimeout = []string{e.Servers()[x]}, 1500*time.Millisecond
	startWith(t, cfgB, hooks{mesos: mb, confirmed: func(err error) {
		if err != nil {
			mu.Lock()
			refused = append(refused, err)
			mu.Unlock()
		}
	}})
	await.True(t, 30*time.Second, "the first instance leads and is subscribed", func() bool {
		resp, _ := get(t, cfgB.HTTPAddr, "/readyz")
		return resp != nil && resp.StatusCode == http.StatusOK
	})
	ma := newDroppableMesos()
	cfgA := testConfig(t, env)
	cfgA.ZKServers, cfgA.ZKSessionTimeout = others, 5*time.Second
	startWith(t, cfgA, hooks{mesos: ma})

	e.Isolate(x)
	isolated := time.Now()
	// A task of no job runs: a leader kills it, once it has confirmed its leadership.
	stray := taskid.New(taskid.Meta{JobName: "ghost", Item: 0}, taskid.Ready, "S0")
	mb.events <- scheduler.Event{Type: scheduler.Event_UPDATE, Update: &scheduler.Event_Update{Status: mesos.TaskStatus{
		TaskID: mesos.TaskID{Value: stray.String()}, State: mesos.TASK_RUNNING.Enum(), UUID: []byte("0123456789abcdef"),
		AgentID: &mesos.AgentID{Value: "S0"}}}}
	await.True(t, 30*time.Second, "the first instance tried to confirm its leadership before the kill and was refused", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(refused) > 0
	})
	mb.drop()
	await.True(t, 30*time.Second, "the other instance subscribes", func() bool { return len(ma.subscriptions()) > 0 })
	await.True(t, 30*time.Second, "the first instance tried to confirm its leadership and was refused", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(refused) > 0
	})
	mu.Lock()
	t.Logf("the first instance's confirmation, refused %d times; the first: %v", len(refused), refused[0])
	mu.Unlock()
	// Until the isolated member gives up (10 s) and after.
	await.True(t, 30*time.Second, "the first instance stops leading", func() bool {
		resp, _ := get(t, cfgB.HTTPAddr, "/readyz")
		return resp != nil && resp.StatusCode == http.StatusServiceUnavailable && time.Since(isolated) > 11*time.Second
	})
	if k := mb.killed(); len(k) > 0 {
		t.Fatalf("the first instance killed %v after its member was cut off from the quorum", k)
	}
	for _, at := range mb.subscriptions() {
		if at.After(isolated) {
			t.Fatalf("the first instance subscribed to Mesos %v after its member was cut off from the quorum", at.Sub(isolated))
		}
	}
}

// /readyz turns 503 when the Mesos stream ends, not once the event loop has handled what was
// queued before the end (each event a ZooKeeper write, slow when ZooKeeper is).
func TestReadyzFollowsTheStreamNotTheEventLoop(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	m := newDroppableMesos()
	entered, release := make(chan struct{}, 1), make(chan struct{})
	cfg := testConfig(t, env)
	startWith(t, cfg, hooks{mesos: m, updateSeen: func(mesos.TaskStatus) {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
	}})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // before the instance stops (cleanups run last first): its loop must end
	readyz := func() int {
		resp, _ := get(t, cfg.HTTPAddr, "/readyz")
		if resp == nil {
			return 0
		}
		return resp.StatusCode
	}
	await.True(t, 30*time.Second, "the leader is subscribed", func() bool { return readyz() == http.StatusOK })
	stray := taskid.New(taskid.Meta{JobName: "ghost", Item: 0}, taskid.Ready, "S0")
	m.events <- scheduler.Event{Type: scheduler.Event_UPDATE, Update: &scheduler.Event_Update{Status: mesos.TaskStatus{
		TaskID: mesos.TaskID{Value: stray.String()}, State: mesos.TASK_RUNNING.Enum(), UUID: []byte("0123456789abcdef"),
		AgentID: &mesos.AgentID{Value: "S0"}}}}
	<-entered // the event loop is busy with the update
	m.drop()
	await.True(t, 10*time.Second, "/readyz says 503 while the loop is still busy", func() bool { return readyz() == http.StatusServiceUnavailable })
	free()
	await.True(t, 30*time.Second, "subscribed again", func() bool { return readyz() == http.StatusOK })
}
