package mesoslocal_test

import (
	"strconv"
	"syscall"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"

	"github.com/ejcloud/ejcloud/integration/mesoslocal"
	"github.com/ejcloud/ejcloud/internal/await"
)

// Items 34 and 35: a partitioned agent becomes unreachable (its tasks UNREACHABLE, FAILURE
// for the agent, its processes untouched); healed, it re-registers and its tasks come back.
func TestPartitionAndHeal(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	pid, st := runPID(t, s, "t1", "e1")
	s.Ack(st)
	held := s.Offers()[0]
	agent := held.AgentID.Value
	if err := c.PartitionAgent(agent); err != nil {
		t.Fatal(err)
	}
	if ev := s.Await("RESCIND", isType(scheduler.Event_RESCIND)); ev.Rescind.OfferID != held.ID {
		t.Fatalf("RESCIND %v; want the held offer %v", ev.Rescind.OfferID, held.ID)
	}
	un := s.Update("t1")
	if *un.State != mesos.TASK_UNREACHABLE || *un.Reason != mesos.REASON_AGENT_REMOVED || un.UnreachableTime == nil || len(un.UUID) != 0 {
		t.Fatalf("%v; want TASK_UNREACHABLE / AGENT_REMOVED with unreachable_time, no uuid", un.String())
	}
	f := s.Await("FAILURE", isType(scheduler.Event_FAILURE)).Failure
	if f.GetAgentID().GetValue() != agent || f.ExecutorID != nil {
		t.Fatalf("FAILURE %v; want one for the agent only", f.String())
	}
	if processGone(pid) {
		t.Fatal("partitioning an agent killed its executor")
	}
	// Item 28: the master does not know an unreachable task; the KILL is answered as a
	// reconciliation and forgotten.
	s.MustCall(calls.Kill("t1", agent))
	if ans := s.Update("t1"); *ans.State != mesos.TASK_UNREACHABLE || *ans.Reason != mesos.REASON_RECONCILIATION {
		t.Fatalf("answer to the KILL of an unreachable task: %v; want TASK_UNREACHABLE / RECONCILIATION", ans.String())
	}
	if err := c.HealAgent(agent); err != nil {
		t.Fatal(err)
	}
	back := s.Update("t1")
	if *back.State != mesos.TASK_RUNNING || *back.Reason != mesos.REASON_AGENT_REREGISTERED || len(back.UUID) != 0 {
		t.Fatalf("%v; want TASK_RUNNING / AGENT_REREGISTERED without uuid", back.String())
	}
	s.None("the forgotten KILL made after the heal", 500*time.Millisecond, updateOf("t1"))
	if processGone(pid) {
		t.Fatal("the forgotten KILL killed the executor after the heal")
	}
	s.MustCall(calls.Kill("t1", agent)) // the task id is usable again
	s.Update("t1", mesos.TASK_KILLED)
}

// A KILL sent while an agent is disconnected is remembered, but not once the agent is marked
// unreachable: the master forgets the agent's record, and the task runs on after the heal.
func TestAKillHeldForADisconnectedAgentIsForgottenWhenItIsUnreachable(t *testing.T) {
	t.Parallel()
	c := newCluster(t, func(o *mesoslocal.Options) { o.AgentPingTimeout = 500 * time.Millisecond }) // unreachable after 1.5 s
	s, pid, agent := partitionedTask(t, c)
	s.MustCall(calls.Kill("t1", agent)) // held: the agent is disconnected, not yet unreachable
	if un := s.Update("t1"); *un.State != mesos.TASK_UNREACHABLE || *un.Reason != mesos.REASON_AGENT_REMOVED {
		t.Fatalf("%v; want TASK_UNREACHABLE / AGENT_REMOVED (no answer to the held KILL before)", un.String())
	}
	if err := c.HealAgent(agent); err != nil {
		t.Fatal(err)
	}
	s.Update("t1", mesos.TASK_RUNNING)
	s.None("the held KILL made after the heal", 500*time.Millisecond, updateOf("t1"))
	if processGone(pid) {
		t.Fatal("the held KILL killed the executor after the heal")
	}
}

