package mesoslocal_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"

	"github.com/ejcloud/ejcloud/integration/mesoslocal"
	"github.com/ejcloud/ejcloud/internal/await"
)

// Master failover (MESOS.md §2.3, §4.2, §5.1): a new master takes over in the same process;
// the agents and their tasks live on and re-register with it.

const (
	reregisterDelay   = 5 * time.Second
	reregisterTimeout = time.Minute
)

// failoverCluster is a cluster on a manual clock, so that the agents re-register, and the
// new master gives up on those that do not, exactly when a test advances the clock.
func failoverCluster(t *testing.T, change ...func(*mesoslocal.Options)) (*mesoslocal.Cluster, *mesoslocal.ManualClock) {
	t.Helper()
	clock := mesoslocal.NewManualClock(time.Unix(1_800_000_000, 0))
	c := newCluster(t, append([]func(*mesoslocal.Options){func(o *mesoslocal.Options) {
		o.Clock = clock
		o.AllocationInterval = time.Second
		o.AgentReregisterDelay = reregisterDelay
		o.AgentReregisterTimeout = reregisterTimeout
	}}, change...)...)
	return c, clock
}

// failover makes a new master take over and waits for the framework's stream to end, as it
// ends when its master dies.
func failover(t *testing.T, c *mesoslocal.Cluster, s *sched, hold ...string) {
	t.Helper()
	if err := c.FailoverMaster(hold...); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Closed():
	case <-time.After(wait):
		t.Fatal("the framework's stream outlived its master")
	}
}

// resubscribe subscribes again with the framework's id and returns the new subscription and
// the id of the master that answered.
func resubscribe(t *testing.T, c *mesoslocal.Cluster, old *sched, info *mesos.FrameworkInfo) (*sched, string) {
	t.Helper()
	s, first := trySubscribe(t, c.URL(), codec, withID(info, old.FrameworkID))
	if first.Type != scheduler.Event_SUBSCRIBED || s.FrameworkID != old.FrameworkID {
		t.Fatalf("re-subscribing %s: %v; want SUBSCRIBED with the same framework id", old.FrameworkID, first.String())
	}
	return s, first.Subscribed.MasterInfo.ID
}

func reconcile(s *sched, taskAgent ...string) {
	var tasks []scheduler.Call_Reconcile_Task
	for i := 0; i+1 < len(taskAgent); i += 2 {
		rt := scheduler.Call_Reconcile_Task{TaskID: mesos.TaskID{Value: taskAgent[i]}}
		if taskAgent[i+1] != "" {
			rt.AgentID = &mesos.AgentID{Value: taskAgent[i+1]}
		}
		tasks = append(tasks, rt)
	}
	s.MustCall(&scheduler.Call{Type: scheduler.Call_RECONCILE, Reconcile: &scheduler.Call_Reconcile{Tasks: tasks}})
}

// nothingSoFar checks that no event matching match came before the answer to a reconciliation
// the master answers at once (a task on an agent it never knew): a master handles calls in
// order and queues their events in order on the stream, so whatever the calls and clock steps
// before produced has arrived by then. No waiting for an event that might come late.
func nothingSoFar(t *testing.T, s *sched, what string, match func(scheduler.Event) bool) {
	t.Helper()
	reconcile(s, "probe", "no-such-agent-S9")
	s.Update("probe")
	s.None(what, time.Millisecond, match)
}

func anyUpdate(ev scheduler.Event) bool { return ev.Type == scheduler.Event_UPDATE }

