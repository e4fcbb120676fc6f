package scheduler

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"

	"github.com/ejcloud/ejcloud/eventtrace"
	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/taskdata"
	"github.com/ejcloud/ejcloud/taskid"
)

// What the leader writes for each recorded update: a status trace, the execution event of its
// data, and the task result it counts for.
func TestTracerRecordsUpdates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tr, err := openTracer(ctx, Config{EventTraceDB: "sqlite://" + filepath.Join(t.TempDir(), "t.db")}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	tid := "job@-@2@-@FAILOVER@-@S1@-@u1"
	start := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	ex := taskdata.Execution{ID: "x1", JobName: "job", TaskID: tid, Hostname: "h", IP: "127.0.0.1", ShardingItem: 2, ExecutionSource: taskdata.FailoverRun, StartTime: start}
	done := ex
	done.Complete(start.Add(time.Second), errors.New("boom"))
	daemonRun := taskdata.Execution{ID: "x2", JobName: "job", TaskID: tid, Hostname: "h", IP: "127.0.0.1", ShardingItem: 2, ExecutionSource: taskdata.FailoverRun, StartTime: start}
	daemonRun.Complete(start.Add(2*time.Second), nil)
	st := func(s mesos.TaskState, msg string, d taskdata.Status) mesos.TaskStatus {
		return mesos.TaskStatus{TaskID: mesos.TaskID{Value: tid}, State: s.Enum(), Message: &msg, Source: mesos.SOURCE_EXECUTOR.Enum(),
			AgentID: &mesos.AgentID{Value: "S1"}, Data: d.Encode()}
	}
	tr.recorded(st(mesos.TASK_RUNNING, "", taskdata.Status{Execution: &ex}), true)
	tr.recorded(st(mesos.TASK_RUNNING, "COMPLETE", taskdata.Status{Execution: &daemonRun}), true) // success
	tr.recorded(st(mesos.TASK_FAILED, "job failed", taskdata.Status{JobFailed: true, Execution: &done}), true)
	tr.recorded(st(mesos.TASK_FINISHED, "", taskdata.Status{}), true)
	tr.recorded(st(mesos.TASK_FINISHED, "", taskdata.Status{}), false)                                            // an end after the end, another update: traced, not counted
	tr.recorded(st(mesos.TASK_UNKNOWN, "", taskdata.Status{}), true)                                              // a failure (SPEC §5.7)
	tr.recorded(st(mesos.TASK_KILLED, "", taskdata.Status{}), true)                                               // not a result
	tr.recorded(mesos.TaskStatus{TaskID: mesos.TaskID{Value: "not-ours"}, State: mesos.TASK_FAILED.Enum()}, true) // ignored
	relaunch := "job@-@2@-@FAILOVER@-@S2@-@u2"
	tr.launched(mesos.TaskInfo{TaskID: mesos.TaskID{Value: relaunch}}, tid)        // its STAGING names the task it replaces
	for _, s := range []mesos.TaskState{mesos.TASK_RUNNING, mesos.TASK_FINISHED} { // and so do its later rows
		tr.recorded(mesos.TaskStatus{TaskID: mesos.TaskID{Value: relaunch}, State: s.Enum(), Source: mesos.SOURCE_EXECUTOR.Enum()}, false)
	}
	if s, f := tr.results.Pending(eventtrace.Minute); s != 2 || f != 2 {
		t.Errorf("results %d/%d; want 2 successes (FINISHED, COMPLETE) and 2 failures (FAILED, UNKNOWN)", s, f)
	}
	if err := tr.w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := tr.db.StatusTraces(ctx, eventtrace.Query{Sort: "creationTime", Order: "asc"})
	if err != nil || p.Total != 10 {
		t.Fatalf("%d traces (%v); want 10", p.Total, err)
	}
	o, err := tr.db.StatusTraces(ctx, eventtrace.Query{Filters: map[string]string{"originalTaskId": tid}, Sort: "state"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range o.Rows {
		got = append(got, r.TaskID+" "+r.State)
	}
	// Every row of the relaunch, as 2.1.5 wrote them, not its TASK_STAGING only.
	if want := []string{relaunch + " TASK_FINISHED", relaunch + " TASK_RUNNING", relaunch + " TASK_STAGING"}; !slices.Equal(got, want) {
		t.Fatalf("traces of tasks replacing %s: %q; want %q", tid, got, want)
	}
	f, err := tr.db.StatusTraces(ctx, eventtrace.Query{Filters: map[string]string{"state": "TASK_FAILED"}})
	if err != nil || f.Total != 1 {
		t.Fatalf("%d FAILED traces (%v); want 1", f.Total, err)
	}
	if r := f.Rows[0]; r.State != "TASK_FAILED" || r.Message != "job failed" || r.Source != "CLOUD_EXECUTOR" || r.ExecutionType != "FAILOVER" || r.ShardingItems != "[2]" || r.SlaveID != "S1" {
		t.Errorf("trace %+v", r)
	}
	e, err := tr.db.Executions(ctx, eventtrace.Query{Sort: "id", Order: "asc"})
	if err != nil || e.Total != 2 || e.Rows[0].Success || e.Rows[0].FailureCause != "boom" || e.Rows[0].Running || !e.Rows[1].Success {
		t.Fatalf("executions %+v (%v)", e, err)
	}
	tr.close()
	var nilTracer *tracer // no --event-trace-db: every call is a no-op
	nilTracer.recorded(st(mesos.TASK_FINISHED, "", taskdata.Status{}), true)
	nilTracer.close()
	if nilTracer.api() != nil {
		t.Fatal("a nil tracer gives the API a trace")
	}
}

// sqliteTracer is a tracer on an SQLite database of the test's own, closed when it ends.
func sqliteTracer(t *testing.T) *tracer {
	t.Helper()
	tr, err := openTracer(context.Background(), Config{EventTraceDB: "sqlite://" + filepath.Join(t.TempDir(), "t.db")}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.close)
	return tr
}

// The master's answers to the periodic reconciliation that only say a task is still as the
// last trace said are not traced (two rows per running task every --reconcile-interval); an
// answer that differs is, and so is a new term's first view of each task.
func TestAReconciliationAnswerThatRepeatsATasksStateIsNotTraced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tr := sqliteTracer(t)
	tid := "job@-@0@-@READY@-@S1@-@u1"
	update := func(s mesos.TaskState, source mesos.TaskStatus_Source, reason *mesos.TaskStatus_Reason) {
		tr.recorded(mesos.TaskStatus{TaskID: mesos.TaskID{Value: tid}, State: s.Enum(), Source: source.Enum(), Reason: reason, AgentID: &mesos.AgentID{Value: "S1"}}, false)
	}
	recon := mesos.REASON_RECONCILIATION.Enum()
	tr.launched(mesos.TaskInfo{TaskID: mesos.TaskID{Value: tid}}, "")
	update(mesos.TASK_STAGING, mesos.SOURCE_MASTER, recon) // as launched: not traced
	update(mesos.TASK_RUNNING, mesos.SOURCE_EXECUTOR, nil)
	for range 3 {
		update(mesos.TASK_RUNNING, mesos.SOURCE_MASTER, recon) // still running: not traced
	}
	update(mesos.TASK_UNREACHABLE, mesos.SOURCE_MASTER, recon)
	update(mesos.TASK_RUNNING, mesos.SOURCE_MASTER, recon) // back: traced
	tr.newTerm()
	update(mesos.TASK_RUNNING, mesos.SOURCE_MASTER, recon) // the new term's view: traced
	update(mesos.TASK_RUNNING, mesos.SOURCE_MASTER, recon) // not traced
	update(mesos.TASK_RUNNING, mesos.SOURCE_EXECUTOR, nil) // not an answer (a daemon's message): traced
	update(mesos.TASK_FINISHED, mesos.SOURCE_EXECUTOR, nil)
	update(mesos.TASK_FINISHED, mesos.SOURCE_MASTER, recon) // an end: traced, as every end
	if err := tr.w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := tr.db.StatusTraces(ctx, eventtrace.Query{PerPage: 100})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range p.Rows {
		got = append(got, strings.TrimPrefix(r.State, "TASK_"))
	}
	slices.Sort(got) // rows written in one batch share their time, and ids are random
	if want := []string{"FINISHED", "FINISHED", "RUNNING", "RUNNING", "RUNNING", "RUNNING", "STAGING", "UNREACHABLE"}; !slices.Equal(got, want) {
		t.Fatalf("traced %q; want %q", got, want)
	}
}

// A DAEMON run counts once in the task results however often its COMPLETE comes: the agent
// sends an update again until it is acknowledged, and the run's BEGIN is what starts the next.
func TestADaemonRunCountsOnce(t *testing.T) {
	t.Parallel()
	w, tr := newTracedGroupWorld(t)
	ctx := context.Background()
	say := func(msg, uuid string) mesos.TaskStatus {
		st := upd(w.tasks[0], mesos.TASK_RUNNING, uuid)
		st.Message = &msg
		return st
	}
	for _, tc := range []struct {
		name    string
		updates []mesos.TaskStatus
		want    int // successes counted so far
	}{
		{"a run ends", []mesos.TaskStatus{say("BEGIN", "b1"), say("COMPLETE", "c1")}, 1},
		{"its COMPLETE sent again", []mesos.TaskStatus{say("COMPLETE", "c1")}, 1},
		{"the next run ends", []mesos.TaskStatus{say("BEGIN", "b2"), say("COMPLETE", "c2")}, 2},
	} {
		w.ld.updates(ctx, tc.updates)
		if s, f := tr.results.Pending(eventtrace.Minute); s != tc.want || f != 0 {
			t.Fatalf("%s: results %d/%d; want %d successes, no failure", tc.name, s, f, tc.want)
		}
	}
}

// The task results a leadership term counted are written when it ends, into the rows of the
// periods in progress, so that a leader change or a shutdown does not lose them; and a term
// starts from none, so that a process that leads again, maybe days later, does not write what
// it counted before into its first rows.
func TestTraceTermsWriteTheirResultsAndStartAfresh(t *testing.T) {
	t.Parallel()
	w := newGroupWorld(t)
	ctx := context.Background()
	dsn := "sqlite://" + filepath.Join(t.TempDir(), "t.db")
	tr, err := openTracer(ctx, Config{EventTraceDB: dsn}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	term := func(during func()) {
		ctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		tr.lead(ctx, &wg, w.ld.store)
		during()
		cancel()
		wg.Wait()
	}
	sums := func(db *eventtrace.DB) string {
		var out []string
		for _, iv := range []eventtrace.Interval{eventtrace.Minute, eventtrace.Hour, eventtrace.Day} {
			s, f, err := db.SumTaskResults(ctx, iv, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%s %d/%d", iv, s, f))
		}
		return strings.Join(out, ", ")
	}
	term(func() {
		tr.results.Add(true)
		tr.results.Add(false)
	})
	if got, want := sums(tr.db), "MINUTE 1/1, HOUR 1/1, DAY 1/1"; got != want {
		t.Errorf("after the term: %s; want %s", got, want)
	}
	tr.results.Add(true) // counted after the term's end was written: no term's
	term(func() {
		for _, iv := range []eventtrace.Interval{eventtrace.Minute, eventtrace.Hour, eventtrace.Day} {
			if s, f := tr.results.Pending(iv); s != 0 || f != 0 {
				t.Errorf("a new term starts with %d/%d %s results of an earlier one", s, f, iv)
			}
		}
	})
	if got, want := sums(tr.db), "MINUTE 1/1, HOUR 1/1, DAY 1/1"; got != want {
		t.Errorf("after a term that counted nothing: %s; want %s", got, want)
	}
	tr.results.Add(false) // a shutdown writes what is left
	tr.close()
	db, err := eventtrace.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if got, want := sums(db), "MINUTE 1/2, HOUR 1/2, DAY 1/2"; got != want {
		t.Fatalf("after the shutdown: %s; want %s", got, want)
	}
}

// The writer's counts of events written, dropped (a full queue, or after its close) and
// failed are Prometheus counters.
func TestTraceWriterCountsAreMetrics(t *testing.T) {
	t.Parallel()
	w, tr := newTracedGroupWorld(t)
	inst := w.ld.inst
	inst.store = w.ld.store
	h := inst.metricsHandler()
	tr.launched(mesos.TaskInfo{TaskID: mesos.TaskID{Value: w.tasks[0].String()}}, "")
	tr.launched(mesos.TaskInfo{TaskID: mesos.TaskID{Value: w.tasks[1].String()}}, "")
	tr.w.Close()
	tr.launched(mesos.TaskInfo{TaskID: mesos.TaskID{Value: w.tasks[2].String()}}, "") // dropped: the writer is closed
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	var got []string
	for _, l := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(l, "ejcloud_event_trace") {
			got = append(got, l)
		}
	}
	for _, want := range []string{`ejcloud_event_trace_events_total{outcome="written"} 2`, `ejcloud_event_trace_events_total{outcome="dropped"} 1`,
		`ejcloud_event_trace_events_total{outcome="failed"} 0`} {
		if !strings.Contains(rec.Body.String(), want+"\n") {
			t.Errorf("/metrics lacks %s; its event trace lines: %q", want, got)
		}
	}
}

// A task written ahead whose ACCEPT was never sent (the stream ended between the two) has its
// TASK_STAGING followed by a TASK_DROPPED saying so: Mesos never heard of it and sends no
// update, and the trace must not show it staging for good. It is no task result: the shard
// launches again.
func TestATaskWhoseLaunchWasNeverSentIsTracedDropped(t *testing.T) {
	t.Parallel()
	ctx, _, _, _, ld := aReadyRun(t)
	tr, err := openTracer(ctx, Config{EventTraceDB: "sqlite://" + filepath.Join(t.TempDir(), "t.db")}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.close)
	ld.inst.trace = tr
	ld.inst.hooks.writtenAhead = func() { ld.sub.end() }
	ld.cycle(ctx, burstOffers(0))
	if err := tr.w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := tr.db.StatusTraces(ctx, eventtrace.Query{PerPage: 100})
	if err != nil {
		t.Fatal(err)
	}
	states := map[string][]string{} // by task
	for _, r := range p.Rows {
		states[r.TaskID] = append(states[r.TaskID], r.State)
		if r.State == "TASK_DROPPED" && r.Message != unsentMessage {
			t.Errorf("task %s's TASK_DROPPED says %q; want %q", r.TaskID, r.Message, unsentMessage)
		}
	}
	if len(states) != 2 {
		t.Fatalf("traces of %d tasks: %v; want the job's 2 shards'", len(states), states)
	}
	for task, got := range states {
		slices.Sort(got)
		if want := []string{"TASK_DROPPED", "TASK_STAGING"}; !slices.Equal(got, want) {
			t.Errorf("task %s traced %v; want %v: its launch was never sent", task, got, want)
		}
	}
	if s, f := tr.results.Pending(eventtrace.Minute); s != 0 || f != 0 {
		t.Errorf("results %d/%d; want none: the shards launch again", s, f)
	}
}

// A scheduler whose event trace database does not answer as it starts schedules all the same
// (a history must not stop the jobs): the events wait, the history answers an error, and once
// the database answers its tables are made and the events written.
func TestTheTraceStartsWhileItsDatabaseIsDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "not-yet") // SQLite cannot open a file in a directory that is not there
	tr, err := openTracer(ctx, Config{EventTraceDB: "sqlite://" + filepath.Join(dir, "t.db")}, quietLog())
	if err != nil {
		t.Fatalf("openTracer with the database down: %v; want a tracer that writes once it is up", err)
	}
	defer tr.close()
	tid := "job@-@0@-@READY@-@S1@-@u1"
	tr.launched(mesos.TaskInfo{TaskID: mesos.TaskID{Value: tid}}, "")
	if _, err := tr.db.StatusTraces(ctx, eventtrace.Query{}); !eventtrace.NotReady(err) {
		t.Fatalf("a search while the database is down: %v; want it not ready", err)
	}
	// The writer tries and is refused (it tries once a batch has lingered, 50 ms): the event
	// waits, neither written nor failed.
	held, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if err := tr.w.Flush(held); err == nil {
		t.Fatal("the event was written while the database was down")
	}
	if s := tr.w.Stats(); s.Written != 0 || s.Failed != 0 {
		t.Fatalf("writer stats %+v while the database is down; want the event held", s)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := tr.w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := tr.db.StatusTraces(ctx, eventtrace.Query{})
	if err != nil || p.Total != 1 || p.Rows[0].TaskID != tid || p.Rows[0].State != mesos.TASK_STAGING.String() {
		t.Fatalf("once the database is up: %+v, %v; want the STAGING of %s", p, err, tid)
	}
	if s := tr.w.Stats(); s.Failed != 0 || s.Dropped != 0 {
		t.Fatalf("writer stats %+v; want nothing failed or dropped", s)
	}
}

// A term begins by closing the executions left open by tasks that no longer run (their ends
// were lost with an earlier leader's queue), and leaves those of the running tasks open.
func TestATermClosesTheExecutionsOfTasksThatNoLongerRun(t *testing.T) {
	t.Parallel()
	w := newGroupWorld(t)
	ctx := context.Background()
	tr, err := openTracer(ctx, Config{EventTraceDB: "sqlite://" + filepath.Join(t.TempDir(), "t.db")}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer tr.close()
	start := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	live := taskdata.Execution{ID: "live", JobName: "fo", TaskID: w.tasks[0].String(), Hostname: "h", IP: "127.0.0.1", StartTime: start}
	gone := live
	gone.ID, gone.TaskID = "gone", taskid.New(taskid.Meta{JobName: "fo", Item: 1}, taskid.Ready, "S0").String() // never in the running queue
	tr.w.Execution(live)
	tr.w.Execution(gone)

	termCtx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	tr.lead(termCtx, &wg, w.ld.store)
	defer func() { cancel(); wg.Wait() }()
	rows := map[string]eventtrace.Execution{}
	await.True(t, 20*time.Second, "the orphaned execution closed", func() bool {
		p, err := tr.db.Executions(ctx, eventtrace.Query{})
		if err != nil {
			return false
		}
		for _, r := range p.Rows {
			rows[r.ID] = r
		}
		r, ok := rows["gone"]
		return ok && !r.Running
	})
	if r := rows["gone"]; r.FailureCause != eventtrace.OrphanCause || r.Success {
		t.Errorf("the orphan: %+v; want it failed with OrphanCause", r)
	}
	if r := rows["live"]; !r.Running {
		t.Errorf("a running task's execution: %+v; want it running", r)
	}
}

// A run whose executor could not report its end is completed at the time its task's update
// says the task ended, not when the leader recorded it (minutes later, after a leaderless
// gap); an update without a timestamp, or with one ahead of the scheduler's clock, at the
// time it is recorded.
func TestARunEndedByItsTasksUpdateEndsWhenTheUpdateSays(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	stamped := func(at time.Time) mesos.TaskStatus {
		ts := float64(at.UnixNano()) / float64(time.Second)
		return mesos.TaskStatus{TaskID: mesos.TaskID{Value: "t"}, State: mesos.TASK_FAILED.Enum(), Timestamp: &ts}
	}
	for _, tc := range []struct {
		name string
		st   mesos.TaskStatus
		want time.Time
	}{
		{"stamped before", stamped(now.Add(-10 * time.Minute)), now.Add(-10 * time.Minute)},
		{"no timestamp", mesos.TaskStatus{TaskID: mesos.TaskID{Value: "t"}, State: mesos.TASK_FAILED.Enum()}, now},
		{"stamped ahead", stamped(now.Add(time.Hour)), now},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := statusTime(tc.st, now); got.Sub(tc.want).Abs() > time.Millisecond {
				t.Fatalf("statusTime = %v; want %v", got, tc.want)
			}
		})
	}

	ctx := context.Background()
	tr := sqliteTracer(t)
	tid := "job@-@0@-@READY@-@S1@-@u1"
	started := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	tr.w.Execution(taskdata.Execution{ID: "x1", JobName: "job", TaskID: tid, Hostname: "h", IP: "127.0.0.1", StartTime: started})
	ended := started.Add(10 * time.Minute)
	st := stamped(ended)
	st.TaskID.Value, st.Source = tid, mesos.SOURCE_AGENT.Enum()
	tr.recorded(st, true)
	if err := tr.w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	p, err := tr.db.Executions(ctx, eventtrace.Query{})
	if err != nil || p.Total != 1 || p.Rows[0].CompleteTime == nil || *p.Rows[0].CompleteTime != ended.UnixMilli() {
		t.Fatalf("executions %+v (%v); want x1 completed at %v", p.Rows, err, ended)
	}
}
