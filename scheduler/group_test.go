package scheduler

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/state/statetest"
	"github.com/ejcloud/ejcloud/taskid"
)

// ackRecorder stands in for Mesos: it keeps the task ids of the updates acknowledged.
type ackRecorder struct {
	mu         sync.Mutex
	acked      []string
	kills      []string
	reconciled []string             // the task ids of explicit reconciliations
	launched   int                  // tasks launched
	executors  []mesos.ExecutorInfo // the executor of each task launched
	messages   []string             // "executor id: data" of each MESSAGE
	declined   []string             // the offer ids declined
}

func (a *ackRecorder) Call(_ context.Context, c *scheduler.Call) (mesos.Response, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch c.Type {
	case scheduler.Call_ACKNOWLEDGE:
		a.acked = append(a.acked, c.Acknowledge.TaskID.Value)
	case scheduler.Call_KILL:
		a.kills = append(a.kills, c.Kill.TaskID.Value)
	case scheduler.Call_ACCEPT:
		for _, op := range c.Accept.Operations {
			if op.Launch != nil {
				a.launched += len(op.Launch.TaskInfos)
				for _, ti := range op.Launch.TaskInfos {
					a.executors = append(a.executors, *ti.Executor)
				}
			}
		}
	case scheduler.Call_MESSAGE:
		a.messages = append(a.messages, c.Message.ExecutorID.Value+": "+string(c.Message.Data))
	case scheduler.Call_DECLINE:
		for _, o := range c.Decline.OfferIDs {
			a.declined = append(a.declined, o.Value)
		}
	case scheduler.Call_RECONCILE:
		for _, t := range c.Reconcile.Tasks {
			a.reconciled = append(a.reconciled, t.TaskID.Value)
		}
	}
	return nil, nil
}

func (a *ackRecorder) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.acked)
}

// groupWorld is a leader on a mirrored store over a real ZooKeeper (reached through a proxy
// that the test can cut), with three running tasks of a failover job, and a plain store that
// plays someone else.
type groupWorld struct {
	ld    *leader
	mesos *ackRecorder
	proxy *statetest.Proxy
	other *state.Store
	tasks []taskid.ID
}

