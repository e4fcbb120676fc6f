package mesoslocal_test

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"

	"github.com/ejcloud/ejcloud/integration/mesoslocal"
)

// slowFetch serves one file, holding every request until release is called.
func slowFetch(t *testing.T) (url string, release func()) {
	gate := make(chan struct{})
	var once sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-gate:
		case <-r.Context().Done():
			return
		}
		w.Write([]byte("payload"))
	}))
	rel := func() { once.Do(func() { close(gate) }) }
	t.Cleanup(func() { rel(); srv.Close() })
	return srv.URL + "/payload.bin", rel
}

func withURI(e *mesos.ExecutorInfo, uri string) *mesos.ExecutorInfo {
	e.Command.URIs = append(e.Command.URIs, mesos.CommandInfo_URI{Value: uri})
	return e
}

// Items 23 and 28 (kill before delivery): no STAGING update is ever sent, but reconciliation
// reports STAGING while the executor is still being fetched; a kill then answers
// TASK_KILLED / REASON_TASK_KILLED_DURING_LAUNCH, and the executor, never sent a task, is shut
// down once it subscribes.
func TestStagingOnlyThroughReconciliationAndKillDuringLaunch(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	url, release := slowFetch(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	s.Launch(o, task("t1", o, withURI(testExecutor("e1", "basic"), url), "finish"))
	s.MustCall(calls.Reconcile(calls.ReconcileTasks(map[string]string{"t1": o.AgentID.Value})))
	st := s.Update("t1")
	if *st.State != mesos.TASK_STAGING || *st.Reason != mesos.REASON_RECONCILIATION || len(st.UUID) != 0 {
		t.Fatalf("reconciliation during fetch: %v; want TASK_STAGING / RECONCILIATION without uuid", st.String())
	}
	s.MustCall(calls.Kill("t1", o.AgentID.Value))
	st = s.Update("t1")
	if *st.State != mesos.TASK_KILLED || *st.Reason != mesos.REASON_TASK_KILLED_DURING_LAUNCH || len(st.UUID) != 16 || *st.Source != mesos.SOURCE_AGENT {
		t.Fatalf("kill during launch: %v; want TASK_KILLED / KILLED_DURING_LAUNCH from the agent with a uuid", st.String())
	}
	s.Ack(st)
	release()
	// Left with nothing to run, the executor is shut down when it subscribes (Slave::subscribe).
	if f := s.Await("FAILURE", isType(scheduler.Event_FAILURE)).Failure; f.GetExecutorID().GetValue() != "e1" {
		t.Fatalf("FAILURE %v; want executor e1's", f.String())
	}
	s.None("STAGING update", 300*time.Millisecond, updateOf("t1", mesos.TASK_STAGING))
}

// Item 25: one update at a time per task; the head is re-sent until acknowledged.
func TestUpdatesAreOrderedAndRetried(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	s.Launch(o, task("t1", o, testExecutor("e1", "basic"), "finish"))
	running := s.Update("t1")
	again := s.Update("t1")
	if *again.State != mesos.TASK_RUNNING || string(again.UUID) != string(running.UUID) {
		t.Fatalf("while RUNNING is unacknowledged the next update is %v; want RUNNING re-sent with the same uuid", again.String())
	}
	s.MustCall(calls.Acknowledge(o.AgentID.Value, "t1", []byte("0123456789abcdef"))) // a wrong uuid is ignored
	if st := s.Update("t1"); *st.State != mesos.TASK_RUNNING {
		t.Fatalf("after an ack with a wrong uuid: %v; want RUNNING again", st.String())
	}
	s.Ack(running)
	s.Ack(running) // a duplicate ack is ignored
	if st := s.Update("t1", mesos.TASK_FINISHED, mesos.TASK_RUNNING); *st.State != mesos.TASK_FINISHED {
		t.Fatalf("after acknowledging RUNNING: %v; want FINISHED", st.String())
	}
}

// Item 26: resources are free when the master learns the task's latest state is terminal,
// before any ack: the agent sends only the head of a task's updates, and the latest state with
// it, so the master learns of an end queued behind an unacknowledged update when the head is
// sent again (its retry, 10 s on). mesos-local told the master at once: resources came back at
// once, where Mesos holds them until the retry.
func TestResourcesFreedBeforeTheAck(t *testing.T) {
	t.Parallel()
	clock := mesoslocal.NewManualClock(time.Unix(1_800_000_000, 0))
	finished := make(chan struct{})
	var once sync.Once
	c := newCluster(t, func(o *mesoslocal.Options) {
		o.Clock = clock
		o.AllocationInterval = 100 * time.Millisecond
		o.StatusUpdateRetryMin = 10 * time.Second // Mesos's
		o.OnStatusUpdate = func(_ string, st mesos.TaskStatus) {
			if st.GetState() == mesos.TASK_FINISHED {
				once.Do(func() { close(finished) })
			}
		}
	})
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	tk := task("t1", o, testExecutor("e1", "basic"), "finish")
	tk.Resources = scalars(3, 2048)
	s.Launch(o, tk)
	s.Update("t1", mesos.TASK_RUNNING) // never acknowledged
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
		t.Fatal("the agent did not take the task's FINISHED within 10 s")
	}
	// The head (RUNNING) went at 0 s; its retry is due at 10 s.
	for range 9 {
		clock.Advance(time.Second)
		o := s.Offers()[0]
		if got := cpus(o); got != 0.9 {
			t.Fatalf("offered %v cpus before the retry of the head; want 0.9 (the finished task's 3 cpus held)", got)
		}
		s.MustCall(calls.Decline(o.ID).With(calls.RefuseSeconds(0)))
	}
	clock.Advance(time.Second) // the retry: RUNNING again, with latest_state FINISHED
	s.Update("t1", mesos.TASK_RUNNING)
	for range 20 {
		o := s.Offers()[0]
		if cpus(o) >= 3 {
			return // the finished task's 3 cpus are back (with the 0.9, or in an offer of their own)
		}
		s.MustCall(calls.Decline(o.ID).With(calls.RefuseSeconds(0)))
		clock.Advance(100 * time.Millisecond)
	}
	t.Fatal("the finished task's resources were not offered after the retry told the master")
}