// partitionedTask runs task t1 (executor e1, pid) for a partition-aware framework, then cuts its
// agent off.
func partitionedTask(t *testing.T, c *mesoslocal.Cluster) (s *sched, pid int, agent string) {
	t.Helper()
	s = subscribe(t, c.URL(), codec, paInfo())
	pid, st := runPID(t, s, "t1", "e1")
	s.Ack(st)
	agent = st.AgentID.Value
	if err := c.PartitionAgent(agent); err != nil {
		t.Fatal(err)
	}
	return s, pid, agent
}

// Item 36: an agent marked gone loses its tasks (GONE_BY_OPERATOR), its executors are killed,
// and it may not come back.
func TestMarkAgentGone(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s, pid, agent := partitionedTask(t, c)
	s.Update("t1", mesos.TASK_UNREACHABLE)
	if err := c.MarkAgentGone(agent); err != nil {
		t.Fatal(err)
	}
	gone := s.Update("t1")
	if *gone.State != mesos.TASK_GONE_BY_OPERATOR || *gone.Reason != mesos.REASON_AGENT_REMOVED_BY_OPERATOR || len(gone.UUID) != 0 {
		t.Fatalf("%v; want TASK_GONE_BY_OPERATOR / AGENT_REMOVED_BY_OPERATOR", gone.String())
	}
	await.True(t, wait, "executor of a gone agent killed", func() bool { return processGone(pid) })
	if err := c.HealAgent(agent); err == nil {
		t.Fatal("a gone agent re-registered")
	}
}

// Item 37: an agent's broken connection loses the tasks of frameworks that do not checkpoint
// at once (TASK_LOST / AGENT_DISCONNECTED, even when partition-aware); checkpointing ones wait.
func TestDisconnectedAgentAndCheckpointing(t *testing.T) {
	t.Parallel()
	slow := func(o *mesoslocal.Options) { o.AgentPingTimeout = time.Hour }
	for _, checkpoint := range []bool{false, true} {
		c := newCluster(t, slow)
		info := paInfo()
		info.Checkpoint = ptrTo(checkpoint)
		s := subscribe(t, c.URL(), codec, info)
		o := s.Offers()[0]
		s.Launch(o, task("t1", o, testExecutor("e1", "basic"), "run"))
		s.Ack(s.Update("t1", mesos.TASK_RUNNING))
		if err := c.PartitionAgent(o.AgentID.Value); err != nil {
			t.Fatal(err)
		}
		if !checkpoint {
			st := s.Update("t1")
			if *st.State != mesos.TASK_LOST || *st.Reason != mesos.REASON_AGENT_DISCONNECTED || len(st.UUID) != 0 {
				t.Fatalf("non-checkpointing: %v; want TASK_LOST / AGENT_DISCONNECTED", st.String())
			}
			continue
		}
		s.None("update for a checkpointing framework's task before the agent is unreachable", 500*time.Millisecond, updateOf("t1"))
	}
}

// Item 38: an agent restart keeps a checkpointing framework's tasks: the executor re-subscribes
// and its task finishes normally; an executor that does not re-subscribe in time is gone.
func TestAgentRestartRecoversExecutors(t *testing.T) {
	t.Parallel()
	// As in real Mesos, recovery (2 s) ends long before the master gives up on the agent.
	c := newCluster(t, func(o *mesoslocal.Options) {
		o.ExecutorReregistrationTimeout = 2 * time.Second
		o.AgentPingTimeout = time.Hour
	})
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	agent := o.AgentID.Value
	s.Launch(o, task("kept", o, testExecutor("e1", "basic"), "hold"), task("frozen", o, testExecutor("e2", "basic"), "pid"))
	s.Ack(s.Update("kept", mesos.TASK_RUNNING))
	st := s.Update("frozen", mesos.TASK_RUNNING)
	s.Ack(st)
	frozen, _ := strconv.Atoi(string(st.Data))
	if err := c.KillAgent(agent); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(frozen, syscall.SIGSTOP) // this executor cannot re-subscribe
	t.Cleanup(func() { syscall.Kill(frozen, syscall.SIGKILL) })
	if err := c.RestartAgent(agent); err != nil {
		t.Fatal(err)
	}
	lost := s.Update("frozen")
	if *lost.State != mesos.TASK_GONE || *lost.Reason != mesos.REASON_EXECUTOR_REREGISTRATION_TIMEOUT {
		t.Fatalf("%v; want TASK_GONE / EXECUTOR_REREGISTRATION_TIMEOUT", lost.String())
	}
	// Gone only once its container is destroyed: a task reported gone must not run on, or its
	// relaunch would run beside it.
	if alive(frozen) {
		t.Fatalf("TASK_GONE reported while the executor %d that did not re-register is alive", frozen)
	}
	s.Ack(lost)
	s.MustCall(calls.Message(agent, "e1", []byte("finish:kept")))
	fin := s.Update("kept")
	if *fin.State != mesos.TASK_FINISHED || *fin.Source != mesos.SOURCE_EXECUTOR {
		t.Fatalf("%v; want the kept task to finish normally after the restart", fin.String())
	}
}

