package scheduler

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/integration/mesoslocal"
	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/taskid"
)

func (s *system) ready(job string) int {
	r, _ := s.store.ReadyOf(context.Background(), job)
	return r.Count
}

// With misfire, fires during a long run accumulate and then run back to back; without, one
// stays pending.
func TestMisfire(t *testing.T) {
	t.Parallel()
	s := newSystem(t, 1)
	acc := s.holdJob("accumulates", 1, "")
	acc.Cron, acc.Misfire = "*/1 * * * * ?", true
	one := s.holdJob("single", 1, "")
	one.Cron = "*/1 * * * * ?"
	s.register(acc)
	s.register(one)
	await.True(t, 30*time.Second, "both jobs running", func() bool {
		return len(s.runs("accumulates")) == 1 && len(s.runs("single")) == 1
	})
	// The misfire job's count is the witness that three fires passed during the runs.
	await.True(t, 30*time.Second, "three fires accumulated", func() bool { return s.ready("accumulates") >= 3 })
	if n := s.ready("single"); n != 1 {
		t.Fatalf("a job without misfire has %d pending runs; want 1", n)
	}
	pending := s.ready("accumulates")
	s.release("accumulates")
	s.release("single")
	await.True(t, 30*time.Second, "the accumulated runs ran", func() bool { return len(s.runs("accumulates")["0"]) >= 1+pending })
}

// A partitioned agent's task is UNREACHABLE; it is not relaunched before the unreachable
// timeout, and healing the agent brings it back without a duplicate run.
func TestPartitionBeforeTheUnreachableTimeout(t *testing.T) {
	t.Parallel()
	s := newSystem(t, 2, func(c *Config) { c.UnreachableTimeout = time.Hour })
	j := s.holdJob("partitioned", 1, "")
	j.Failover = true
	s.register(j)
	s.trigger("partitioned")
	await.True(t, 30*time.Second, "running", func() bool { return len(s.runs("partitioned")["0"]) == 1 })
	agent := s.runs("partitioned")["0"][0]
	if err := s.mesos.PartitionAgent(agent); err != nil {
		t.Fatal(err)
	}
	waitState(t, s.mesos, "partitioned", "TASK_UNREACHABLE")
	if n := s.failoverCount(); n != 0 || s.runningCount("partitioned") != 1 {
		t.Fatalf("an unreachable task was failed over before the timeout (%d failover entries)", n)
	}
	if err := s.mesos.HealAgent(agent); err != nil {
		t.Fatal(err)
	}
	waitState(t, s.mesos, "partitioned", "TASK_RUNNING")
	s.release("partitioned")
	await.True(t, 30*time.Second, "done", func() bool { return s.runningCount("partitioned") == 0 })
	if r := s.runs("partitioned"); len(r["0"]) != 1 {
		t.Fatalf("shard ran %d times; want once", len(r["0"]))
	}
}

// After the unreachable timeout the task counts as lost: its shard is relaunched, and the old
// task is killed when its agent comes back.
func TestPartitionPastTheUnreachableTimeout(t *testing.T) {
	t.Parallel()
	s := newSystem(t, 2, func(c *Config) { c.UnreachableTimeout = time.Second })
	j := s.holdJob("lost", 1, "")
	j.Failover = true
	s.register(j)
	s.trigger("lost")
	await.True(t, 30*time.Second, "running", func() bool { return len(s.runs("lost")["0"]) == 1 })
	first, _ := s.store.RunningOf(context.Background(), "lost")
	agent := s.runs("lost")["0"][0]
	if err := s.mesos.PartitionAgent(agent); err != nil {
		t.Fatal(err)
	}
	await.True(t, 30*time.Second, "relaunched elsewhere", func() bool { return len(s.runs("lost")["0"]) == 2 })
	if r := s.runs("lost")["0"]; r[1] == agent {
		t.Fatalf("relaunched on the partitioned agent %s", agent)
	}
	if err := s.mesos.HealAgent(agent); err != nil {
		t.Fatal(err)
	}
	old, _ := taskid.Parse(first[0].TaskID)
	waitTaskState(t, s.mesos, old.String(), "TASK_KILLED")
}

