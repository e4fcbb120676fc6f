package mesoslocal_test

import (
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/executor"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"

	"github.com/ejcloud/ejcloud/integration/mesoslocal"
	"github.com/ejcloud/ejcloud/internal/await"
)

func withID(info *mesos.FrameworkInfo, id string) *mesos.FrameworkInfo {
	info.ID = &mesos.FrameworkID{Value: id}
	return info
}

func frameworkField(t *testing.T, c *mesoslocal.Cluster, id, field string) any {
	for _, f := range masterState(t, c)["frameworks"].([]any) {
		if fm := f.(map[string]any); fm["id"] == id {
			return fm[field]
		}
	}
	return nil
}

func processGone(pid int) bool {
	return syscall.Kill(pid, 0) != nil
}

// runPID launches a task that reports its executor's pid and returns the pid.
func runPID(t *testing.T, s *sched, taskID, execID string) (int, mesos.TaskStatus) {
	t.Helper()
	o := s.Offers()[0]
	s.Launch(o, task(taskID, o, testExecutor(execID, "basic"), "pid"))
	st := s.Update(taskID, mesos.TASK_RUNNING)
	pid, err := strconv.Atoi(string(st.Data))
	if err != nil {
		t.Fatalf("RUNNING data %q is not a pid", st.Data)
	}
	return pid, st
}

// Item 10: a second subscription takes over; the first stream gets ERROR and closes.
func TestSecondSubscriptionFailsOverTheFirst(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	first := subscribe(t, c.URL(), codec, paInfo())
	second := subscribe(t, c.URL(), "application/x-protobuf", withID(paInfo(), first.FrameworkID))
	ev := first.Await("ERROR", isType(scheduler.Event_ERROR))
	if ev.Error.Message != "Framework failed over" {
		t.Fatalf("old stream got %q; want \"Framework failed over\"", ev.Error.Message)
	}
	select {
	case <-first.Closed():
	case <-time.After(wait):
		t.Fatal("old stream not closed")
	}
	if second.FrameworkID != first.FrameworkID || len(second.Offers()) == 0 {
		t.Fatal("the new subscription does not carry on with the framework")
	}
}

// Item 11: while disconnected, calls get 403 and updates are held, not lost.
func TestUpdatesAreHeldWhileDisconnected(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	s.Launch(o, task("t1", o, testExecutor("e1", "basic"), "delay"))
	s.Ack(s.Update("t1", mesos.TASK_RUNNING))
	s.Close()
	await.True(t, wait, "master sees the framework disconnected", func() bool {
		return frameworkField(t, c, s.FrameworkID, "connected") == false
	})
	resp, _ := rawPost(t, c.URL()+"/api/v1/scheduler", "application/json", "", "any",
		jsonCall(t, calls.Revive().With(calls.Framework(s.FrameworkID))))
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("call while disconnected: %d; want 403", resp.StatusCode)
	}
	await.True(t, wait, "the task finishes at the master meanwhile", func() bool {
		tasks, _ := frameworkField(t, c, s.FrameworkID, "tasks").([]any)
		return len(tasks) == 1 && tasks[0].(map[string]any)["state"] == "TASK_FINISHED"
	})
	again := subscribe(t, c.URL(), codec, withID(paInfo(), s.FrameworkID))
	fin := again.Update("t1")
	if *fin.State != mesos.TASK_FINISHED || len(fin.UUID) != 16 {
		t.Fatalf("after re-subscribing: %v; want the held TASK_FINISHED with its uuid", fin.String())
	}
}

// Item 12: failover timeout expiry removes the framework and its executors; without a
// failover_timeout (0, the default) the disconnection itself does.
func TestFailoverTimeoutRemovesTheFramework(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		timeout *float64
	}{{"0.5 s", ptrTo(0.5)}, {"default 0", nil}} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			info := paInfo()
			info.FailoverTimeout = tc.timeout
			s := subscribe(t, c.URL(), codec, info)
			pid, _ := runPID(t, s, "t1", "e1")
			s.Close()
			await.True(t, wait, "executor process shut down", func() bool { return processGone(pid) })
			resp, body := rawPost(t, c.URL()+"/api/v1/scheduler", "application/json", "", "any",
				jsonCall(t, calls.Revive().With(calls.Framework(s.FrameworkID))))
			if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "Framework cannot be found") {
				t.Fatalf("call for a removed framework: %d %q; want 400", resp.StatusCode, body)
			}
			_, first := trySubscribe(t, c.URL(), codec, withID(paInfo(), s.FrameworkID))
			if first.Type != scheduler.Event_ERROR || first.Error.Message != "Framework has been removed" {
				t.Fatalf("re-subscribing a removed framework: %v", first.String())
			}
		})
	}
}