// Item 27: once a terminal update is acknowledged the task is forgotten.
func TestAcknowledgedTerminalTaskIsForgotten(t *testing.T) {
	t.Parallel()
	for _, pa := range []bool{true, false} {
		c := newCluster(t)
		info := frameworkInfo()
		want := mesos.TASK_LOST
		if pa {
			info, want = paInfo(), mesos.TASK_GONE
		}
		s := subscribe(t, c.URL(), codec, info)
		o := s.Offers()[0]
		s.Launch(o, task("t1", o, testExecutor("e1", "basic"), "finish"))
		s.Ack(s.Update("t1", mesos.TASK_RUNNING))
		s.Ack(s.Update("t1", mesos.TASK_FINISHED))
		// Implicit reconciliation must no longer mention it...
		s.MustCall(calls.Reconcile())
		s.None("implicit reconciliation of an acknowledged task", 300*time.Millisecond, updateOf("t1"))
		// ...and explicit reconciliation with its agent answers GONE (PA) or LOST.
		s.MustCall(calls.Reconcile(calls.ReconcileTasks(map[string]string{"t1": o.AgentID.Value})))
		if st := s.Update("t1"); *st.State != want || *st.Reason != mesos.REASON_RECONCILIATION {
			t.Fatalf("PA=%v: %v; want %v / RECONCILIATION", pa, st.String(), want)
		}
	}
}

