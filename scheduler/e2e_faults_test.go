package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/integration/mesoslocal"
	"github.com/ejcloud/ejcloud/integration/mesostest"
	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/taskend"
	"github.com/ejcloud/ejcloud/taskid"
)

// holdJob is a SCRIPT job whose runs append to runs-<job>.txt and then wait for the file
// release-<job> (or exit with status code when code is not "").
func (s *system) holdJob(name string, shards int, code string) config.Job {
	j := s.scriptJob(name, shards, "")
	release := filepath.Join(s.dir, "release-"+name)
	j.ScriptCommandLine = strings.TrimSuffix(j.ScriptCommandLine, "; true") +
		`; while [ ! -e ` + release + ` ]; do sleep 0.05; done; exit ` + map[bool]string{true: "0", false: code}[code == ""]
	return j
}

func (s *system) release(job string) {
	os.WriteFile(filepath.Join(s.dir, "release-"+job), nil, 0o644)
}

func (s *system) trigger(job string) {
	s.t.Helper()
	if err := s.store.AddReady(context.Background(), job, true); err != nil {
		s.t.Fatal(err)
	}
}

func (s *system) runningCount(job string) int {
	r, _ := s.store.RunningOf(context.Background(), job)
	return len(r)
}

func (s *system) failoverCount() int {
	f, _ := s.store.Failovers(context.Background())
	return len(f)
}

// executorPIDs finds the processes whose working directory is one of the executor sandboxes the
// agent's /state lists.
func (s *system) executorPIDs(agent string) []int {
	state := mesostest.AgentState(s.t, s.mesos, agent)
	var dirs []string
	for _, f := range state["frameworks"].([]any) {
		for _, e := range f.(map[string]any)["executors"].([]any) {
			d, _ := filepath.EvalSymlinks(e.(map[string]any)["directory"].(string))
			dirs = append(dirs, d)
		}
	}
	var pids []int
	procs, _ := filepath.Glob("/proc/[0-9]*/cwd")
	for _, p := range procs {
		cwd, err := os.Readlink(p)
		if err != nil {
			continue
		}
		for _, d := range dirs {
			if cwd == d {
				var pid int
				fmt.Sscanf(strings.Split(p, "/")[2], "%d", &pid)
				if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.HasPrefix(string(comm), "ejcloud-executo") {
					pids = append(pids, pid)
				}
			}
		}
	}
	return pids
}

// Killing an executor of a failover job relaunches the lost shards, and only those.
func TestExecutorCrashFailsOverOnlyTheLostShards(t *testing.T) {
	t.Parallel()
	for _, failover := range []bool{true, false} {
		t.Run(fmt.Sprintf("failover=%v", failover), func(t *testing.T) {
			s := newSystem(t, 2)
			j := s.holdJob("crashy", 2, "")
			j.Failover = failover
			s.register(j)
			s.trigger("crashy")
			defer func() {
				if t.Failed() {
					b, _ := os.ReadFile(filepath.Join(s.dir, "runs-crashy.txt"))
					t.Logf("runs:\n%s", b)
				}
			}()
			await.True(t, 30*time.Second, "both shards running on both agents", func() bool {
				r := s.runs("crashy")
				return len(r["0"]) == 1 && len(r["1"]) == 1 && r["0"][0] != r["1"][0]
			})
			victim := s.runs("crashy")["0"][0]
			pids := s.executorPIDs(victim)
			if len(pids) != 1 {
				t.Fatalf("executor processes on %s: %v", victim, pids)
			}
			syscall.Kill(pids[0], syscall.SIGKILL)
			if failover {
				await.True(t, 30*time.Second, "shard 0 relaunched", func() bool { return len(s.runs("crashy")["0"]) == 2 })
				if r := s.runs("crashy"); len(r["1"]) != 1 {
					t.Fatalf("shard 1 ran %d times; only the lost shard may be relaunched", len(r["1"]))
				}
				if got, _ := s.store.RunningOf(context.Background(), "crashy"); len(got) != 2 {
					t.Fatalf("running after the relaunch: %v", got)
				} else if id, _ := taskid.Parse(got[0].TaskID); got[0].Meta.Item == 0 && id.Type != taskid.Failover {
					t.Fatalf("relaunched task %s is not a FAILOVER task", got[0].TaskID)
				}
			} else {
				await.True(t, 30*time.Second, "the lost shard is recorded as ended", func() bool { return s.runningCount("crashy") == 1 })
				if n := s.failoverCount(); n != 0 {
					t.Fatalf("%d failover entries for a job without failover", n)
				}
			}
			if v, _ := sample(scrape(t, s.sched.cfg.HTTPAddr), "ejcloud_executor_death_updates_total", "outcome", "not_ended"); v != 1 {
				t.Fatalf(`ejcloud_executor_death_updates_total{outcome="not_ended"} = %v; want 1: the run was killed with its executor`, v)
			}
			s.release("crashy")
			await.True(t, 30*time.Second, "all shards done", func() bool { return s.runningCount("crashy") == 0 })
			if r := s.runs("crashy"); !failover && len(r["0"]) != 1 {
				t.Fatalf("shard 0 of a non-failover job ran %d times", len(r["0"]))
			}
		})
	}
}

