package eventtrace

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/eventtrace/eventtracetest"
	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state/statetest"
	"github.com/ejcloud/ejcloud/taskdata"
)

func TestMain(m *testing.M) { os.Exit(eventtracetest.Main(m)) }

// backends are the databases every test runs against, each a real server.
var backends = []struct {
	name string
	dsn  func(t *testing.T) string
}{
	{"sqlite", func(t *testing.T) string { return "sqlite://" + filepath.Join(t.TempDir(), "trace.db") }},
	{"postgres", func(t *testing.T) string { return eventtracetest.Postgres(t) }},
	{"mariadb", func(t *testing.T) string { return eventtracetest.MariaDB(t) }},
}

func eachDB(t *testing.T, f func(t *testing.T, db *DB)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			db, err := Open(ctx, b.dsn(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			f(t, db)
		})
	}
}

func quiet() logrus.FieldLogger {
	l := logrus.New()
	l.SetOutput(os.Stderr)
	l.SetLevel(logrus.WarnLevel)
	return l
}

const tid = "job-a@-@0@-@READY@-@agent-S0@-@u1"

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func exec(id, job string, item int, start time.Time) taskdata.Execution {
	return taskdata.Execution{ID: id, JobName: job, TaskID: fmt.Sprintf("%s@-@%d@-@READY@-@agent-S0@-@%s", job, item, id), Hostname: "host-1", IP: "127.0.0.1",
		ShardingItem: item, ExecutionSource: taskdata.NormalTrigger, StartTime: start}
}

func completed(e taskdata.Execution, at time.Time, failure error) taskdata.Execution {
	e.Complete(at, failure)
	return e
}

func flush(t *testing.T, w *Writer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if s := w.Stats(); s.Failed != 0 || s.Dropped != 0 {
		t.Fatalf("writer stats %+v: want no failed or dropped event", s)
	}
}

func TestSchemaIsIdempotent(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			dsn := b.dsn(t)
			for i := 0; i < 2; i++ { // the second open finds every table and index present
				db, err := Open(context.Background(), dsn)
				if err != nil {
					t.Fatalf("open %d: %v", i, err)
				}
				db.Close()
			}
		})
	}
}

func TestExecutionLifecycle(t *testing.T) {
	eachDB(t, func(t *testing.T, db *DB) {
		ctx := context.Background()
		w := NewWriter(db, WriterConfig{}, quiet())
		defer w.Close()
		ok, bad, early := exec("e1", "job-a", 0, t0), exec("e2", "job-a", 1, t0.Add(time.Second)), exec("e3", "job-b", 0, t0.Add(2*time.Second))
		w.Execution(ok)
		w.Execution(bad)
		flush(t, w)

		p, err := db.Executions(ctx, Query{Sort: "startTime", Order: "asc"})
		if err != nil {
			t.Fatal(err)
		}
		if p.Total != 2 || !p.Rows[0].Running || p.Rows[0].Success || p.Rows[0].CompleteTime != nil {
			t.Fatalf("started executions: %+v; want 2 running rows without complete time", p)
		}
		if got := *p.Rows[0].StartTime; got != t0.UnixMilli() {
			t.Fatalf("startTime %d, want %d", got, t0.UnixMilli())
		}
		// Completions, a repeated start and completion (executors re-send), and a completion
		// whose start never arrived.
		w.Execution(completed(ok, t0.Add(5*time.Second), nil))
		w.Execution(ok)
		w.Execution(completed(bad, t0.Add(6*time.Second), errors.New("exit status 3")))
		w.Execution(completed(bad, t0.Add(6*time.Second), errors.New("exit status 3")))
		w.Execution(completed(early, t0.Add(7*time.Second), nil))
		flush(t, w)

		p, err = db.Executions(ctx, Query{Sort: "id", Order: "asc"})
		if err != nil {
			t.Fatal(err)
		}
		if p.Total != 3 {
			t.Fatalf("total %d, want 3: %+v", p.Total, p.Rows)
		}
		want := []struct {
			id      string
			success bool
			cause   string
		}{{"e1", true, ""}, {"e2", false, "exit status 3"}, {"e3", true, ""}}
		for i, w := range want {
			r := p.Rows[i]
			if r.ID != w.id || r.Running || r.Success != w.success || r.FailureCause != w.cause || r.CompleteTime == nil {
				t.Errorf("row %d: %+v; want id %s success %v cause %q, completed", i, r, w.id, w.success, w.cause)
			}
		}
		if r := p.Rows[0]; r.JobName != "job-a" || r.Hostname != "host-1" || r.IP != "127.0.0.1" || r.Source != "NORMAL_TRIGGER" || *r.CompleteTime != t0.Add(5*time.Second).UnixMilli() {
			t.Errorf("row fields: %+v", r)
		}
	})
}