// Item 28: the other KILL paths.
func TestKillPaths(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	s.Launch(o, task("t1", o, testExecutor("e1", "basic"), "run"))
	s.Ack(s.Update("t1", mesos.TASK_RUNNING))

	s.MustCall(calls.Kill("t1", "some-other-agent")) // a mismatching agent id is ignored
	s.None("update after a KILL naming another agent", 300*time.Millisecond, updateOf("t1"))

	s.MustCall(calls.Kill("t1", o.AgentID.Value)) // delivered: the executor gets KILL
	if st := s.Update("t1"); *st.State != mesos.TASK_KILLED || *st.Source != mesos.SOURCE_EXECUTOR {
		t.Fatalf("kill of a running task: %v; want TASK_KILLED from the executor", st.String())
	}

	s.MustCall(calls.Kill("nope", "")) // unknown: answered by reconciliation
	if st := s.Update("nope"); *st.State != mesos.TASK_UNKNOWN || *st.Reason != mesos.REASON_RECONCILIATION {
		t.Fatalf("kill of an unknown task: %v; want TASK_UNKNOWN / RECONCILIATION", st.String())
	}
}

// Item 29: an executor that exits with a live task fails it and reports its wait status.
func TestExecutorExitFailsItsTasks(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	s.Launch(o, task("t1", o, testExecutor("e1", "basic"), "exit3"))
	s.Ack(s.Update("t1", mesos.TASK_RUNNING))
	st := s.Update("t1")
	if *st.State != mesos.TASK_FAILED || *st.Reason != mesos.REASON_EXECUTOR_TERMINATED || len(st.UUID) != 16 || *st.Source != mesos.SOURCE_AGENT {
		t.Fatalf("%v; want TASK_FAILED / EXECUTOR_TERMINATED from the agent with a uuid", st.String())
	}
	f := s.Await("FAILURE", isType(scheduler.Event_FAILURE)).Failure
	if f.GetExecutorID().GetValue() != "e1" || f.GetAgentID().GetValue() != o.AgentID.Value || f.GetStatus() != 768 {
		t.Fatalf("FAILURE %v; want executor e1 with wait status 768 (exit 3)", f.String())
	}
}

// Item 29: FAILURE comes on a clean exit too, with wait status 0, and fails no task.
func TestFailureOnACleanExecutorExit(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	// A grace period far longer than the executor takes to exit, even on a loaded machine: at
	// its end the executor would be SIGKILLed (status 9).
	exec := testExecutor("e1", "basic")
	exec.ShutdownGracePeriod = &mesos.DurationInfo{Nanoseconds: int64(30 * time.Second)}
	s.Launch(o, task("t1", o, exec, "pid"))
	st := s.Update("t1", mesos.TASK_RUNNING)
	s.Ack(st)
	pid, _ := strconv.Atoi(string(st.Data))
	s.MustCall(calls.Kill("t1", o.AgentID.Value))
	s.Ack(s.Update("t1", mesos.TASK_KILLED))
	// The basic executor exits 0 on SHUTDOWN.
	s.MustCall(calls.Shutdown("e1", o.AgentID.Value))
	f := s.Await("FAILURE", isType(scheduler.Event_FAILURE)).Failure
	if f.GetExecutorID().GetValue() != "e1" || f.GetAgentID().GetValue() != o.AgentID.Value || f.Status == nil || f.GetStatus() != 0 {
		t.Fatalf("FAILURE %v; want executor e1 with wait status 0", f.String())
	}
	if !processGone(pid) {
		t.Fatalf("executor %d still alive", pid)
	}
}