// A business failure (the script exits 1) is recorded, not failed over.
func TestBusinessFailureIsNotFailedOver(t *testing.T) {
	t.Parallel()
	s := newSystem(t, 1)
	j := s.holdJob("fails", 2, "1")
	j.Failover = true
	s.register(j)
	s.release("fails")
	s.trigger("fails")
	await.True(t, 30*time.Second, "both shards ran and ended", func() bool {
		r := s.runs("fails")
		return len(r["0"]) == 1 && len(r["1"]) == 1 && s.runningCount("fails") == 0
	})
	if n := s.failoverCount(); n != 0 {
		t.Fatalf("%d failover entries after business failures", n)
	}
	if r, _ := s.store.ReadyOf(context.Background(), "fails"); r.Count != 0 {
		t.Fatalf("ready count %d after the run", r.Count)
	}
}

// A job whose shards do not all fit launches nothing and says why; it launches as soon as
// capacity appears. Offers are never held, and the framework suppresses when idle.
func TestIntegrityAndIdleOffers(t *testing.T) {
	t.Parallel()
	s := newSystem(t, 1)
	blocker := s.holdJob("blocker", 1, "")
	blocker.CPUCount = 3 // of the agent's 4, with the executor's 0.1
	s.register(blocker)
	s.trigger("blocker")
	await.True(t, 30*time.Second, "blocker running", func() bool { return len(s.runs("blocker")["0"]) == 1 })
	big := s.scriptJob("big", 4, "")
	big.CPUCount = 0.3 // 1.2 in all: more than the 0.9 left
	s.register(big)
	s.trigger("big")
	await.True(t, 30*time.Second, "the unplaced reasons name cpu", func() bool {
		return s.sched.inst.Unplaced()["big"]["cpu"] > 0
	})
	if n := s.runningCount("big"); n != 0 {
		t.Fatalf("%d shards of a job that does not fit whole were launched", n)
	}
	if r, _ := s.store.ReadyOf(context.Background(), "big"); r.Count != 1 {
		t.Fatalf("ready count %d; the run must stay queued", r.Count)
	}
	s.release("blocker")
	await.True(t, 30*time.Second, "big runs once capacity appears", func() bool {
		r := s.runs("big")
		return len(r) == 4
	})
	defer func() {
		if t.Failed() {
			b, _ := json.MarshalIndent(mesostest.MasterState(t, s.mesos)["frameworks"], "", " ")
			t.Logf("frameworks: %s", b)
		}
	}()
	await.True(t, 30*time.Second, "idle: no offer held and the role suppressed", func() bool {
		for _, f := range mesostest.MasterState(t, s.mesos)["frameworks"].([]any) {
			fm := f.(map[string]any)
			offers, _ := fm["offers"].([]any)
			roles, _ := fm["suppressed_roles"].([]any)
			return len(offers) == 0 && len(roles) == 1
		}
		return false
	})
	if n := s.mesos.OutstandingOffers(); n != 0 {
		t.Fatalf("%d offers held while idle", n)
	}
}