// A task that ends without its executor reporting the end of its runs (the executor died, the
// agent was lost) has its open executions completed by the scheduler: failed with the end's
// cause, or succeeded when the run's end record said so. Executions already completed keep
// what their executor said, and a repeated end changes nothing.
func TestATaskEndCompletesItsOpenExecutions(t *testing.T) {
	eachDB(t, func(t *testing.T, db *DB) {
		ctx := context.Background()
		w := NewWriter(db, WriterConfig{}, quiet())
		defer w.Close()
		died, done, other, fine := exec("e1", "job-a", 0, t0), exec("e2", "job-a", 0, t0), exec("e3", "job-a", 1, t0), exec("e4", "job-b", 0, t0)
		done.TaskID = died.TaskID // a daemon's earlier run of the same task, completed by its executor
		for _, e := range []taskdata.Execution{died, completed(done, t0.Add(time.Second), nil), other, fine} {
			w.Execution(e)
		}
		flush(t, w)
		const cause = "TASK_FAILED (REASON_EXECUTOR_TERMINATED): Executor terminated"
		w.Ended(TaskEnd{TaskID: died.TaskID, At: t0.Add(5 * time.Second), Cause: cause})
		w.Ended(TaskEnd{TaskID: fine.TaskID, At: t0.Add(6 * time.Second), Success: true})
		flush(t, w)
		w.Ended(TaskEnd{TaskID: died.TaskID, At: t0.Add(9 * time.Second), Success: true, Cause: "again"})
		flush(t, w)

		p, err := db.Executions(ctx, Query{Sort: "id", Order: "asc"})
		if err != nil {
			t.Fatal(err)
		}
		want := []struct {
			id       string
			running  bool
			success  bool
			cause    string
			complete time.Time
		}{
			{"e1", false, false, cause, t0.Add(5 * time.Second)},
			{"e2", false, true, "", t0.Add(time.Second)},
			{"e3", true, false, "", time.Time{}},
			{"e4", false, true, "", t0.Add(6 * time.Second)},
		}
		if len(p.Rows) != len(want) {
			t.Fatalf("%d rows: %+v", len(p.Rows), p.Rows)
		}
		for i, w := range want {
			r := p.Rows[i]
			if r.ID != w.id || r.Running != w.running || r.Success != w.success || r.FailureCause != w.cause ||
				(r.CompleteTime == nil) != w.complete.IsZero() || (r.CompleteTime != nil && *r.CompleteTime != w.complete.UnixMilli()) {
				t.Errorf("row %d: %+v; want %+v", i, r, w)
			}
		}
	})
}

// A sweep closes, failed, the executions left open by tasks that no longer run (their end was
// lost with a scheduler), and leaves those of running tasks, those completed, and those
// started after its snapshot; a completion that comes after the sweep still wins.
func TestOrphanedExecutionsAreClosedByASweep(t *testing.T) {
	eachDB(t, func(t *testing.T, db *DB) {
		ctx := context.Background()
		w := NewWriter(db, WriterConfig{}, quiet())
		defer w.Close()
		orphan, live, done, later, ended := exec("e1", "job-a", 0, t0), exec("e2", "job-a", 1, t0), exec("e3", "job-a", 2, t0), exec("e4", "job-a", 3, t0.Add(time.Hour)), exec("e5", "job-a", 4, t0)
		for _, e := range []taskdata.Execution{orphan, live, done, later, ended, completed(done, t0.Add(time.Second), nil)} {
			w.Execution(e)
		}
		at := t0.Add(time.Minute)
		w.CloseOrphans(Orphans{Running: map[string]bool{live.TaskID: true}, Before: at, At: at})
		flush(t, w)
		byID := func() map[string]Execution {
			t.Helper()
			p, err := db.Executions(ctx, Query{})
			if err != nil || p.Total != 5 {
				t.Fatalf("%+v, %v; want 5 executions", p, err)
			}
			out := map[string]Execution{}
			for _, r := range p.Rows {
				out[r.ID] = r
			}
			return out
		}
		got := byID()
		if r := got["e1"]; r.Running || r.Success || r.FailureCause != OrphanCause || r.CompleteTime == nil || *r.CompleteTime != at.UnixMilli() {
			t.Errorf("the orphan: %+v; want failed at the sweep's time with OrphanCause", r)
		}
		if r := got["e2"]; !r.Running {
			t.Errorf("a running task's execution: %+v; want it running", r)
		}
		if r := got["e3"]; !r.Success || r.FailureCause != "" {
			t.Errorf("a completed execution: %+v; want it as its executor reported it", r)
		}
		if r := got["e4"]; !r.Running {
			t.Errorf("an execution started after the sweep's snapshot: %+v; want it running", r)
		}
		if r := got["e5"]; r.FailureCause != OrphanCause {
			t.Errorf("e5: %+v; want it closed as an orphan", r)
		}
		// Reports that come after the sweep: e1's executor's, e5's task's end as the agent said.
		w.Execution(completed(orphan, t0.Add(2*time.Second), nil))
		w.Ended(TaskEnd{TaskID: ended.TaskID, At: t0.Add(3 * time.Second), Cause: "TASK_FAILED (REASON_EXECUTOR_TERMINATED)"})
		flush(t, w)
		got = byID()
		if r := got["e1"]; !r.Success || r.FailureCause != "" {
			t.Errorf("the orphan after its own completion: %+v; want the executor's report", r)
		}
		if r := got["e5"]; r.Success || r.FailureCause != "TASK_FAILED (REASON_EXECUTOR_TERMINATED)" {
			t.Errorf("e5 after its task's end: %+v; want the end's cause", r)
		}
	})
}

// An execution's id is the executor's to choose: an event naming the id of another task's run
// (a faulty or hostile executor) neither completes nor overwrites that run; it is refused,
// counted failed. The run's own task completes it all the same afterwards.
func TestAnExecutionEventTouchesOnlyItsOwnTasksRow(t *testing.T) {
	eachDB(t, func(t *testing.T, db *DB) {
		ctx := context.Background()
		w := NewWriter(db, WriterConfig{}, quiet())
		defer w.Close()
		own := exec("e1", "job-a", 0, t0)
		w.Execution(own)
		flush(t, w)
		forged := own
		forged.TaskID, forged.Hostname = "job-a@-@1@-@READY@-@agent-S1@-@u9", "host-9"
		for i, c := range []struct {
			name string
			ev   taskdata.Execution
		}{
			{"another task's completion", completed(forged, t0.Add(time.Minute), errors.New("forged"))},
			{"another task's start", forged},
		} {
			w.Execution(c.ev)
			fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			err := w.Flush(fctx)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			p, err := db.Executions(ctx, Query{})
			if err != nil {
				t.Fatal(err)
			}
			if r := p.Rows[0]; p.Total != 1 || r.TaskID != own.TaskID || r.Hostname != "host-1" || !r.Running || r.FailureCause != "" || r.CompleteTime != nil {
				t.Fatalf("%s: rows %+v; want e1 still task %s's, running", c.name, p.Rows, own.TaskID)
			}
			if s := w.Stats(); s.Failed != int64(i+1) {
				t.Errorf("%s: writer stats %+v; want the event refused (%d failed)", c.name, s, i+1)
			}
		}
		w.Execution(completed(own, t0.Add(time.Minute), nil))
		fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		if err := w.Flush(fctx); err != nil {
			t.Fatal(err)
		}
		if p, err := db.Executions(ctx, Query{}); err != nil || p.Total != 1 || p.Rows[0].Running || !p.Rows[0].Success {
			t.Fatalf("rows %+v (%v); want e1 completed by its own task", p.Rows, err)
		}
	})
}

