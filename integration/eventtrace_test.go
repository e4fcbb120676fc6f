package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/eventtrace"
	"github.com/ejcloud/ejcloud/internal/await"
)

// A job's executions and status traces through the REST API of the real scheduler, over an
// SQLite event trace: a running shard shows as running (not failed), a failing one with its
// cause, and after a clean shutdown every trace is in the database.
func TestEventTraceThroughTheAPI(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 1)
	dbPath := filepath.Join(t.TempDir(), "trace.db")
	s := startScheduler(t, w.zk, w.mesos, "--event-trace-db", "sqlite://"+dbPath, "--event-trace-retention", "7d")
	leaderOf(t, s)
	s.must(t, 204, "POST", "/api/app", w.appJSON(""))
	// Shard 1 fails by the job's fault; shard 0 holds until released.
	job := w.jobJSON("traced", 2, "", false, `if [ "$EJCLOUD_SHARDING_ITEM" = 1 ]; then exit 3; fi; `+w.hold("traced"))
	s.must(t, 204, "POST", "/api/job/register", job)
	s.must(t, 204, "POST", "/api/job/trigger", "traced")

	executions := func() eventtrace.Page[eventtrace.Execution] {
		var p eventtrace.Page[eventtrace.Execution]
		json.Unmarshal([]byte(s.must(t, 200, "GET", "/api/job/events/executions?jobName=traced&sort=shardingItem&order=asc", "")), &p)
		return p
	}
	await.True(t, 30*time.Second, "shard 0 running and shard 1 failed in the execution log", func() bool {
		p := executions()
		return p.Total == 2 && p.Rows[0].Running && p.Rows[0].CompleteTime == nil && !p.Rows[1].Running && !p.Rows[1].Success
	})
	p := executions()
	if r := p.Rows[1]; r.ShardingItem != 1 || r.FailureCause == "" || r.Source != "NORMAL_TRIGGER" || r.IP == "" || r.Hostname == "" {
		t.Errorf("the failed execution: %+v", r)
	}
	w.release("traced")
	await.True(t, 30*time.Second, "shard 0 succeeded in the execution log", func() bool {
		p := executions()
		return p.Total == 2 && !p.Rows[0].Running && p.Rows[0].Success && p.Rows[0].CompleteTime != nil
	})
	if code, body := s.api(t, "GET", "/api/job/events/executions?isSuccess=false&jobName=traced", ""); code != 200 || !strings.Contains(body, `"total":1`) {
		t.Errorf("failed executions: %d %s", code, body)
	}

	states := func() map[string]int {
		var p eventtrace.Page[eventtrace.Trace]
		json.Unmarshal([]byte(s.must(t, 200, "GET", "/api/job/events/statusTraces?jobName=traced&per_page=100", "")), &p)
		out := map[string]int{}
		for _, r := range p.Rows {
			out[r.State]++
		}
		return out
	}
	await.True(t, 30*time.Second, "every state of both shards in the status traces", func() bool {
		st := states()
		return st["TASK_STAGING"] == 2 && st["TASK_RUNNING"] >= 2 && st["TASK_FINISHED"] == 1 && st["TASK_FAILED"] == 1
	})
	if code, body := s.api(t, "GET", "/api/job/events/statusTraces?sort=creation_time%20DESC%3B%20DROP%20TABLE%20JOB_STATUS_TRACE_LOG", ""); code != 400 || !strings.Contains(body, `"field":"sort"`) {
		t.Errorf("a sort injection: %d %s; want 400 naming sort", code, body)
	}
	if code, body := s.api(t, "GET", "/api/job/statistics/jobs/executionType", ""); code != 200 || !strings.Contains(body, `{"transientJobCount":1,"daemonJobCount":0}`) {
		t.Errorf("execution types: %d %s", code, body)
	}
	if code, body := s.api(t, "GET", "/api/job/statistics/tasks/results/online", ""); code != 200 || !strings.Contains(body, `"successCount":1,"failedCount":1,"statisticInterval":"DAY"`) {
		t.Errorf("results since online: %d %s", code, body)
	}
	before := states()

	// A clean shutdown writes what was queued: the database holds every trace the API showed.
	s.stop(syscall.SIGTERM)
	if !s.cmd.ProcessState.Success() {
		t.Fatalf("the scheduler exited with %v", s.cmd.ProcessState)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, err := eventtrace.Open(ctx, "sqlite://"+dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	tr, err := db.StatusTraces(ctx, eventtrace.Query{PerPage: 100, Filters: map[string]string{"jobName": "traced"}})
	if err != nil {
		t.Fatal(err)
	}
	after := map[string]int{}
	for _, r := range tr.Rows {
		after[r.State]++
	}
	if fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("after the shutdown the database holds %v; the API showed %v", after, before)
	}
}

// A run whose executor is SIGKILLed cannot report its end: the agent's TASK_FAILED closes its
// execution row, failed with the agent's reason, and the relaunch gets a row of its own. Before,
// the row showed as running for good.
func TestTheExecutionOfARunWhoseExecutorDiedEnds(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 1)
	s := startScheduler(t, w.zk, w.mesos, "--event-trace-db", "sqlite://"+filepath.Join(t.TempDir(), "trace.db"))
	leaderOf(t, s)
	s.must(t, 204, "POST", "/api/app", w.appJSON(""))
	w.triggerHeld(t, s, "died", 1, true)
	executions := func() eventtrace.Page[eventtrace.Execution] {
		var p eventtrace.Page[eventtrace.Execution]
		json.Unmarshal([]byte(s.must(t, 200, "GET", "/api/job/events/executions?jobName=died&sort=startTime&order=asc", "")), &p)
		return p
	}
	await.True(t, 30*time.Second, "the run's execution is running", func() bool { p := executions(); return p.Total == 1 && p.Rows[0].Running })
	pids := w.mesos.executorPIDs(w.mesos.agents[0])
	if len(pids) != 1 {
		t.Fatalf("executors %v; want one", pids)
	}
	syscall.Kill(pids[0], syscall.SIGKILL)
	await.True(t, 30*time.Second, "the relaunch runs", func() bool { return len(w.runs("died")["0"]) == 2 })
	w.release("died")
	quiet(t, s, "died")
	await.True(t, 30*time.Second, "both executions ended", func() bool {
		p := executions()
		return p.Total == 2 && !p.Rows[0].Running && !p.Rows[1].Running
	})
	p := executions()
	if r := p.Rows[0]; r.Success || r.CompleteTime == nil || !strings.Contains(r.FailureCause, "TASK_FAILED (REASON_EXECUTOR_TERMINATED)") {
		t.Errorf("the run whose executor died: %+v; want failed, completed, with the agent's reason", r)
	}
	if r := p.Rows[1]; !r.Success || r.CompleteTime == nil || r.TaskID == p.Rows[0].TaskID {
		t.Errorf("the relaunch: %+v; want its own row, succeeded", r)
	}
}