// With --task-lease the executor on a partitioned agent kills the task before the unreachable
// timeout relaunches it. Judged by the scripts' side effects: the first run is dead before the
// relaunch starts and never finishes, the relaunch finishes, so the shard ran once. Without
// the lease the first run, unseen, finishes too (TestPartitionPastTheUnreachableTimeout).
func TestALeaseFencesAPartitionedTaskBeforeItsRelaunch(t *testing.T) {
	t.Parallel()
	s := newSystem(t, 2, func(c *Config) { c.UnreachableTimeout, c.TaskLease = 3*time.Second, time.Second })
	j := s.scriptJob("fenced", 1, "")
	j.Failover = true
	pids, ended, release := filepath.Join(s.dir, "pids"), filepath.Join(s.dir, "ended"), filepath.Join(s.dir, "release")
	j.ScriptCommandLine = `echo $$ >> ` + pids + `; ` + strings.TrimSuffix(j.ScriptCommandLine, "; true") +
		`; while [ ! -e ` + release + ` ]; do sleep 0.05; done; echo "$EJCLOUD_TASK_ID" >> ` + ended + `; true`
	s.register(j)
	s.trigger("fenced")
	await.True(t, 30*time.Second, "running", func() bool { return len(s.runs("fenced")["0"]) == 1 })
	first, _ := s.store.RunningOf(context.Background(), "fenced")
	agent := s.runs("fenced")["0"][0]
	b, _ := os.ReadFile(pids)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("the first run's pid: %q", b)
	}
	if err := s.mesos.PartitionAgent(agent); err != nil {
		t.Fatal(err)
	}
	await.True(t, 30*time.Second, "relaunched elsewhere", func() bool { return len(s.runs("fenced")["0"]) == 2 })
	if stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil && !strings.Contains(string(stat), ") Z ") {
		t.Fatalf("the first run (pid %d) still runs beside its relaunch", pid)
	}
	os.WriteFile(release, nil, 0o644)
	await.True(t, 30*time.Second, "the relaunch finished", func() bool { return s.runningCount("fenced") == 0 })
	if err := s.mesos.HealAgent(agent); err != nil {
		t.Fatal(err)
	}
	await.True(t, 30*time.Second, "the fenced task's TASK_FAILED delivered after the partition", func() bool {
		for _, u := range s.updates.Updates() {
			if u.TaskID == first[0].TaskID && u.State == "TASK_FAILED" {
				return true
			}
		}
		return false
	})
	b, _ = os.ReadFile(ended)
	if got := strings.Fields(string(b)); len(got) != 1 || got[0] == first[0].TaskID {
		t.Fatalf("runs that finished: %q; want the relaunch's alone", got)
	}
}

// Turning the lease off is safe: a leader without one tells the executors an earlier leader
// armed (LEASE 0s), and their tasks run on through gaps much longer than the old lease.
func TestALeaderWithoutALeaseEndsFencing(t *testing.T) {
	t.Parallel()
	const lease = 3 * time.Second
	s := newSystem(t, 1, func(c *Config) { c.UnreachableTimeout, c.TaskLease = 10*time.Second, lease })
	j := s.holdJob("unfenced", 1, "")
	j.Failover = true
	s.register(j)
	s.trigger("unfenced")
	await.True(t, 30*time.Second, "running", func() bool { return len(s.runs("unfenced")["0"]) == 1 })
	cfg := s.sched.cfg
	cfg.TaskLease = 0
	s.sched.stop()
	<-s.sched.done
	s.sched.done <- nil
	stopped := time.Now()
	s.sched = startWith(t, cfg, hooks{})
	failed := func() bool {
		for _, u := range s.updates.Updates() {
			if u.State == "TASK_FAILED" || u.State == "TASK_KILLED" {
				return true
			}
		}
		return false
	}
	// Nothing can show that a lease did not lapse but time: watch three old leases pass.
	await.True(t, 30*time.Second, "three old leases passed", func() bool {
		if failed() {
			t.Fatalf("the task ended %v after the leader with the lease stopped: its executor still fenced", time.Since(stopped))
		}
		return time.Since(stopped) > 3*lease
	})
	s.release("unfenced")
	await.True(t, 30*time.Second, "finished", func() bool { return s.runningCount("unfenced") == 0 })
	if failed() || len(s.runs("unfenced")["0"]) != 1 {
		t.Fatalf("runs %v; want one run that finished", s.runs("unfenced"))
	}
}

// waitState waits until /master/state shows a task of the job in the state (active or
// unreachable tasks).
func waitState(t *testing.T, c *mesoslocal.Cluster, job, want string) {
	t.Helper()
	await.True(t, 30*time.Second, job+" in "+want, func() bool {
		return taskState(t, c, func(id string) bool { m, err := taskid.Parse(id); return err == nil && m.JobName == job }) == want
	})
}

func waitTaskState(t *testing.T, c *mesoslocal.Cluster, taskID, want string) {
	t.Helper()
	await.True(t, 30*time.Second, taskID+" in "+want, func() bool {
		st := taskState(t, c, func(id string) bool { return id == taskID })
		return st == want || st == "" && want == "TASK_KILLED" // acknowledged terminal tasks leave the state
	})
}

func taskState(t *testing.T, c *mesoslocal.Cluster, match func(string) bool) string {
	doc, _ := c.State()
	var st struct {
		Frameworks []struct {
			Tasks            []struct{ ID, State string } `json:"tasks"`
			UnreachableTasks []struct{ ID, State string } `json:"unreachable_tasks"`
		} `json:"frameworks"`
	}
	if err := jsonUnmarshal(doc, &st); err != nil {
		t.Fatal(err)
	}
	for _, f := range st.Frameworks {
		for _, ts := range [][]struct{ ID, State string }{f.Tasks, f.UnreachableTasks} {
			for _, task := range ts {
				if match(task.ID) {
					return task.State
				}
			}
		}
	}
	return ""
}