func TestStatusTraces(t *testing.T) {
	eachDB(t, func(t *testing.T, db *DB) {
		ctx := context.Background()
		w := NewWriter(db, WriterConfig{Batch: 7}, quiet())
		defer w.Close()
		states := []string{"TASK_STAGING", "TASK_RUNNING", "TASK_FINISHED"}
		for i := 0; i < 30; i++ {
			job := "job-a"
			if i%3 == 2 {
				job = "job-b"
			}
			w.Trace(StatusTrace{JobName: job, TaskID: tid, SlaveID: "agent-S0", Source: "CLOUD_SCHEDULER", ExecutionType: "READY",
				ShardingItems: "[0]", State: states[i%3], Message: fmt.Sprintf("m%02d", i), CreationTime: t0.Add(time.Duration(i) * time.Minute)})
		}
		flush(t, w)
		cases := []struct {
			name  string
			q     Query
			total int
			first string // message of the first row
			rows  int
		}{
			{"default: newest first, 10 a page", Query{}, 30, "m29", 10},
			{"second page of 7 ascending", Query{PerPage: 7, Page: 2, Sort: "creationTime", Order: "asc"}, 30, "m07", 7},
			{"last page", Query{PerPage: 7, Page: 5, Sort: "creation_time", Order: "asc"}, 30, "m28", 2},
			{"sort by message desc", Query{Sort: "message", Order: "desc", PerPage: 1}, 30, "m29", 1},
			{"filter job", Query{Filters: map[string]string{"jobName": "job-b"}, Sort: "message", Order: "asc"}, 10, "m02", 10},
			{"filter job and state", Query{Filters: map[string]string{"jobName": "job-a", "state": "TASK_RUNNING"}, Sort: "message"}, 10, "m01", 10},
			{"time range", Query{Start: t0.Add(10 * time.Minute), End: t0.Add(12 * time.Minute), Sort: "message"}, 3, "m10", 3},
			{"unknown parameters are ignored", Query{Filters: map[string]string{"_": "123", "search": "x"}}, 30, "m29", 10},
			{"empty filters are ignored", Query{Filters: map[string]string{"jobName": ""}}, 30, "m29", 10},
			{"page past the end", Query{Page: 9}, 30, "", 0},
			{"no match", Query{Filters: map[string]string{"taskId": "other@-@0@-@READY@-@a@-@b"}}, 0, "", 0},
		}
		for _, c := range cases {
			p, err := db.StatusTraces(ctx, c.q)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if p.Total != c.total || len(p.Rows) != c.rows || c.rows > 0 && p.Rows[0].Message != c.first {
				first := ""
				if len(p.Rows) > 0 {
					first = p.Rows[0].Message
				}
				t.Errorf("%s: total %d, %d rows, first %q; want %d, %d, %q", c.name, p.Total, len(p.Rows), first, c.total, c.rows, c.first)
			}
		}
		p, _ := db.StatusTraces(ctx, Query{PerPage: 1})
		r := p.Rows[0]
		if r.JobName != "job-b" || r.TaskID != tid || r.SlaveID != "agent-S0" || r.Source != "CLOUD_SCHEDULER" || r.ExecutionType != "READY" ||
			r.ShardingItems != "[0]" || r.State != "TASK_FINISHED" || r.Message != "m29" || *r.CreationTime != t0.Add(29*time.Minute).UnixMilli() || len(r.ID) != 36 {
			t.Errorf("row fields: %+v", r)
		}
	})
}

// Every row of a relaunched task names the task it replaces, as 2.1.5 wrote them, though the
// scheduler names it at the TASK_STAGING only: from the STAGING written in the same batch or
// an earlier one, or by an earlier leader (another writer). A task that replaces none, or
// whose STAGING is not there, has "" on every row.
func TestEveryRowOfARelaunchNamesItsOriginalTask(t *testing.T) {
	eachDB(t, func(t *testing.T, db *DB) {
		ctx := context.Background()
		task := func(n int) string { return fmt.Sprintf("job-a@-@%d@-@FAILOVER@-@agent-S0@-@u%d", n, n) }
		trace := func(w *Writer, id, state, original string) {
			w.Trace(StatusTrace{JobName: "job-a", OriginalTaskID: original, TaskID: id, SlaveID: "agent-S0", Source: "CLOUD_SCHEDULER",
				ExecutionType: "FAILOVER", ShardingItems: "[0]", State: state, CreationTime: t0})
		}
		earlier := NewWriter(db, WriterConfig{}, quiet()) // an earlier leader's
		trace(earlier, task(4), "TASK_STAGING", tid)
		earlier.Close()
		w := NewWriter(db, WriterConfig{}, quiet())
		defer w.Close()
		trace(w, task(1), "TASK_STAGING", tid)
		trace(w, task(1), "TASK_RUNNING", "") // queued with its STAGING: in its batch, most likely
		trace(w, task(2), "TASK_STAGING", "")
		trace(w, task(2), "TASK_RUNNING", "")
		flush(t, w)
		for _, id := range []string{task(1), task(2), task(4), task(3)} {
			trace(w, id, "TASK_FINISHED", "") // a later batch; task(3) has no STAGING
		}
		flush(t, w)
		for _, c := range []struct {
			name, task, original string
			rows                 int
		}{
			{"a relaunch", task(1), tid, 3},
			{"not a relaunch", task(2), "", 3},
			{"a relaunch by an earlier leader", task(4), tid, 2},
			{"no STAGING", task(3), "", 1},
		} {
			p, err := db.StatusTraces(ctx, Query{Filters: map[string]string{"taskId": c.task}})
			if err != nil {
				t.Fatal(err)
			}
			if p.Total != c.rows {
				t.Errorf("%s: %d rows; want %d", c.name, p.Total, c.rows)
			}
			for _, r := range p.Rows {
				if r.OriginalTaskID != c.original {
					t.Errorf("%s: its %s row has original task %q; want %q", c.name, r.State, r.OriginalTaskID, c.original)
				}
			}
		}
	})
}