// A running task survives a master failover: the framework re-subscribes with its id at once,
// the new master says nothing about the task until its agent re-registers (no reconciliation
// answer, no offer), then knows it as RUNNING, with its resources in use, without an update of
// its own and without relaunching it.
func TestARunningTaskSurvivesAMasterFailover(t *testing.T) {
	t.Parallel()
	c, clock := failoverCluster(t)
	s, first := trySubscribe(t, c.URL(), codec, paInfo())
	pid, st := runPID(t, s, "t1", "e1")
	s.Ack(st)
	agent := st.AgentID.Value

	failover(t, c, s)
	s2, master := resubscribe(t, c, s, paInfo())
	if master == first.Subscribed.MasterInfo.ID {
		t.Fatalf("SUBSCRIBED came from master %s again; want the new master's id", master)
	}
	reconcile(s2, "t1", agent)
	reconcile(s2, "t1", "")
	reconcile(s2, "elsewhere", "") // without an agent id it may be on any agent not back yet
	reconcile(s2)                  // implicit: what the new master knows, nothing yet
	nothingSoFar(t, s2, "reconciliation answer or offer before the agent re-registered", func(ev scheduler.Event) bool {
		return anyUpdate(ev) || ev.Type == scheduler.Event_OFFERS
	})

	clock.Advance(reregisterDelay)
	nothingSoFar(t, s2, "update sent when a recovered agent re-registered", anyUpdate)
	reconcile(s2, "t1", agent, "elsewhere", "")
	for _, want := range []struct {
		task  string
		state mesos.TaskState
		msg   string
	}{
		{"t1", mesos.TASK_RUNNING, "Reconciliation: Latest task state"},
		{"elsewhere", mesos.TASK_UNKNOWN, "Reconciliation: Task is unknown"},
	} {
		got := s2.Update(want.task)
		if *got.State != want.state || *got.Reason != mesos.REASON_RECONCILIATION || got.GetMessage() != want.msg || len(got.UUID) != 0 {
			t.Fatalf("%s after its agent re-registered: %v; want %v / RECONCILIATION %q", want.task, got.String(), want.state, want.msg)
		}
	}
	reconcile(s2)
	if got := s2.Update("t1"); *got.State != mesos.TASK_RUNNING {
		t.Fatalf("implicit reconciliation: %v; want TASK_RUNNING", got.String())
	}
	if processGone(pid) {
		t.Fatal("the master failover ended the task's executor")
	}

	clock.Advance(time.Second) // an allocation
	o := s2.Offers()[0]
	if o.AgentID.Value != agent || cpus(o) != 3.4 {
		t.Fatalf("offer on %s of %v cpus; want the agent's 4 less the running task's 0.5 and its executor's 0.1", o.AgentID.Value, cpus(o))
	}
	s2.MustCall(calls.Kill("t1", agent))
	if got := s2.Update("t1"); *got.State != mesos.TASK_KILLED || *got.Source != mesos.SOURCE_EXECUTOR || len(got.UUID) != 16 {
		t.Fatalf("KILL through the new master: %v; want TASK_KILLED from the same executor", got.String())
	}
}

// Status updates taken by an agent while it has no master are held and retried, not lost nor
// passed on: the framework gets them, in order and with their uuids, once the agent has
// re-registered (MESOS.md §3.4).
func TestUpdatesOfTheFailoverGapComeWhenTheAgentReregisters(t *testing.T) {
	t.Parallel()
	finished := make(chan struct{})
	var once sync.Once
	c, clock := failoverCluster(t, func(o *mesoslocal.Options) {
		o.OnStatusUpdate = func(_ string, st mesos.TaskStatus) {
			if st.GetState() == mesos.TASK_FINISHED {
				once.Do(func() { close(finished) })
			}
		}
	})
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	s.Launch(o, task("t1", o, testExecutor("e1", "basic"), "delay"))
	running := s.Update("t1", mesos.TASK_RUNNING) // not acknowledged: the master dies first

	failover(t, c, s)
	select {
	case <-finished:
	case <-time.After(wait):
		t.Fatal("the agent did not take the task's FINISHED")
	}
	s2, _ := resubscribe(t, c, s, paInfo())
	clock.Advance(reregisterDelay - time.Millisecond) // the head's retries fall due
	nothingSoFar(t, s2, "update passed on by an agent that has not re-registered", updateOf("t1"))

	clock.Advance(time.Millisecond)
	again := s2.Update("t1")
	if *again.State != mesos.TASK_RUNNING || string(again.UUID) != string(running.UUID) {
		t.Fatalf("first update after the re-registration: %v; want the unacknowledged TASK_RUNNING again, same uuid", again.String())
	}
	s2.Ack(again)
	fin := s2.Update("t1")
	if *fin.State != mesos.TASK_FINISHED || len(fin.UUID) != 16 {
		t.Fatalf("%v; want the held TASK_FINISHED with its uuid", fin.String())
	}
	s2.Ack(fin)
}