// A run that ended just before its executor died is not run again: its end record, which the
// script's supervisor wrote in the sandbox, read through the agent, says how it ended. The
// script freezes its own executor (SIGSTOP) and then ends, so that the supervisor reaps it
// while the executor cannot report it; the test then SIGKILLs the executor, and the agent
// reports the task TASK_FAILED (REASON_EXECUTOR_TERMINATED).
func TestARunThatEndedBeforeItsExecutorDiedIsNotRunAgain(t *testing.T) {
	t.Parallel()
	for _, code := range []string{"0", "3"} { // 3: a failure of the job's own, not failed over either
		t.Run("exit"+code, func(t *testing.T) {
			s := newSystem(t, 2)
			j := s.scriptJob("ended", 1, "")
			j.Failover = true
			pidFile := filepath.Join(s.dir, "executor.pid")
			j.ScriptCommandLine = strings.TrimSuffix(j.ScriptCommandLine, "; true") +
				`; exe=$(cut -d' ' -f4 /proc/$PPID/stat); echo $exe > ` + pidFile + `.tmp; mv ` + pidFile + `.tmp ` + pidFile +
				`; kill -STOP $exe; exit ` + code
			s.register(j)
			s.trigger("ended")
			records := filepath.Join(s.mesos.WorkDir(), "slaves", "*", "frameworks", "*", "executors", "*", "runs", "latest", taskend.Dir, "*")
			var record string
			await.True(t, 30*time.Second, "the run's end recorded while its executor is frozen", func() bool {
				// Not the record's temporary file (taskend.Write renames it over the record):
				// read as it is being written, it was empty.
				m, _ := filepath.Glob(records)
				m = slices.DeleteFunc(m, func(p string) bool { return strings.HasSuffix(p, ".tmp") })
				if len(m) == 1 {
					record = m[0]
				}
				return record != ""
			})
			b, _ := os.ReadFile(pidFile)
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatalf("the executor's pid: %q", b)
			}
			if b, _ := os.ReadFile(record); strings.TrimSpace(string(b)) != "exited "+code {
				t.Fatalf("end record %q; want exited %s", b, code)
			}
			syscall.Kill(pid, syscall.SIGKILL)
			await.True(t, 30*time.Second, "the agent reported the executor's death", func() bool {
				for _, u := range s.updates.Updates() {
					if u.State == "TASK_FAILED" && !u.JobFailed {
						return true
					}
				}
				return false
			})
			await.True(t, 30*time.Second, "the task recorded as ended", func() bool { return s.runningCount("ended") == 0 })
			if n := s.failoverCount(); n != 0 || len(s.runs("ended")["0"]) != 1 {
				t.Fatalf("%d failover entries, runs %v; want the one run that ended, and no relaunch", n, s.runs("ended"))
			}
			outcome := map[string]string{"0": "finished", "3": "job_failed"}[code]
			if v, _ := sample(scrape(t, s.sched.cfg.HTTPAddr), "ejcloud_executor_death_updates_total", "outcome", outcome); v != 1 {
				t.Fatalf("ejcloud_executor_death_updates_total{outcome=%q} = %v; want 1", outcome, v)
			}
		})
	}
}

// A Mesos master failover loses the master's view of frameworks and tasks, not the agents or
// their tasks: the new master says nothing of a task until its agent re-registers (MESOS.md
// §4.2 row 2), then knows it again, and its updates flow once the framework has subscribed
// again. The leader subscribes again with its framework id, asks again until the master
// answers (reconcile.go), and relaunches nothing: each shard runs once, and the run ends.
func TestAMasterFailoverRelaunchesNothing(t *testing.T) {
	t.Parallel()
	s := newSystem(t, 2)
	s.register(s.holdJob("held", 2, ""))
	s.trigger("held")
	await.True(t, 30*time.Second, "both shards running", func() bool {
		r := s.runs("held")
		return len(r["0"]) == 1 && len(r["1"]) == 1
	})
	if err := s.mesos.FailoverMaster(); err != nil {
		t.Fatal(err)
	}
	s.release("held")
	// Its end reaches the leader only through the new master, once it has subscribed again.
	await.True(t, 60*time.Second, "the run ends", func() bool { return s.runningCount("held") == 0 })
	if r := s.runs("held"); len(r["0"]) != 1 || len(r["1"]) != 1 {
		t.Fatalf("runs per shard %v; want each shard once: nothing is relaunched over a master failover", r)
	}
	if n := s.failoverCount(); n != 0 {
		t.Fatalf("%d failover entries after a master failover", n)
	}
}

// A leader cut off from the master gives up on the silent stream after five heartbeat
// intervals, also while a call of its event loop (the REVIVE of new work) hangs in the
// partition: the call is given up with the stream, /readyz says the leader is not subscribed,
// and it subscribes again, and runs the work, once the partition heals.
func TestALeaderCutOffFromTheMasterGivesUpOnItsStream(t *testing.T) {
	t.Parallel()
	s := newSystemOn(t, 1, hooks{}, func(o *mesoslocal.Options) { o.HeartbeatInterval = time.Second })
	s.register(s.scriptJob("cut", 1, ""))
	fw, err := s.store.FrameworkID(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.mesos.PartitionFramework(fw); err != nil {
		t.Fatal(err)
	}
	healed := false
	heal := func() {
		if !healed {
			healed = true
			if err := s.mesos.HealFramework(fw); err != nil {
				t.Fatal(err)
			}
		}
	}
	defer heal()
	s.trigger("cut") // new work: a REVIVE, black-holed
	readyz := func() int {
		resp, _ := get(t, s.sched.cfg.HTTPAddr, "/readyz")
		if resp == nil {
			return 0
		}
		return resp.StatusCode
	}
	// The watchdog ends the stream 5 s in; the REVIVE's own client would give up only at 30 s.
	await.True(t, 20*time.Second, "the leader says it is not subscribed, while cut off", func() bool { return readyz() == http.StatusServiceUnavailable })
	heal()
	await.True(t, 30*time.Second, "subscribed again after the heal", func() bool { return readyz() == http.StatusOK })
	await.True(t, 30*time.Second, "the triggered run", func() bool { return len(s.runs("cut")["0"]) == 1 })
}