// Sort and filter parameters that are not what they name are refused before any SQL runs, and
// the tables are untouched.
func TestInjectionIsRefused(t *testing.T) {
	eachDB(t, func(t *testing.T, db *DB) {
		ctx := context.Background()
		w := NewWriter(db, WriterConfig{}, quiet())
		w.Execution(exec("e1", "job-a", 0, t0))
		w.Trace(StatusTrace{JobName: "job-a", TaskID: tid, SlaveID: "s", Source: "CLOUD_SCHEDULER", ExecutionType: "READY", ShardingItems: "[0]", State: "TASK_RUNNING"})
		w.Close()
		attempts := []struct {
			field string
			q     Query
		}{
			{"sort", Query{Sort: "job_name; DROP TABLE JOB_EXECUTION_LOG"}},
			{"sort", Query{Sort: "(SELECT 1)"}},
			{"sort", Query{Sort: "job_name DESC, (CASE WHEN 1=1 THEN id END)"}},
			{"order", Query{Sort: "id", Order: "asc; DELETE FROM JOB_EXECUTION_LOG"}},
			{"jobName", Query{Filters: map[string]string{"jobName": "x' OR '1'='1"}}},
			{"taskId", Query{Filters: map[string]string{"taskId": "'; DROP TABLE JOB_STATUS_TRACE_LOG; --"}}},
			{"ip", Query{Filters: map[string]string{"ip": "1.1.1.1' OR 1=1 --"}}},
			{"isSuccess", Query{Filters: map[string]string{"isSuccess": "1 OR 1=1"}}},
			{"state", Query{Filters: map[string]string{"state": "TASK_RUNNING' OR 'a'='a"}}},
			{"slaveId", Query{Filters: map[string]string{"slaveId": "a\" OR \"\"=\""}}},
		}
		for _, a := range attempts {
			_, errE := db.Executions(ctx, a.q)
			_, errT := db.StatusTraces(ctx, a.q)
			for _, err := range []error{errE, errT} {
				var fe *config.FieldError
				if err == nil {
					if _, isExecFilter := executionTable.columns[a.field]; a.field == "slaveId" && !isExecFilter || a.field == "state" || a.field == "ip" || a.field == "isSuccess" {
						continue // not a filter of that log: ignored, and never in the SQL
					}
				}
				if !errors.As(err, &fe) || fe.Field != a.field {
					t.Errorf("%+v: error %v; want a field error naming %s", a.q, err, a.field)
				}
			}
		}
		pe, err := db.Executions(ctx, Query{})
		pt, err2 := db.StatusTraces(ctx, Query{})
		if err != nil || err2 != nil || pe.Total != 1 || pt.Total != 1 {
			t.Fatalf("after the attempts: %d executions (%v), %d traces (%v); want 1 and 1", pe.Total, err, pt.Total, err2)
		}
	})
}

func TestCloseWritesEverythingQueued(t *testing.T) {
	eachDB(t, func(t *testing.T, db *DB) {
		w := NewWriter(db, WriterConfig{Queue: 5000, Batch: 250}, quiet())
		const n = 3000
		for i := 0; i < n; i++ {
			w.Trace(StatusTrace{JobName: "job-a", TaskID: tid, SlaveID: "s", Source: "CLOUD_SCHEDULER", ExecutionType: "READY", ShardingItems: "[0]", State: "TASK_RUNNING", CreationTime: t0})
		}
		w.Close()
		if s := w.Stats(); s.Written != n || s.Dropped != 0 || s.Failed != 0 {
			t.Fatalf("stats after Close %+v; want %d written", s, n)
		}
		p, err := db.StatusTraces(context.Background(), Query{PerPage: 1})
		if err != nil || p.Total != n {
			t.Fatalf("%d rows (%v), want %d", p.Total, err, n)
		}
		w.Trace(StatusTrace{JobName: "late"}) // after Close: dropped, not a panic
		if s := w.Stats(); s.Dropped != 1 {
			t.Fatalf("an event after Close: stats %+v, want 1 dropped", s)
		}
	})
}