// An agent that does not re-register within the agent re-registration timeout is marked
// unreachable (MESOS.md §5.1): FAILURE for it, and its tasks, which the new master never knew,
// are TASK_UNREACHABLE (TASK_LOST without PARTITION_AWARE) to reconciliation, never
// TASK_UNKNOWN; they run on, and come back with the agent (MESOS.md §5.4).
func TestAnAgentNotBackWithinTheReregisterTimeoutIsUnreachable(t *testing.T) {
	t.Parallel()
	for _, tc := range partitionAwareness {
		t.Run(tc.name, func(t *testing.T) {
			c, clock := failoverCluster(t)
			s := subscribe(t, c.URL(), codec, tc.info())
			pid, st := runPID(t, s, "t1", "e1")
			s.Ack(st)
			agent := st.AgentID.Value

			failover(t, c, s, agent)
			s2, _ := resubscribe(t, c, s, tc.info())
			clock.Advance(reregisterTimeout - time.Millisecond)
			reconcile(s2, "t1", agent)
			nothingSoFar(t, s2, "answer or FAILURE for a held agent within the timeout", func(ev scheduler.Event) bool {
				return anyUpdate(ev) || ev.Type == scheduler.Event_FAILURE
			})

			clock.Advance(time.Millisecond)
			f := s2.Await("FAILURE", isType(scheduler.Event_FAILURE)).Failure
			if f.GetAgentID().GetValue() != agent || f.ExecutorID != nil {
				t.Fatalf("FAILURE %v; want one for the agent only", f.String())
			}
			nothingSoFar(t, s2, "task update for an agent whose tasks the new master never knew", updateOf("t1"))
			reconcile(s2, "t1", agent)
			un := s2.Update("t1")
			if *un.State != tc.want || *un.Reason != mesos.REASON_RECONCILIATION || len(un.UUID) != 0 || un.UnreachableTime == nil {
				t.Fatalf("reconciliation after the timeout: %v; want %v / RECONCILIATION with unreachable_time (partition-aware or not)", un.String(), tc.want)
			}
			if processGone(pid) {
				t.Fatal("marking the agent unreachable ended its executor")
			}

			if err := c.HealAgent(agent); err != nil {
				t.Fatal(err)
			}
			back := s2.Update("t1")
			if *back.State != mesos.TASK_RUNNING || *back.Reason != mesos.REASON_AGENT_REREGISTERED || len(back.UUID) != 0 {
				t.Fatalf("%v; want TASK_RUNNING / AGENT_REREGISTERED without uuid", back.String())
			}
		})
	}
}

// The new master offers only agents that have re-registered with it, and no offer of the old
// master is valid (MESOS.md §1.9.1: offers are not persisted).
func TestOffersAfterAMasterFailoverComeFromReregisteredAgentsOnly(t *testing.T) {
	t.Parallel()
	c, clock := failoverCluster(t, func(o *mesoslocal.Options) { o.Agents = 2 })
	ids := c.AgentIDs()
	s := subscribe(t, c.URL(), codec, paInfo())
	old := s.Offers()[0]

	failover(t, c, s, ids[1])
	s2, _ := resubscribe(t, c, s, paInfo())
	s2.Launch(old, task("t1", old, testExecutor("e1", "basic"), "run"))
	if st := s2.Update("t1"); *st.State != mesos.TASK_DROPPED || *st.Reason != mesos.REASON_INVALID_OFFERS {
		t.Fatalf("ACCEPT of the old master's offer: %v; want TASK_DROPPED / INVALID_OFFERS", st.String())
	}
	clock.Advance(time.Second)
	nothingSoFar(t, s2, "offer before any agent re-registered", isType(scheduler.Event_OFFERS))

	offeredAgents := func() []string {
		clock.Advance(time.Second) // an allocation
		var agents []string
		for _, o := range s2.Offers() {
			agents = append(agents, o.AgentID.Value)
		}
		return agents
	}
	clock.Advance(reregisterDelay)
	if got := offeredAgents(); len(got) != 1 || got[0] != ids[0] {
		t.Fatalf("offers of agents %v; want only %s, the one that re-registered", got, ids[0])
	}
	if err := c.HealAgent(ids[1]); err != nil {
		t.Fatal(err)
	}
	if got := offeredAgents(); len(got) != 1 || got[0] != ids[1] {
		t.Fatalf("offers of agents %v after the held agent re-registered; want %s (the other's is outstanding)", got, ids[1])
	}
}