func newGroupWorld(t *testing.T) *groupWorld {
	env := statetest.StartZooKeeper(t)
	proxy := statetest.NewProxy(t, env.Servers[0])
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	connect := func(servers []string) *state.Store {
		s, err := state.Connect(ctx, state.Config{Servers: servers, Namespace: env.Namespace, Logger: quietLog(), SessionTimeout: 20 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(s.Close)
		return s
	}
	other := connect(env.Servers)
	app := config.DefaultApp()
	app.AppName, app.AppURL, app.BootstrapScript = "app", "/opt/app", "./run"
	if err := other.CreateApp(ctx, app); err != nil {
		t.Fatal(err)
	}
	j := config.Job{JobName: "fo", AppName: "app", JobType: config.Script, JobExecutionType: config.Transient, Failover: true,
		TimeZone: "UTC", ShardingTotalCount: 3, CPUCount: 0.1, MemoryMB: 32, ScriptCommandLine: "true",
		Placement: config.Binpack, JobShardingStrategyType: config.AvgAllocation, JobProperties: map[string]string{}}
	if err := other.CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	store, err := connect([]string{proxy.Addr}).Mirror(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := &groupWorld{mesos: &ackRecorder{}, proxy: proxy, other: other}
	for i := range 3 {
		w.tasks = append(w.tasks, taskid.New(taskid.Meta{JobName: "fo", Item: i}, taskid.Ready, "S0"))
	}
	if err := store.RecordLaunch(ctx, state.Launch{Tasks: w.tasks}); err != nil {
		t.Fatal(err)
	}
	w.ld = testLeader(store, w.mesos)
	return w
}

func upd(id taskid.ID, s mesos.TaskState, uuid string) mesos.TaskStatus {
	return mesos.TaskStatus{TaskID: mesos.TaskID{Value: id.String()}, State: s.Enum(), AgentID: &mesos.AgentID{Value: id.AgentID},
		Source: mesos.SOURCE_EXECUTOR.Enum(), UUID: []byte(uuid)}
}

// queues reads what ZooKeeper holds (not the model): running task ids and failover shards.
func (w *groupWorld) queues(t *testing.T) (running []string, failover []string) {
	ctx := context.Background()
	r, err := w.other.Running(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f, err := w.other.Failovers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range r {
		running = append(running, e.TaskID)
	}
	for _, e := range f {
		failover = append(failover, e.Meta.String())
	}
	return running, failover
}

// The updates that arrive together are written in one multi, and only then acknowledged.
func TestUpdatesQueuedTogetherAreWrittenInOneMulti(t *testing.T) {
	t.Parallel()
	w := newGroupWorld(t)
	before := w.ld.store.Multis()
	w.ld.updates(context.Background(), []mesos.TaskStatus{
		upd(w.tasks[0], mesos.TASK_FINISHED, "u0"),
		upd(w.tasks[1], mesos.TASK_LOST, "u1"),
		upd(w.tasks[2], mesos.TASK_FINISHED, "u2"),
	})
	if multis := w.ld.store.Multis() - before; multis != 1 {
		t.Fatalf("three updates took %d multis; want one", multis)
	}
	if n := w.mesos.count(); n != 3 {
		t.Fatalf("%d updates acknowledged; want 3", n)
	}
	running, failover := w.queues(t)
	if len(running) != 0 || fmt.Sprint(failover) != "[fo@-@1]" {
		t.Fatalf("ZooKeeper: running %v, failover %v; want none and [fo@-@1]", running, failover)
	}
}

// ZooKeeper refuses the group (someone else ended one of its tasks): the updates are recorded
// one by one on what ZooKeeper holds, each once, and all acknowledged.
func TestARefusedGroupIsRecordedOneByOne(t *testing.T) {
	t.Parallel()
	w := newGroupWorld(t)
	ctx := context.Background()
	if _, err := w.other.EndTask(ctx, w.tasks[1], state.Failover); err != nil {
		t.Fatal(err)
	}
	w.ld.updates(ctx, []mesos.TaskStatus{
		upd(w.tasks[0], mesos.TASK_FINISHED, "u0"),
		upd(w.tasks[1], mesos.TASK_LOST, "u1"), // its running node is gone: a stale update
		upd(w.tasks[2], mesos.TASK_LOST, "u2"),
	})
	if n := w.mesos.count(); n != 3 {
		t.Fatalf("%d updates acknowledged; want 3", n)
	}
	running, failover := w.queues(t)
	if len(running) != 0 || fmt.Sprint(failover) != "[fo@-@1 fo@-@2]" {
		t.Fatalf("ZooKeeper: running %v, failover %v; want none and [fo@-@1 fo@-@2] (each once)", running, failover)
	}
}

// ZooKeeper cannot be reached: nothing is acknowledged, so Mesos sends the updates again, and
// they are then recorded once — the leader's memory kept nothing of the failed attempt.
func TestUpdatesNotWrittenAreNotAcknowledgedAndRecordedOnceWhenResent(t *testing.T) {
	t.Parallel()
	w := newGroupWorld(t)
	ctx := context.Background()
	batch := []mesos.TaskStatus{
		upd(w.tasks[0], mesos.TASK_FINISHED, "u0"),
		upd(w.tasks[1], mesos.TASK_LOST, "u1"),
	}
	w.proxy.Cut()
	cut, cancel := context.WithTimeout(ctx, 3*time.Second)
	w.ld.updates(cut, batch)
	cancel()
	if n := w.mesos.count(); n != 0 {
		t.Fatalf("%d updates acknowledged although none could be written", n)
	}
	if _, waiting := w.ld.relaunch.shards[w.tasks[1].Meta]; waiting {
		t.Fatal("the failure of an update not recorded was counted for the shard's backoff")
	}
	w.proxy.Restore()
	// Mesos re-sends both, and the first twice more (its retries can overlap).
	deadline := time.Now().Add(30 * time.Second)
	for w.mesos.count() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("re-sent updates not acknowledged within 30 s (%d)", w.mesos.count())
		}
		w.ld.updates(ctx, append(batch, batch[0], batch[0]))
	}
	running, failover := w.queues(t)
	if fmt.Sprint(running) != "["+w.tasks[2].String()+"]" || fmt.Sprint(failover) != "[fo@-@1]" {
		t.Fatalf("ZooKeeper: running %v, failover %v; want only shard 2 running and [fo@-@1] once", running, failover)
	}
	if s := w.ld.relaunch.shards[w.tasks[1].Meta]; s == nil || s.failures != 1 {
		t.Fatalf("shard 1's failures: %+v; want 1", s)
	}
}

// The reply to the group's multi is lost with a connection that breaks (ZooKeeper applied it):
// once the client has reconnected, the leader reads back what the multi did and records the
// updates again — each exactly once — and acknowledges them without waiting for Mesos to send
// them again.
func TestAGroupWhoseReplyIsLostIsAppliedOnce(t *testing.T) {
	t.Parallel()
	w := newGroupWorld(t)
	ctx := context.Background()
	w.proxy.DropReplies()
	first, lone, done := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		w.ld.updates(ctx, []mesos.TaskStatus{
			upd(w.tasks[0], mesos.TASK_FINISHED, "u0"),
			upd(w.tasks[1], mesos.TASK_LOST, "u1"),
		})
		close(first)
		<-lone
		w.ld.updates(ctx, []mesos.TaskStatus{upd(w.tasks[2], mesos.TASK_LOST, "u2")})
	}()
	await.True(t, 10*time.Second, "ZooKeeper applied the group", func() bool {
		running, _ := w.queues(t)
		return len(running) == 1
	})
	w.proxy.Cut() // the reply is lost with the connection
	await.True(t, 10*time.Second, "the leader's client saw the connection break", func() bool {
		return w.ld.store.AwaitSession(cancelled()) != nil
	})
	w.proxy.Restore()
	select {
	case <-first:
	case <-time.After(30 * time.Second):
		t.Fatal("the group was not recorded after the connection came back")
	}
	// A lone update too, whose multi has no group to fall back from. Its reply is dropped
	// once the model has read the watch events that the reconnect delivered: it reads them
	// holding the write lock, and a read whose reply the proxy dropped would hold the lock
	// (and the lone update) until the client's read timeout.
	w.modelCaughtUp(t)
	w.proxy.DropReplies()
	close(lone)
	await.True(t, 10*time.Second, "ZooKeeper applied the lone update", func() bool {
		running, _ := w.queues(t)
		return len(running) == 0
	})
	w.proxy.Cut()
	await.True(t, 10*time.Second, "the leader's client saw the connection break again", func() bool {
		return w.ld.store.AwaitSession(cancelled()) != nil
	})
	w.proxy.Restore()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the updates were not recorded after the connection came back")
	}
	if n := w.mesos.count(); n != 3 {
		t.Fatalf("%d updates acknowledged; want all 3, from the one delivery", n)
	}
	running, failover := w.queues(t)
	if len(running) != 0 || fmt.Sprint(failover) != "[fo@-@1 fo@-@2]" {
		t.Fatalf("ZooKeeper: running %v, failover %v; want none running and [fo@-@1 fo@-@2], each once", running, failover)
	}
	if r, _ := w.ld.store.Running(ctx); len(r) != 0 {
		t.Fatalf("the model has %d running; want none, as ZooKeeper", len(r))
	}
}

