package scheduler

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state/statetest"
	"github.com/ejcloud/ejcloud/taskid"
)

// slowMaster is a droppableMesos that answers ACKNOWLEDGE only once released, as a busy
// master would.
type slowMaster struct {
	*droppableMesos
	release chan struct{}
	mu      sync.Mutex
	acked   []string
}

func newSlowMaster() *slowMaster {
	return &slowMaster{droppableMesos: newDroppableMesos(), release: make(chan struct{})}
}

func (m *slowMaster) Call(ctx context.Context, c *scheduler.Call) (mesos.Response, error) {
	if c.Type != scheduler.Call_ACKNOWLEDGE {
		return m.droppableMesos.Call(ctx, c)
	}
	select {
	case <-m.release:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.acked = append(m.acked, c.Acknowledge.TaskID.Value)
	return nil, nil
}

// subscribe is droppableMesos's, with the slow master as the caller.
func (m *slowMaster) subscribe(ctx context.Context, fwID, webui string) (*subscription, error) {
	sub, err := m.droppableMesos.subscribe(ctx, fwID, webui)
	if sub != nil {
		sub.caller = m
	}
	return sub, err
}

func (m *slowMaster) count() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.acked)
}

// The event loop hands acknowledgements over and goes on: a master that is slow to answer
// holds none of them up, every one is sent once it answers, and the senders stop with their
// context.
func TestAcknowledgementsDoNotWaitForTheMaster(t *testing.T) {
	t.Parallel()
	m := newSlowMaster()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a := startAcknowledger(ctx, &subscription{caller: m, frameworkID: "fw"}, quietLog())
	handed := make(chan struct{})
	go func() {
		for i := range 100 {
			a.send(ctx, calls.Acknowledge("S0", fmt.Sprintf("task-%d", i), []byte{byte(i)}))
		}
		close(handed)
	}()
	select {
	case <-handed:
	case <-time.After(10 * time.Second):
		t.Fatal("handing 100 acknowledgements over waited for the master")
	}
	if n := m.count(); n != 0 {
		t.Fatalf("%d acknowledged before the master answered anything", n)
	}
	close(m.release)
	await.True(t, 10*time.Second, "all 100 acknowledged", func() bool { return m.count() == 100 })
	cancel()
	stopped := make(chan struct{})
	go func() { a.wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("the senders did not stop with their context")
	}
}

// The same through a leader: while the master has not answered the acknowledgement of one
// update, the event loop goes on to the next. (Acknowledged from the loop, the second update
// waited for the first's answer.) Each is a RUNNING of a task of no job, which the leader kills.
func TestALeaderGoesOnWhileTheMasterIsSlowToTakeAnAcknowledgement(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	m := newSlowMaster()
	cfg := testConfig(t, env)
	startWith(t, cfg, hooks{mesos: m})
	await.True(t, 30*time.Second, "the instance leads and is subscribed", func() bool {
		resp, _ := get(t, cfg.HTTPAddr, "/readyz")
		return resp != nil && resp.StatusCode == http.StatusOK
	})
	for i := range 2 {
		stray := taskid.New(taskid.Meta{JobName: "ghost", Item: i}, taskid.Ready, "S0")
		m.events <- scheduler.Event{Type: scheduler.Event_UPDATE, Update: &scheduler.Event_Update{Status: mesos.TaskStatus{
			TaskID: mesos.TaskID{Value: stray.String()}, State: mesos.TASK_RUNNING.Enum(), UUID: []byte(fmt.Sprintf("0123456789abcde%d", i)),
			AgentID: &mesos.AgentID{Value: "S0"}, Source: mesos.SOURCE_EXECUTOR.Enum()}}}
	}
	await.True(t, 30*time.Second, "both updates handled (both tasks killed) while the first acknowledgement waits", func() bool { return len(m.killed()) == 2 })
	if n := m.count(); n != 0 {
		t.Fatalf("%d acknowledged before the master answered", n)
	}
	close(m.release)
	await.True(t, 30*time.Second, "both acknowledged once the master answers", func() bool { return m.count() == 2 })
}