// Fault injection over HTTP: POST /local/agents/{id}/{action}.
func TestFaultInjectionEndpoints(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	id := c.AgentIDs()[0]
	wantPosts(t, c, []postCase{
		{"/local/agents/" + id + "/partition", 204},
		{"/local/agents/" + id + "/partition", 409}, // already partitioned
		{"/local/agents/" + id + "/heal", 204},
		{"/local/agents/" + id + "/explode", 404},
		{"/local/agents/nope-S9/kill", 409},
		{"/local/agents/" + id + "/kill", 204},
		{"/local/agents/" + id + "/restart", 204},
		{"/local/agents/" + id + "/gone", 204},
		{"/local/agents/" + id + "/restart", 409},
	})
	waitAgentState(t, c, id, "gone")
}

// postCase is a POST to a fault route and the status code it must answer.
type postCase struct {
	path string
	want int
}

// wantPosts makes each POST to c in turn and checks its answer.
func wantPosts(t *testing.T, c *mesoslocal.Cluster, cases []postCase) {
	t.Helper()
	for _, tc := range cases {
		resp, _ := rawPost(t, c.URL()+tc.path, "", "", "", nil)
		if resp.StatusCode != tc.want {
			t.Fatalf("POST %s = %d; want %d", tc.path, resp.StatusCode, tc.want)
		}
	}
}

// Master::markUnreachable takes one time for all the updates of an agent it marks unreachable, and
// Master::__removeSlave gives it to every one of them as unreachable_time: TASK_UNREACHABLE for a
// partition-aware framework, TASK_LOST for another alike. Master::_reconcileTasks (case 4, task
// unknown on an unreachable agent) answers with that time too, partition-aware or not.
func TestUnreachableTimeWhetherPartitionAwareOrNot(t *testing.T) {
	t.Parallel()
	for _, tc := range partitionAwareness {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			s := subscribe(t, c.URL(), codec, tc.info())
			_, st := runPID(t, s, "t1", "e1")
			s.Ack(st)
			agent := st.AgentID.Value
			if err := c.PartitionAgent(agent); err != nil {
				t.Fatal(err)
			}
			un := s.Update("t1")
			if *un.State != tc.want || un.GetReason() != mesos.REASON_AGENT_REMOVED || un.GetSource() != mesos.SOURCE_MASTER ||
				len(un.UUID) != 0 || un.UnreachableTime == nil {
				t.Fatalf("%v; want %v / AGENT_REMOVED from the master, no uuid, with unreachable_time", un.String(), tc.want)
			}
			reconcile(s, "t1", agent)
			ans := s.Update("t1")
			if *ans.State != tc.want || ans.GetReason() != mesos.REASON_RECONCILIATION || ans.UnreachableTime == nil ||
				ans.UnreachableTime.Nanoseconds != un.UnreachableTime.Nanoseconds {
				t.Fatalf("reconciliation: %v; want %v / RECONCILIATION with the unreachable_time %v of the update",
					ans.String(), tc.want, un.UnreachableTime.String())
			}
		})
	}
}