// Items 29 and 42: an executor that exits while a terminal update of one of its tasks is not
// yet acknowledged stays on the agent, TERMINATED, until that acknowledgement (Mesos's
// Slave::executorTerminated removes it only when it has no incomplete task), whereas the master
// forgets it at once (Master::exitedExecutor): it is in no offer's executor_ids and not in
// /master/state. A task launched meanwhile with its id is sent to start a new executor and
// dropped (Slave::__run: "Master wants to launch executor, but one already exists"), and the
// agent reports the executor's exit again (FAILURE, status -1); a second task for it in the same
// ACCEPT, which the master sends to the executor it believes it has just started, is dropped as
// "Executor terminated". A KILL of the failed task is ignored (Slave::kill). Once the TASK_FAILED
// is acknowledged the executor is gone and its id starts a new one.
func TestAnExitedExecutorHoldsItsIDUntilItsTerminalUpdatesAreAcknowledged(t *testing.T) {
	t.Parallel()
	for _, pa := range []bool{true, false} {
		c := newCluster(t)
		info, dropped := frameworkInfo(), mesos.TASK_LOST
		if pa {
			info, dropped = paInfo(), mesos.TASK_DROPPED
		}
		s := subscribe(t, c.URL(), codec, info)
		o := s.Offers()[0]
		agent := o.AgentID.Value
		s.Launch(o, task("t1", o, testExecutor("e1", "basic"), "exit3"))
		s.Ack(s.Update("t1", mesos.TASK_RUNNING))
		failed := s.Update("t1", mesos.TASK_FAILED) // acknowledged only at the end
		s.Await("FAILURE of e1", isType(scheduler.Event_FAILURE))

		o = wholeAgentOffer(s)
		if len(o.ExecutorIDs) != 0 {
			t.Fatalf("PA=%v: offer lists executors %v; the master forgot e1 when it exited", pa, o.ExecutorIDs)
		}
		if execs := frameworkField(t, c, s.FrameworkID, "executors").([]any); len(execs) != 0 {
			t.Fatalf("PA=%v: /master/state lists executors %v; want none", pa, execs)
		}
		fws := agentState(t, agentURL(o)).Frameworks
		if len(fws) != 1 || !slices.Equal(executorIDs(fws[0].Executors), []string{"e1"}) || len(fws[0].CompletedExecutors) != 0 {
			t.Fatalf("PA=%v: the agent's frameworks %+v; want e1 still among its executors", pa, fws)
		}

		s.MustCall(calls.Kill("t1", agent)) // ignored: its executor is TERMINATED
		e := testExecutor("e1", "basic")
		s.Launch(o, task("t2", o, e, "run"), task("t3", o, e, "run"))
		for _, want := range []struct{ task, msg, executor string }{
			{"t2", "Master wants to launch executor, but one already exists", "e1"},
			{"t3", "Executor terminated", ""}, // Mesos names no executor in this one
		} {
			st := s.Update(want.task)
			if *st.State != dropped || st.GetReason() != mesos.REASON_EXECUTOR_TERMINATED || st.GetMessage() != want.msg ||
				st.GetSource() != mesos.SOURCE_AGENT || len(st.UUID) != 16 || st.GetExecutorID().GetValue() != want.executor {
				t.Fatalf("PA=%v: %s: %v; want %v / EXECUTOR_TERMINATED %q from the agent, with a uuid and executor id %q",
					pa, want.task, st.String(), dropped, want.msg, want.executor)
			}
			s.Ack(st)
		}
		if f := s.Await("FAILURE of e1 again", isType(scheduler.Event_FAILURE)).Failure; f.GetExecutorID().GetValue() != "e1" || f.GetStatus() != -1 {
			t.Fatalf("PA=%v: FAILURE %v; want e1's exit reported again, status -1", pa, f.String())
		}

		s.Ack(failed)
		nothingSoFar(t, s, "an answer to the KILL of t1", func(ev scheduler.Event) bool {
			return updateOf("t1")(ev) && ev.Update.Status.GetState() != mesos.TASK_FAILED // the head, re-sent before the ack
		})
		o = offerWith(s, 0.6)
		s.Launch(o, task("t4", o, testExecutor("e1", "basic"), "run"))
		if st := s.Update("t4"); *st.State != mesos.TASK_RUNNING {
			t.Fatalf("PA=%v: t4 after t1's end was acknowledged: %v; want TASK_RUNNING on a new e1", pa, st.String())
		}
	}
}

