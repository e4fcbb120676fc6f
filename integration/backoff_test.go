package integration

import (
	"encoding/json"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/integration/audit"
	"github.com/ejcloud/ejcloud/internal/await"
)

// neverCron is a cron that does not fire while a test runs: the jobs below run when triggered.
const neverCron = "0 0 0 1 1 ? 2099"

// jobFailure is GET /api/job/{jobName}/failure.
type jobFailure struct {
	Stopped bool `json:"stopped"`
	Stop    *struct {
		Reason, Message, TaskID, State, StatusReason string
	} `json:"stop"`
	Backoff []struct {
		ShardingItem int     `json:"shardingItem"`
		Failures     int     `json:"failures"`
		DelaySeconds float64 `json:"delaySeconds"`
		LastFailure  string  `json:"lastFailure"`
	} `json:"backoff"`
}

func failureOf(t *testing.T, s *scheduler, job string) jobFailure {
	t.Helper()
	body := s.must(t, 200, "GET", "/api/job/"+job+"/failure", "")
	var f jobFailure
	if err := json.Unmarshal([]byte(body), &f); err != nil {
		t.Fatalf("GET /api/job/%s/failure: %v in %s", job, err, body)
	}
	return f
}

// launches returns when each task of the job first reported (mesos-local's recorded status
// updates), in order: one entry per launch that got as far as a status update.
func (m *mesos) launches(t *testing.T, job string) []time.Time {
	t.Helper()
	ups, err := audit.ReadFile(m.updates)
	if err != nil {
		t.Fatal(err)
	}
	first := map[string]time.Time{}
	for _, u := range ups {
		if !strings.HasPrefix(u.TaskID, job+"@-@") {
			continue
		}
		if at, seen := first[u.TaskID]; !seen || u.At.Before(at) {
			first[u.TaskID] = u.At
		}
	}
	out := make([]time.Time, 0, len(first))
	for _, at := range first {
		out = append(out, at)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Before(out[j]) })
	return out
}

// A failover job whose app's executor cannot be fetched (the 2.1.5 docs' example appURL, on a
// closed port) is relaunched after 1, 2, 4 and 8 s, not in a tight loop, and stopped at the
// fifth fetch failure in a row with the reason over REST and in /metrics; updating the app to
// a reachable executor clears the stop, and the job runs.
func TestUnreachableAppURLBacksOffThenStops(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 1)
	s := startScheduler(t, w.zk, w.mesos)
	leaderOf(t, s)
	s.must(t, 204, "POST", "/api/app", w.appJSON("http://"+freeAddr(t)+"/x.tar.gz"))
	s.must(t, 204, "POST", "/api/job/register", w.jobJSON("broken", 1, neverCron, true, ""))
	s.must(t, 204, "POST", "/api/job/trigger", "broken")

	start := time.Now()
	var f jobFailure
	await.True(t, 60*time.Second, "the job stopped", func() bool {
		if n := len(w.mesos.launches(t, "broken")); n > 10 {
			t.Fatalf("%d launches in %v; want at most 10 in the first minute", n, time.Since(start).Round(time.Millisecond))
		}
		f = failureOf(t, s, "broken")
		return f.Stopped
	})
	if f.Stop == nil || f.Stop.Reason != "executor cannot be fetched" || !strings.Contains(f.Stop.Message, "fetch") ||
		f.Stop.State != "TASK_FAILED" || f.Stop.StatusReason != "REASON_CONTAINER_LAUNCH_FAILED" {
		t.Fatalf("stop = %+v; want the fetch failure", f.Stop)
	}
	if len(f.Backoff) != 0 {
		t.Fatalf("backoff = %+v; a stopped job's shard waits for no relaunch", f.Backoff)
	}
	// Nothing is left that could launch it again: no failover item, no pending run.
	quiet(t, s, "broken")
	at := w.mesos.launches(t, "broken")
	if len(at) != 5 {
		t.Fatalf("%d launches; want 5 (stopped at the fifth fetch failure in a row)", len(at))
	}
	for i := 1; i < len(at); i++ {
		if want := time.Second << (i - 1); at[i].Sub(at[i-1]) < want {
			t.Fatalf("launch %d came %v after the one before; want at least %v (launches at %v)", i+1, at[i].Sub(at[i-1]), want, at)
		}
	}
	metrics := s.must(t, 200, "GET", "/metrics", "")
	for _, line := range []string{"ejcloud_jobs_stopped 1", `ejcloud_jobs_stopped_total{failure="executor cannot be fetched"} 1`, "ejcloud_failover_backoffs_total 4"} {
		if !strings.Contains(metrics, line+"\n") {
			t.Fatalf("/metrics lacks %q:\n%s", line, metrics)
		}
	}
	s.said(t, 10*time.Second, "job stopped", "the scheduler logs the stop")

	// The operator fixes the app: the stop clears, and a trigger runs the job.
	s.must(t, 204, "PUT", "/api/app", w.appJSON(""))
	if f := failureOf(t, s, "broken"); f.Stopped {
		t.Fatalf("still stopped after the app update: %+v", f.Stop)
	}
	s.must(t, 204, "POST", "/api/job/trigger", "broken")
	await.True(t, 30*time.Second, "the job ran", func() bool { return len(w.runs("broken")["0"]) == 1 })
	quiet(t, s, "broken")
	if n := len(w.mesos.launches(t, "broken")); n != 6 {
		t.Fatalf("%d launches; want 6 (5 failed, 1 ran)", n)
	}
}