// A framework's failover timeout does not outlive its master (Mesos's
// high-availability-framework-guide.md, MESOS-4659): a framework that does not re-subscribe to
// the new master is unknown to it until an agent running its tasks re-registers, then known
// but not connected, and never removed: its tasks run on. Once it re-subscribes, its failover
// timeout counts again from its next disconnection.
func TestAFrameworkThatDoesNotResubscribeKeepsItsTasks(t *testing.T) {
	t.Parallel()
	c, clock := failoverCluster(t)
	info := paInfo()
	info.FailoverTimeout = ptrTo(1.0)
	s := subscribe(t, c.URL(), codec, info)
	pid, st := runPID(t, s, "t1", "e1")
	s.Ack(st)
	agent := st.AgentID.Value
	revive := func(want int, wantBody string) {
		t.Helper()
		resp, body := rawPost(t, c.URL()+"/api/v1/scheduler", "application/json", "", "any",
			jsonCall(t, calls.Revive().With(calls.Framework(s.FrameworkID))))
		if resp.StatusCode != want || !strings.Contains(body, wantBody) {
			t.Fatalf("call of the framework: %d %q; want %d %q", resp.StatusCode, body, want, wantBody)
		}
	}

	failover(t, c, s)
	revive(http.StatusBadRequest, "Framework cannot be found")
	clock.Advance(reregisterDelay)
	revive(http.StatusForbidden, "Framework is not subscribed")
	tasks, _ := frameworkField(t, c, s.FrameworkID, "tasks").([]any)
	if len(tasks) != 1 || tasks[0].(map[string]any)["state"] != "TASK_RUNNING" || frameworkField(t, c, s.FrameworkID, "connected") != false {
		t.Fatalf("the new master's record of the framework: tasks %v, connected %v; want t1 RUNNING, not connected",
			tasks, frameworkField(t, c, s.FrameworkID, "connected"))
	}
	clock.Advance(time.Hour)
	if processGone(pid) {
		t.Fatal("the executor of a framework that did not re-subscribe was shut down")
	}

	s2, _ := resubscribe(t, c, s, info)
	reconcile(s2, "t1", agent)
	if got := s2.Update("t1"); *got.State != mesos.TASK_RUNNING {
		t.Fatalf("reconciliation after re-subscribing: %v; want TASK_RUNNING", got.String())
	}
	s2.Close()
	await.True(t, wait, "the master sees the framework disconnected", func() bool {
		return frameworkField(t, c, s.FrameworkID, "connected") == false
	})
	clock.Advance(time.Second + 500*time.Millisecond) // the failover timeout, then the shutdown grace period
	await.True(t, wait, "the executor shut down once the failover timeout ran out", func() bool { return processGone(pid) })
}

// POST /local/master/failover[?hold=<agent id>…].
func TestMasterFailoverEndpoint(t *testing.T) {
	t.Parallel()
	c := newCluster(t, func(o *mesoslocal.Options) { o.Agents = 2 })
	ids := c.AgentIDs()
	s := subscribe(t, c.URL(), codec, paInfo())
	masterID := func() string { return masterState(t, c)["id"].(string) }
	recovered := func() []string {
		var out []string
		for _, a := range masterState(t, c)["recovered_slaves"].([]any) {
			out = append(out, a.(map[string]any)["id"].(string))
		}
		return out
	}
	before := masterID()
	post := func(path string) int {
		resp, _ := rawPost(t, c.URL()+path, "", "", "", nil)
		return resp.StatusCode
	}
	if got := post("/local/master/failover?hold=nope-S9"); got != http.StatusConflict {
		t.Fatalf("failover holding an unknown agent: %d; want 409", got)
	}
	if masterID() != before || len(recovered()) != 0 {
		t.Fatal("a refused failover changed the master")
	}
	if got := post("/local/master/failover?hold=" + ids[1]); got != http.StatusNoContent {
		t.Fatalf("failover: %d; want 204", got)
	}
	select {
	case <-s.Closed():
	case <-time.After(wait):
		t.Fatal("the framework's stream outlived its master")
	}
	if masterID() == before {
		t.Fatal("the master that took over has the old master's id")
	}
	waitAgentState(t, c, ids[1], "partitioned")
	await.True(t, wait, "the agent not held re-registers", func() bool {
		r := recovered()
		return len(r) == 1 && r[0] == ids[1]
	})
	if got := post("/local/agents/" + ids[1] + "/heal"); got != http.StatusNoContent {
		t.Fatalf("heal of the held agent: %d; want 204", got)
	}
	if r := recovered(); len(r) != 0 {
		t.Fatalf("recovered agents %v after the held one was healed; want none", r)
	}
	resp, err := http.Get(c.URL() + "/local/master/failover")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Fatalf("GET /local/master/failover: %d; want 405", resp.StatusCode)
	}
}

// partitionAwareness is a framework with and without PARTITION_AWARE, and the state Mesos gives
// a task on an unreachable agent for each.
var partitionAwareness = []struct {
	name string
	info func() *mesos.FrameworkInfo
	want mesos.TaskState
}{
	{"partition-aware", paInfo, mesos.TASK_UNREACHABLE},
	{"not partition-aware", func() *mesos.FrameworkInfo { return frameworkInfo() }, mesos.TASK_LOST},
}