// A database that cannot keep up never blocks the scheduler: a full queue drops and counts.
func TestFullQueueDropsRatherThanBlocks(t *testing.T) {
	dir := t.TempDir()
	db, err := Open(context.Background(), "sqlite://"+filepath.Join(dir, "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// Another connection holds the write lock: the writer's transaction waits on it.
	lock, err := db.db.Conn(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lock.ExecContext(context.Background(), "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	w := NewWriter(db, WriterConfig{Queue: 10, Batch: 1}, quiet())
	start := time.Now()
	const n = 1000
	for i := 0; i < n; i++ {
		w.Trace(StatusTrace{JobName: "job-a", TaskID: tid, SlaveID: "s", Source: "CLOUD_SCHEDULER", ExecutionType: "READY", ShardingItems: "[0]", State: "TASK_RUNNING"})
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("%d offers took %v with the database locked; they must not wait for it", n, d)
	}
	if s := w.Stats(); s.Dropped < n-20 {
		t.Fatalf("stats %+v: want at least %d dropped", s, n-20)
	}
	lock.ExecContext(context.Background(), "COMMIT")
	lock.Close()
	w.Close()
	s := w.Stats()
	p, _ := db.StatusTraces(context.Background(), Query{PerPage: 1})
	if int64(p.Total) != s.Written || s.Written+s.Dropped+s.Failed != n {
		t.Fatalf("stats %+v, %d rows: every event is written, dropped or failed, and the written ones are there", s, p.Total)
	}
}

func TestTaskResultStatisticsFillGapsWithZeros(t *testing.T) {
	eachDB(t, func(t *testing.T, db *DB) {
		ctx := context.Background()
		if err := db.AddTaskResult(ctx, Minute, t0, 3, 1); err != nil {
			t.Fatal(err)
		}
		if err := db.AddTaskResult(ctx, Minute, t0.Add(4*time.Minute), 5, 2); err != nil { // three minutes missed
			t.Fatal(err)
		}
		rows, err := db.TaskResults(ctx, Minute, t0)
		if err != nil {
			t.Fatal(err)
		}
		want := [][3]int64{{3, 1, 0}, {0, 0, 1}, {0, 0, 2}, {0, 0, 3}, {5, 2, 4}}
		if len(rows) != len(want) {
			t.Fatalf("rows %+v; want %d", rows, len(want))
		}
		for i, w := range want {
			r := rows[i]
			if int64(r.SuccessCount) != w[0] || int64(r.FailedCount) != w[1] || r.StatisticsTime != t0.Add(time.Duration(w[2])*time.Minute).UnixMilli() || r.StatisticInterval != Minute || r.ID == 0 || r.CreationTime == 0 {
				t.Errorf("row %d: %+v; want %v", i, r, w)
			}
		}
		latest, err := db.LatestTaskResult(ctx, Minute, time.Now())
		if err != nil || latest.SuccessCount != 5 || latest.StatisticsTime != t0.Add(4*time.Minute).UnixMilli() || latest.ID != rows[4].ID {
			t.Fatalf("latest %+v (%v)", latest, err)
		}
		if s, f, err := db.SumTaskResults(ctx, Minute, t0.Add(time.Minute)); err != nil || s != 5 || f != 2 {
			t.Fatalf("sum %d %d (%v), want 5 2", s, f, err)
		}
		empty, err := db.LatestTaskResult(ctx, Hour, t0)
		if err != nil || empty.ID != 0 || empty.SuccessCount != 0 || empty.StatisticsTime != t0.UnixMilli() || empty.StatisticInterval != Hour {
			t.Fatalf("latest of an empty table %+v (%v): want zeros at now", empty, err)
		}
	})
}

// Running and registered counts carry the latest count over the periods no leader counted, as
// Elastic-Job-Cloud does: the jobs stayed registered and their tasks ran on meanwhile.
func TestCountStatisticsCarryTheLatestCountOverAGap(t *testing.T) {
	eachDB(t, func(t *testing.T, db *DB) {
		ctx := context.Background()
		for _, c := range []struct {
			at time.Time
			n  int
		}{{t0, 7}, {t0.Add(4 * time.Minute), 9}} { // three minutes missed
			if err := db.addCount(ctx, TaskRunningStats, "running_count", Minute, c.at, c.n); err != nil {
				t.Fatal(err)
			}
		}
		rows, err := db.TaskRunning(ctx, t0)
		if err != nil {
			t.Fatal(err)
		}
		var got []int
		for _, r := range rows {
			got = append(got, r.RunningCount)
		}
		if fmt.Sprint(got) != "[7 7 7 7 9]" {
			t.Fatalf("running counts %v; want [7 7 7 7 9]", got)
		}
	})
}

type fakeSource struct{ tasks, jobs, registered int }

func (f fakeSource) RunningCounts(context.Context) (int, int, error) { return f.tasks, f.jobs, nil }
func (f fakeSource) RegisteredJobs(context.Context) (int, error)     { return f.registered, nil }

func TestStatisticsTick(t *testing.T) {
	eachDB(t, func(t *testing.T, db *DB) {
		ctx := context.Background()
		res := NewResults()
		now := t0.Add(59 * time.Minute)
		s := &Statistics{DB: db, Results: res, Source: fakeSource{tasks: 7, jobs: 3, registered: 11}, Log: quiet(), Now: func() time.Time { return now }}
		res.Add(true)
		res.Add(true)
		res.Add(false)
		s.Tick(ctx, t0.Add(58*time.Minute), t0.Add(59*time.Minute)) // a minute inside the hour
		res.Add(true)
		now = t0.Add(60 * time.Minute)
		s.Tick(ctx, t0.Add(59*time.Minute), t0.Add(60*time.Minute)) // the hour turns
		min, _ := db.TaskResults(ctx, Minute, t0)
		hour, _ := db.TaskResults(ctx, Hour, t0)
		day, _ := db.TaskResults(ctx, Day, t0.Add(-48*time.Hour))
		if len(min) != 2 || min[0].SuccessCount != 2 || min[0].FailedCount != 1 || min[1].SuccessCount != 1 {
			t.Errorf("minute rows %+v", min)
		}
		if len(hour) != 1 || hour[0].SuccessCount != 3 || hour[0].FailedCount != 1 || hour[0].StatisticsTime != t0.Add(time.Hour).UnixMilli() {
			t.Errorf("hour rows %+v", hour)
		}
		if len(day) != 0 {
			t.Errorf("day rows %+v; the day has not turned", day)
		}
		if succ, fail := res.Pending(Day); succ != 3 || fail != 1 {
			t.Errorf("pending day counts %d %d, want 3 1", succ, fail)
		}
		tr, _ := db.TaskRunning(ctx, t0)
		jr, _ := db.JobRunning(ctx, t0)
		reg, _ := db.JobRegister(ctx, t0.Add(-24*time.Hour))
		if len(tr) != 2 || tr[1].RunningCount != 7 || len(jr) != 2 || jr[1].RunningCount != 3 {
			t.Errorf("running rows %+v %+v", tr, jr)
		}
		if len(reg) != 1 || reg[0].RegisteredCount != 11 || reg[0].StatisticsTime != t0.Truncate(24*time.Hour).UnixMilli() {
			t.Errorf("registered rows %+v: one row for the day, written when the leader started", reg)
		}
	})
}

func TestPurgeInBatches(t *testing.T) {
	eachDB(t, func(t *testing.T, db *DB) {
		ctx := context.Background()
		w := NewWriter(db, WriterConfig{Queue: 5000}, quiet())
		old := t0.Add(-40 * 24 * time.Hour)
		const n = 2*purgeBatch + 17
		for i := 0; i < n; i++ {
			w.Trace(StatusTrace{JobName: "job-a", TaskID: tid, SlaveID: "s", Source: "CLOUD_SCHEDULER", ExecutionType: "READY", ShardingItems: "[0]", State: "TASK_RUNNING", CreationTime: old})
		}
		w.Trace(StatusTrace{JobName: "job-a", TaskID: tid, SlaveID: "s", Source: "CLOUD_SCHEDULER", ExecutionType: "READY", ShardingItems: "[0]", State: "TASK_RUNNING", CreationTime: t0})
		w.Execution(completed(exec("old", "job-a", 0, old), old, nil))
		w.Execution(exec("new", "job-a", 0, t0))
		w.Close()
		for _, iv := range []Interval{Minute, Day} {
			if err := db.AddTaskResult(ctx, iv, old, 1, 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := db.addCount(ctx, JobRegisterStats, "registered_count", Day, old, 3); err != nil {
			t.Fatal(err)
		}
		got, err := db.Purge(ctx, t0.Add(-30*24*time.Hour))
		if err != nil || got != n+2 { // the old traces, the old execution and the minute row
			t.Fatalf("purged %d (%v), want %d", got, err, n+2)
		}
		// What "since online" is counted from stays: the day results and the registered jobs.
		if s, _, err := db.SumTaskResults(ctx, Day, old); err != nil || s != 1 {
			t.Fatalf("day results since %v: %d (%v); want the old day's 1 kept", old, s, err)
		}
		if reg, err := db.JobRegister(ctx, old); err != nil || len(reg) != 1 {
			t.Fatalf("registered rows %+v (%v); want the old one kept", reg, err)
		}
		pt, _ := db.StatusTraces(ctx, Query{})
		pe, _ := db.Executions(ctx, Query{})
		if pt.Total != 1 || pe.Total != 1 || pe.Rows[0].ID != "new" {
			t.Fatalf("left %d traces, %d executions (%+v); want the new ones", pt.Total, pe.Total, pe.Rows)
		}
	})
}

func TestCheckDSN(t *testing.T) {
	good := []string{"sqlite:///var/lib/ejcloud/trace.db", "postgres://u:p@127.0.0.1:5432/db?sslmode=disable", "postgresql://u@host/db",
		"mysql://u:p@tcp(127.0.0.1:3306)/db", "mysql://u:p@127.0.0.1:3306/db"}
	bad := []string{"", "trace.db", "sqlite://relative.db", "sqlite://", "oracle://x", "postgres://", "mysql://u:p@127.0.0.1:3306/", "mysql://u:p@tcp(127.0.0.1:3306)"}
	for _, d := range good {
		if err := CheckDSN(d); err != nil {
			t.Errorf("CheckDSN(%q): %v", d, err)
		}
	}
	for _, d := range bad {
		if err := CheckDSN(d); err == nil {
			t.Errorf("CheckDSN(%q): no error", d)
		}
	}
	if err := CheckDSN("postgres://u:secret@h/db?x=1"); err != nil || redact("postgres://u:secret@h/db") != "postgres://u:xxxxx@h/db" {
		t.Errorf("redact: %q", redact("postgres://u:secret@h/db"))
	}
	if msg := fmt.Sprint(CheckDSN("mysql://u:secret@h:1/")); msg == "" || contains(msg, "secret") {
		t.Errorf("an error shows the password: %s", msg)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// Run writes the rows at the minute boundary, on its own clock.
func TestStatisticsRunTicksAtTheMinute(t *testing.T) {
	db, err := Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	// A clock 200 ms before a minute boundary: the first tick comes 200 ms from now.
	offset := Minute.Truncate(time.Now()).Add(time.Minute - 200*time.Millisecond).Sub(time.Now())
	res := NewResults()
	res.Add(false)
	s := &Statistics{DB: db, Results: res, Source: fakeSource{tasks: 4, jobs: 1, registered: 9}, Log: quiet(), Now: func() time.Time { return time.Now().Add(offset) }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx) }()
	defer func() { cancel(); <-done }()
	boundary := Minute.Truncate(time.Now().Add(offset)).Add(time.Minute)
	await.True(t, 10*time.Second, "the minute's rows written", func() bool {
		reg, err := db.JobRegister(context.Background(), time.Time{}) // the tick's last row
		return err == nil && len(reg) > 0
	})
	r, _ := db.LatestTaskResult(context.Background(), Minute, s.now()) // on the statistics' clock
	reg, _ := db.JobRegister(context.Background(), time.Time{})
	run, _ := db.TaskRunning(context.Background(), time.Time{})
	if r.FailedCount != 1 || r.StatisticsTime != boundary.UnixMilli() || len(reg) != 1 || reg[0].RegisteredCount != 9 || len(run) != 1 || run[0].RunningCount != 4 {
		t.Fatalf("after the tick: %+v, registered %+v, running %+v; want the minute at %v", r, reg, run, boundary)
	}
}

// The writer and the statistics jobs write at once (and the API reads) without failing each
// other: SQLite's transactions wait for the write lock rather than fail.
func TestConcurrentWritersDoNotFail(t *testing.T) {
	eachDB(t, func(t *testing.T, db *DB) {
		ctx := context.Background()
		w := NewWriter(db, WriterConfig{Batch: 50}, quiet())
		done := make(chan error, 2)
		go func() {
			for i := 0; i < 60; i++ {
				if err := db.AddTaskResult(ctx, Minute, t0.Add(time.Duration(i)*time.Minute), 1, 0); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		go func() {
			for i := 0; i < 60; i++ {
				if _, err := db.Executions(ctx, Query{Filters: map[string]string{"jobName": "job-a"}}); err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		for i := 0; i < 2000; i++ {
			e := exec(fmt.Sprintf("c%04d", i), "job-a", i%5, t0)
			w.Execution(e)
			w.Execution(completed(e, t0.Add(time.Second), nil))
		}
		for i := 0; i < 2; i++ {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		w.Close()
		if s := w.Stats(); s.Failed != 0 || s.Dropped != 0 || s.Written != 4000 {
			t.Fatalf("writer stats %+v; want 4000 written", s)
		}
		p, err := db.Executions(ctx, Query{Filters: map[string]string{"isSuccess": "true"}})
		if err != nil || p.Total != 2000 {
			t.Fatalf("%d successful executions (%v), want 2000", p.Total, err)
		}
	})
}

// A JOB_EXECUTION_LOG that Elastic-Job-Cloud 2.1.5 made first (is_success INT NOT NULL) takes
// runs as they start: a start writes is_success 0, as Elastic-Job did (a NULL failed the
// insert, and with it every event of its batch). A run is running until it completes, and the
// success filter sees only the runs that ended.
func TestAnElasticJobExecutionTableTakesRunningRuns(t *testing.T) {
	ctx := context.Background()
	dsn := "sqlite://" + filepath.Join(t.TempDir(), "trace.db")
	db, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{`DROP TABLE JOB_EXECUTION_LOG`, `CREATE TABLE JOB_EXECUTION_LOG (id VARCHAR(40) NOT NULL, job_name VARCHAR(100) NOT NULL,
		task_id VARCHAR(255) NOT NULL, hostname VARCHAR(255) NOT NULL, ip VARCHAR(50) NOT NULL, sharding_item INT NOT NULL,
		execution_source VARCHAR(20) NOT NULL, failure_cause VARCHAR(4000) NULL, is_success INT NOT NULL,
		start_time TIMESTAMP NULL, complete_time TIMESTAMP NULL, PRIMARY KEY (id))`} {
		if _, err := db.db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	db.Close()
	if db, err = Open(ctx, dsn); err != nil { // finds 2.1.5's table and keeps it
		t.Fatal(err)
	}
	defer db.Close()
	w := NewWriter(db, WriterConfig{}, quiet())
	defer w.Close()
	w.Execution(exec("e1", "job-a", 0, t0))
	w.Execution(completed(exec("e2", "job-a", 1, t0), t0.Add(time.Second), errors.New("exit status 3")))
	w.Trace(StatusTrace{JobName: "job-a", TaskID: tid, SlaveID: "agent-S0", Source: "CLOUD_EXECUTOR", ExecutionType: "READY", ShardingItems: "[0]", State: "TASK_RUNNING", CreationTime: t0})
	flush(t, w)
	for _, tc := range []struct {
		filter string
		want   []string
	}{{"", []string{"e1 running", "e2 failed"}}, {"false", []string{"e2 failed"}}, {"true", nil}} {
		q := Query{Sort: "id", Order: "asc", Filters: map[string]string{"isSuccess": tc.filter}}
		p, err := db.Executions(ctx, q)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, r := range p.Rows {
			state := map[bool]string{true: "running", false: "failed"}[r.Running]
			if r.Success {
				state = "succeeded"
			}
			got = append(got, r.ID+" "+state)
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("isSuccess=%q: %v; want %v", tc.filter, got, tc.want)
		}
	}
}

// redact hides every form of a DSN's password that the drivers take: in the user information
// (also where Go cannot parse the DSN as a URL, and where the password has a colon) and in a
// PostgreSQL query parameter.
func TestRedactHidesThePassword(t *testing.T) {
	for _, tc := range []struct{ dsn, want string }{
		{"postgres://u:secret@h/db", "postgres://u:xxxxx@h/db"},
		{"postgres://u@h/db?password=secret&sslmode=disable", "postgres://u@h/db?password=xxxxx&sslmode=disable"},
		{"postgres://u@h/db?sslpassword=secret", "postgres://u@h/db?sslpassword=xxxxx"},
		{"mysql://u:secret@tcp(h:3306)/db", "mysql://u:xxxxx@tcp(h:3306)/db"},
		{"mysql://u:sec:ret@tcp(h:3306)/db", "mysql://u:xxxxx@tcp(h:3306)/db"},
		{"mysql://u:s@cret@tcp(h:3306)/db", "mysql://u:xxxxx@tcp(h:3306)/db"},
		{"sqlite:///var/lib/trace.db", "sqlite:///var/lib/trace.db"},
		// A pair Go's query parser drops (a bad escape) is masked all the same, and the other
		// pairs are kept as they were given.
		{"postgres://u@h:1/db?password=sec%zzret", "postgres://u@h:1/db?password=xxxxx"},
		{"postgres://u@h:1/db?sslmode=disable&PassWord=sec%zzret&x=%41", "postgres://u@h:1/db?sslmode=disable&PassWord=xxxxx&x=%41"},
		{"postgres://u@h:1/db?pass%zzword=secret", "postgres://u@h:1/db?pass%zzword=xxxxx"},
	} {
		if got := redact(tc.dsn); got != tc.want {
			t.Errorf("redact(%q) = %q; want %q", tc.dsn, got, tc.want)
		}
	}
	// The start-up error of a database that cannot be reached (or whose DSN its driver cannot
	// parse) shows no password.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, dsn := range []string{"postgres://u@127.0.0.1:1/db?password=sec%zzret", "postgres://u:secret@127.0.0.1:1/db?sslpassword=secret&password=sec%zzret"} {
		_, err := Open(ctx, dsn)
		if err == nil || strings.Contains(err.Error(), "sec") {
			t.Errorf("Open(%q): %v; want an error without the password", dsn, err)
		}
	}
}

// Every Mesos task state fits the state column, also in a table Elastic-Job 2.1.5 made with
// VARCHAR(20), which opening widens; and a message that is not valid UTF-8, or holds a NUL
// byte, is written cleaned rather than failing its batch.
func TestEveryStateAndAnyMessageAreWritten(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			dsn := b.dsn(t)
			db, err := Open(ctx, dsn)
			if err != nil {
				t.Fatal(err)
			}
			for _, q := range []string{`DROP TABLE JOB_STATUS_TRACE_LOG`, `CREATE TABLE JOB_STATUS_TRACE_LOG (id VARCHAR(40) NOT NULL, job_name VARCHAR(100) NOT NULL,
				original_task_id VARCHAR(255) NOT NULL, task_id VARCHAR(255) NOT NULL, slave_id VARCHAR(1000) NOT NULL, source VARCHAR(50) NOT NULL,
				execution_type VARCHAR(20) NOT NULL, sharding_item VARCHAR(100) NOT NULL, state VARCHAR(20) NOT NULL, message VARCHAR(4000) NULL,
				creation_time TIMESTAMP NULL, PRIMARY KEY (id))` + db.d.tableOpts} { // as on a server whose default is utf8mb4
				if _, err := db.db.ExecContext(ctx, q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			db.Close()
			if db, err = Open(ctx, dsn); err != nil { // finds 2.1.5's table and widens its state
				t.Fatal(err)
			}
			defer db.Close()
			w := NewWriter(db, WriterConfig{}, quiet())
			defer w.Close()
			for i, st := range mesos.TaskState_name {
				w.Trace(StatusTrace{JobName: "job-a", TaskID: tid, SlaveID: "agent-S0", Source: "CLOUD_SCHEDULER", ExecutionType: "READY",
					ShardingItems: "[0]", State: st, Message: fmt.Sprintf("state %d", i), CreationTime: t0})
			}
			w.Trace(StatusTrace{JobName: "job-b", TaskID: tid, SlaveID: "agent-S0", Source: "CLOUD_EXECUTOR", ExecutionType: "READY",
				ShardingItems: "[0]", State: "TASK_FAILED", Message: "job failed: \xff\xfe bad\x00bytes", CreationTime: t0})
			w.Execution(completed(exec("e1", "job-b", 0, t0), t0.Add(time.Second), errors.New("exit \x00 \xc3")))
			flush(t, w)
			p, err := db.StatusTraces(ctx, Query{PerPage: 100})
			if err != nil || p.Total != len(mesos.TaskState_name)+1 {
				t.Fatalf("%d traces (%v); want %d", p.Total, err, len(mesos.TaskState_name)+1)
			}
			q, err := db.StatusTraces(ctx, Query{Filters: map[string]string{"jobName": "job-b"}})
			if err != nil || len(q.Rows) != 1 || q.Rows[0].Message != "job failed: \uFFFD bad\uFFFDbytes" {
				t.Fatalf("%+v (%v); want the message cleaned", q.Rows, err)
			}
		})
	}
}

// An event the database refuses whatever is done to it costs that event only, not its batch.
// SQLite takes a value of any length, so only the servers have such an event.
func TestAnEventTheDatabaseRefusesCostsOnlyItself(t *testing.T) {
	for _, b := range backends[1:] {
		t.Run(b.name, func(t *testing.T) {
			db, err := Open(context.Background(), b.dsn(t))
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			w := NewWriter(db, WriterConfig{Batch: 20}, quiet())
			defer w.Close()
			for i := range 10 {
				job := "job-a"
				if i == 4 {
					job = strings.Repeat("j", 300) // longer than job_name's VARCHAR(100)
				}
				w.Trace(StatusTrace{JobName: job, TaskID: tid, SlaveID: "agent-S0", Source: "CLOUD_SCHEDULER", ExecutionType: "READY",
					ShardingItems: "[0]", State: "TASK_RUNNING", CreationTime: t0})
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := w.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if s := w.Stats(); s.Written != 9 || s.Failed != 1 {
				t.Fatalf("writer stats %+v; want 9 written and the refused one failed", s)
			}
		})
	}
}

// A database that hangs does not hold the writer's close past its grace: what is left is
// counted failed, instead of each batch waiting out its retries and timeouts.
func TestCloseWithinGivesUpOnAHungDatabase(t *testing.T) {
	dsn := eventtracetest.Postgres(t)
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p := statetest.NewProxy(t, u.Host)
	u.Host = p.Addr
	db, err := Open(context.Background(), u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	w := NewWriter(db, WriterConfig{Batch: 10}, quiet())
	p.DropRequests() // the database hangs: nothing it is sent arrives
	const n = 50
	for i := range n {
		w.Trace(StatusTrace{JobName: "job-a", TaskID: tid, SlaveID: "agent-S0", Source: "CLOUD_SCHEDULER", ExecutionType: "READY",
			ShardingItems: "[0]", State: "TASK_RUNNING", Message: fmt.Sprint(i), CreationTime: t0})
	}
	closed := make(chan struct{})
	go func() {
		w.CloseWithin(200 * time.Millisecond)
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(30 * time.Second): // one batch's first attempt alone would wait this long
		t.Fatal("CloseWithin(200ms) still waits for the hung database after 30 s")
	}
	if s := w.Stats(); s.Written != 0 || s.Failed != n {
		t.Fatalf("writer stats %+v; want all %d events failed", s, n)
	}
	p.Restore()
}