// wholeAgentOffer declines offers until one holds the whole agent: one made after everything
// that ran there has ended.
func wholeAgentOffer(s *sched) mesos.Offer {
	for {
		for _, o := range s.Offers() {
			if cpus(o) >= 4 {
				return o
			}
			s.MustCall(calls.Decline(o.ID).With(calls.RefuseSeconds(0)))
		}
	}
}

// Item 28, MESOS.md §3.5: a KILL of the only task of an executor that is still REGISTERING
// answers TASK_KILLED but leaves the executor be (Mesos's Slave::kill, REGISTERING case); a task
// sent to it before it subscribes is queued and launched after SUBSCRIBED, as usual.
func TestAKillDuringLaunchLeavesTheRegisteringExecutorForLaterTasks(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	url, release := slowFetch(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	s.Launch(o, task("t1", o, withURI(testExecutor("e1", "basic"), url), "run"))
	s.MustCall(calls.Kill("t1", o.AgentID.Value))
	st := s.Update("t1")
	if *st.State != mesos.TASK_KILLED || *st.Reason != mesos.REASON_TASK_KILLED_DURING_LAUNCH {
		t.Fatalf("kill during launch: %v; want TASK_KILLED / KILLED_DURING_LAUNCH", st.String())
	}
	s.Ack(st)
	o = s.Offers()[0]
	s.Launch(o, task("t2", o, withURI(testExecutor("e1", "basic"), url), "run"))
	release()
	if st := s.Update("t2"); *st.State != mesos.TASK_RUNNING {
		t.Fatalf("t2, sent to the registering e1: %v; want TASK_RUNNING", st.String())
	}
}

// Item 30: SHUTDOWN, then SIGKILL after the grace period; leftover tasks fail.
func TestShutdownKillsAfterTheGracePeriod(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	s.Launch(o, task("t1", o, testExecutor("e1", "ignoreshutdown"), "pid"))
	st := s.Update("t1", mesos.TASK_RUNNING)
	s.Ack(st)
	pid, _ := strconv.Atoi(string(st.Data))
	s.MustCall(calls.Shutdown("e1", o.AgentID.Value))
	if st := s.Update("t1"); *st.State != mesos.TASK_FAILED || *st.Reason != mesos.REASON_EXECUTOR_TERMINATED {
		t.Fatalf("%v; want TASK_FAILED / EXECUTOR_TERMINATED", st.String())
	}
	if f := s.Await("FAILURE", isType(scheduler.Event_FAILURE)).Failure; f.GetStatus() != 9 {
		t.Fatalf("FAILURE status %d; want 9 (SIGKILL)", f.GetStatus())
	}
	if !processGone(pid) {
		t.Fatalf("executor %d still alive", pid)
	}
}

// Item 31: an executor that never subscribes is killed at the registration timeout.
func TestExecutorRegistrationTimeout(t *testing.T) {
	t.Parallel()
	c := newCluster(t, func(o *mesoslocal.Options) { o.ExecutorRegistrationTimeout = time.Second })
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	s.Launch(o, task("t1", o, testExecutor("e1", "nosubscribe"), "run"))
	st := s.Update("t1")
	if *st.State != mesos.TASK_FAILED || *st.Reason != mesos.REASON_EXECUTOR_REGISTRATION_TIMEOUT || len(st.UUID) != 16 {
		t.Fatalf("%v; want TASK_FAILED / EXECUTOR_REGISTRATION_TIMEOUT with a uuid", st.String())
	}
}

// Item 32: implicit reconciliation answers every active task with its latest state, no uuid
// and no data.
func TestImplicitReconciliation(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	s.Launch(o, task("t1", o, testExecutor("e1", "basic"), "pid"), task("t2", o, testExecutor("e1", "basic"), "run"))
	s.Ack(s.Update("t1", mesos.TASK_RUNNING))
	s.Ack(s.Update("t2", mesos.TASK_RUNNING))
	s.MustCall(calls.Reconcile())
	for _, id := range []string{"t1", "t2"} {
		st := s.Update(id)
		if *st.State != mesos.TASK_RUNNING || *st.Reason != mesos.REASON_RECONCILIATION || len(st.UUID) != 0 || len(st.Data) != 0 ||
			st.GetMessage() != "Reconciliation: Latest task state" {
			t.Fatalf("%s: %v; want TASK_RUNNING / RECONCILIATION without uuid or data", id, st.String())
		}
	}
}

// Item 33: explicit reconciliation answers by the table of MESOS.md §4.2. The observer of
// status updates sees the answers about tasks the master does not know (their first word: a
// launch that never reached an agent), not those that repeat a known task's state.
func TestExplicitReconciliation(t *testing.T) {
	t.Parallel()
	for _, pa := range []bool{true, false} {
		var mu sync.Mutex
		observed := map[string]bool{}
		c := newCluster(t, func(o *mesoslocal.Options) {
			o.Agents = 3
			o.OnStatusUpdate = func(_ string, st mesos.TaskStatus) {
				if st.GetReason() == mesos.REASON_RECONCILIATION {
					mu.Lock()
					observed[st.TaskID.Value] = true
					mu.Unlock()
				}
			}
		})
		ids := c.AgentIDs()
		info := frameworkInfo()
		if pa {
			info = paInfo()
		}
		s := subscribe(t, c.URL(), codec, info)
		o := s.OfferOn(ids[0])
		s.Launch(o, task("known", o, testExecutor("e1", "basic"), "run"))
		s.Ack(s.Update("known", mesos.TASK_RUNNING))
		if err := c.PartitionAgent(ids[1]); err != nil {
			t.Fatal(err)
		}
		waitAgentState(t, c, ids[1], "unreachable")
		if err := c.MarkAgentGone(ids[2]); err != nil {
			t.Fatal(err)
		}
		pick := func(paState mesos.TaskState) mesos.TaskState {
			if pa {
				return paState
			}
			return mesos.TASK_LOST
		}
		cases := []struct {
			task, agent string
			want        mesos.TaskState
		}{
			{"known", ids[0], mesos.TASK_RUNNING},
			{"unknown-on-registered", ids[0], pick(mesos.TASK_GONE)},
			{"unknown-on-unreachable", ids[1], pick(mesos.TASK_UNREACHABLE)},
			{"unknown-on-gone", ids[2], pick(mesos.TASK_GONE_BY_OPERATOR)},
			{"unknown-agent", "nope-S9", pick(mesos.TASK_UNKNOWN)},
			{"no-agent", "", pick(mesos.TASK_UNKNOWN)},
		}
		req := map[string]string{}
		for _, tc := range cases {
			req[tc.task] = tc.agent
		}
		s.MustCall(calls.Reconcile(calls.ReconcileTasks(req)))
		for _, tc := range cases {
			st := s.Update(tc.task)
			if *st.State != tc.want || *st.Reason != mesos.REASON_RECONCILIATION || len(st.UUID) != 0 {
				t.Fatalf("PA=%v %s: %v; want %v / RECONCILIATION without uuid", pa, tc.task, st.String(), tc.want)
			}
			if pa && tc.want == mesos.TASK_UNREACHABLE && st.UnreachableTime == nil {
				t.Fatalf("TASK_UNREACHABLE without unreachable_time: %v", st.String())
			}
		}
		mu.Lock()
		for _, tc := range cases {
			if unknown := tc.task != "known"; observed[tc.task] != unknown {
				t.Errorf("PA=%v %s: observed %v; want %v (answers about unknown tasks only)", pa, tc.task, observed[tc.task], unknown)
			}
		}
		mu.Unlock()
	}
}

func waitAgentState(t *testing.T, c *mesoslocal.Cluster, id, state string) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		for _, sl := range masterState(t, c)["slaves"].([]any) {
			if m := sl.(map[string]any); m["id"] == id && m["local_state"] == state {
				return
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("agent %s not %s within %v", id, state, wait)
}