// Item 13: TEARDOWN closes the stream and shuts the executors down; the sandbox stays.
func TestTeardown(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	pid, _ := runPID(t, s, "t1", "e1")
	dir := executorDir(t, c, s.FrameworkID, "e1")
	s.MustCall(&scheduler.Call{Type: scheduler.Call_TEARDOWN})
	select {
	case <-s.Closed():
	case <-time.After(wait):
		t.Fatal("stream not closed by TEARDOWN")
	}
	await.True(t, wait, "executor process reaped", func() bool { return processGone(pid) })
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("sandbox %s removed: %v", dir, err)
	}
}

// Items 13 and 34: the master tells only the agents it can reach to shut a removed framework
// down (Mesos's Master::removeFramework sends ShutdownFrameworkMessage to its registered agents,
// and an agent ignores it while disconnected). An agent cut off at the TEARDOWN, partitioned or
// already unreachable, runs the framework's executors on, and is told when it re-registers
// (Master::reconcileKnownSlave, Master::__reregisterSlave).
func TestTeardownReachesACutOffAgentWhenItReregisters(t *testing.T) {
	t.Parallel()
	for _, unreachable := range []bool{false, true} {
		pingTimeout := time.Hour
		if unreachable {
			pingTimeout = 100 * time.Millisecond
		}
		c := newCluster(t, func(o *mesoslocal.Options) { o.AgentPingTimeout = pingTimeout })
		s := subscribe(t, c.URL(), codec, paInfo())
		x, o := runT1(t, s, testExecutor("e1", "nosubscribe"))
		agent := o.AgentID.Value
		if err := c.PartitionAgent(agent); err != nil {
			t.Fatal(err)
		}
		if unreachable {
			waitAgentState(t, c, agent, "unreachable")
		}
		s.MustCall(&scheduler.Call{Type: scheduler.Call_TEARDOWN})
		select {
		case <-s.Closed():
		case <-time.After(wait):
			t.Fatal("stream not closed by TEARDOWN")
		}
		// A SHUTDOWN sent at the TEARDOWN would be on the executor's stream before the
		// acknowledgement of an update sent after it.
		if got := x.sentBefore("t1", mesos.TASK_RUNNING); len(got) != 0 {
			t.Fatalf("unreachable=%v: the agent sent the executor %v after the TEARDOWN; want nothing until it re-registers", unreachable, got)
		}
		if err := c.HealAgent(agent); err != nil {
			t.Fatal(err)
		}
		x.next(executor.Event_SHUTDOWN)
		await.True(t, wait, "the framework completed on the agent once e1 was killed", func() bool {
			st := agentState(t, agentURL(o))
			return len(st.Frameworks) == 0 && len(st.CompletedFrameworks) == 1
		})
	}
}

// Item 14: offers from before a re-subscription are invalid, without RESCIND.
func TestOffersDieWithTheSubscription(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	old := s.Offers()[0]
	again := subscribe(t, c.URL(), codec, withID(paInfo(), s.FrameworkID))
	again.Launch(old, task("t1", old, testExecutor("e1", "basic"), "finish"))
	st := again.Update("t1")
	if *st.State != mesos.TASK_DROPPED || *st.Reason != mesos.REASON_INVALID_OFFERS || len(st.UUID) != 0 || *st.Source != mesos.SOURCE_MASTER {
		t.Fatalf("ACCEPT of an old offer: %v; want TASK_DROPPED / REASON_INVALID_OFFERS from the master, no uuid", st.String())
	}
	if len(again.Offers()) == 0 {
		t.Fatal("no fresh offers after re-subscribing")
	}
}