// A SIMPLE job whose jobClass the stock executor does not have is never relaunched: its first
// TASK_ERROR stops it, with the reason over REST; the stop survives a leader change, and a job
// update clears it.
func TestUnknownJobClassStopsWithoutRelaunch(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 1)
	a := startScheduler(t, w.zk, w.mesos)
	leaderOf(t, a)
	b := startScheduler(t, w.zk, w.mesos)
	a.must(t, 204, "POST", "/api/app", w.appJSON(""))
	var job map[string]any
	json.Unmarshal([]byte(w.jobJSON("simple", 1, neverCron, true, "")), &job)
	job["jobType"], job["jobClass"] = "SIMPLE", "com.example.Missing"
	delete(job, "scriptCommandLine")
	body, _ := json.Marshal(job)
	a.must(t, 204, "POST", "/api/job/register", string(body))
	a.must(t, 204, "POST", "/api/job/trigger", "simple")

	var f jobFailure
	await.True(t, 30*time.Second, "the job stopped", func() bool {
		if n := len(w.mesos.launches(t, "simple")); n > 1 {
			t.Fatalf("%d launches; a job whose jobClass is unknown must not be relaunched", n)
		}
		f = failureOf(t, a, "simple")
		return f.Stopped
	})
	if f.Stop == nil || f.Stop.Reason != "unknown jobClass" || !strings.Contains(f.Stop.Message, `"com.example.Missing"`) || f.Stop.State != "TASK_ERROR" {
		t.Fatalf("stop = %+v; want the unknown jobClass", f.Stop)
	}
	quiet(t, a, "simple")
	if n := len(w.mesos.launches(t, "simple")); n != 1 {
		t.Fatalf("%d launches; want 1", n)
	}
	if n := strings.Count(a.log.String(), "job stopped"); n != 1 {
		t.Fatalf("the stop was logged %d times; want once", n)
	}

	// The stop is in ZooKeeper: the next leader keeps it, and does not launch the job.
	a.stop(syscall.SIGKILL)
	leaderOf(t, b)
	if f := failureOf(t, b, "simple"); !f.Stopped || f.Stop.Reason != "unknown jobClass" {
		t.Fatalf("after the leader change: %+v; want the job still stopped", f)
	}
	// An operator updates the job (here with the same config): the stop clears, nothing runs.
	b.must(t, 204, "PUT", "/api/job/update", string(body))
	if f := failureOf(t, b, "simple"); f.Stopped {
		t.Fatalf("still stopped after the update: %+v", f.Stop)
	}
	quiet(t, b, "simple")
	if n := len(w.mesos.launches(t, "simple")); n != 1 {
		t.Fatalf("%d launches; want 1", n)
	}
}

// A shard whose task keeps killing its executor (a failure that may heal) backs off up to
// --failover-backoff-max and is never stopped; the backoff shows over REST and in /metrics.
// Updating the job forgets the backoff: the waiting shard is relaunched at once.
func TestCrashingShardBacksOffToTheCap(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 1)
	s := startScheduler(t, w.zk, w.mesos, "--failover-backoff-min", "200ms", "--failover-backoff-max", "800ms")
	leaderOf(t, s)
	s.must(t, 204, "POST", "/api/app", w.appJSON(""))
	// The script's parent is its supervisor (executor/supervise.go); the supervisor's is the executor.
	// The script then waits to die with its executor: a script that exited 0 after the kill
	// would leave an end record, and the scheduler rightly counts such a run as finished when
	// the record is read before the agent's report comes (scheduler/ends.go).
	crash := w.jobJSON("crash", 1, neverCron, true, `read -r _ _ _ executor _ < /proc/$PPID/stat; kill -9 "$executor"; sleep 60`)
	s.must(t, 204, "POST", "/api/job/register", crash)
	s.must(t, 204, "POST", "/api/job/trigger", "crash")

	await.True(t, 60*time.Second, "the shard backed off at the cap", func() bool {
		f := failureOf(t, s, "crash")
		if f.Stopped {
			t.Fatalf("stopped: %+v; an executor that dies may heal, the job must not stop", f.Stop)
		}
		return len(f.Backoff) == 1 && f.Backoff[0].DelaySeconds == 0.8 && f.Backoff[0].Failures >= 4 &&
			strings.Contains(f.Backoff[0].LastFailure, "TASK_FAILED")
	})
	await.True(t, 30*time.Second, "/metrics shows the backoff", func() bool {
		m := s.must(t, 200, "GET", "/metrics", "")
		return strings.Contains(m, `ejcloud_failover_backoff_seconds{job="crash"} 0.8`+"\n") && strings.Contains(m, "ejcloud_failover_backoff_shards 1\n")
	})
	at := w.mesos.launches(t, "crash")
	for i := 1; i < len(at); i++ {
		want := min(200*time.Millisecond<<(i-1), 800*time.Millisecond)
		if at[i].Sub(at[i-1]) < want {
			t.Fatalf("launch %d came %v after the one before; want at least %v (launches at %v)", i+1, at[i].Sub(at[i-1]), want, at)
		}
	}
	s.said(t, 10*time.Second, "relaunched after the backoff", "the scheduler warns of the backoff")

	// The fixed job runs at once, however long the backoff it was waiting for.
	s.must(t, 204, "PUT", "/api/job/update", w.jobJSON("crash", 1, neverCron, true, ""))
	// Waited for before quiet: quiet reads the three queues one after another, and can look
	// between a relaunch's failover entry going and its running node being seen.
	await.True(t, 30*time.Second, "the fixed run", func() bool { return len(w.runs("crash")["0"]) >= 5 })
	quiet(t, s, "crash")
	if f := failureOf(t, s, "crash"); f.Stopped || len(f.Backoff) != 0 {
		t.Fatalf("after the fix: %+v; want neither stop nor backoff", f)
	}
	if r := w.runs("crash")["0"]; len(r) < 5 {
		t.Fatalf("the shard ran %d times; want the crashes and the fixed run", len(r))
	}
}