// modelCaughtUp waits until the leader's model has read every watch event delivered before
// now: a ready entry written through another session shows in the model only after the
// events before it are read (the model reads them in order), and it is removed again.
func (w *groupWorld) modelCaughtUp(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	const marker = "model-caught-up"
	sees := func(want bool) {
		t.Helper()
		await.True(t, 10*time.Second, fmt.Sprintf("the model sees the marker: %v", want), func() bool {
			r, err := w.ld.store.ReadyOf(ctx, marker)
			return err == nil && (r.Count > 0) == want
		})
	}
	if err := w.other.AddReady(ctx, marker, false); err != nil {
		t.Fatal(err)
	}
	sees(true)
	if err := w.other.RemoveReady(ctx, marker); err != nil {
		t.Fatal(err)
	}
	sees(false)
}

func cancelled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// A kill is decided on what the leader reads, so it waits for the leadership to be confirmed
// with the quorum: refused (a stale server), no KILL goes to Mesos and the update stays
// unacknowledged, to come again; confirmed, the stray task is killed and the update
// acknowledged.
func TestAKillWaitsForTheLeadershipToBeConfirmed(t *testing.T) {
	t.Parallel()
	w := newGroupWorld(t)
	ctx := context.Background()
	stray := taskid.New(taskid.Meta{JobName: "fo", Item: 0}, taskid.Ready, "S9") // not shard 0's running task
	refuse := true
	w.ld.confirm = func(context.Context) error {
		if refuse {
			return state.ErrNotLeader
		}
		return nil
	}
	w.ld.updates(ctx, []mesos.TaskStatus{upd(stray, mesos.TASK_RUNNING, "s1")})
	w.mesos.mu.Lock()
	kills, acks := len(w.mesos.kills), len(w.mesos.acked)
	w.mesos.mu.Unlock()
	if kills != 0 || acks != 0 {
		t.Fatalf("unconfirmed: %d kills, %d acknowledgements; want none", kills, acks)
	}
	refuse = false
	w.ld.updates(ctx, []mesos.TaskStatus{upd(stray, mesos.TASK_RUNNING, "s1")})
	w.mesos.mu.Lock()
	defer w.mesos.mu.Unlock()
	if fmt.Sprint(w.mesos.kills) != "["+stray.String()+"]" || len(w.mesos.acked) != 1 {
		t.Fatalf("confirmed: kills %v, %d acknowledgements; want the stray task killed and its update acknowledged", w.mesos.kills, len(w.mesos.acked))
	}
}
