package scheduler

import (
	"context"
	"fmt"
	"math"
	"sync"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/api"
	"github.com/ejcloud/ejcloud/eventtrace"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/taskdata"
	"github.com/ejcloud/ejcloud/taskid"
)

// tracer is the scheduler's side of the event trace (--event-trace-db): what it writes as it
// launches tasks and records their status updates, and the leader's statistics and retention
// jobs. A nil tracer (no database) does nothing.
type tracer struct {
	db      *eventtrace.DB
	w       *eventtrace.Writer
	results *eventtrace.Results
	log     logrus.FieldLogger
	// retention and purgeEvery drive the purge of old rows.
	retention, purgeEvery time.Duration
	// said is the last state traced of each task not ended, in this leadership term (see
	// repeats); mu guards it.
	mu   sync.Mutex
	said map[string]mesos.TaskState
}

// newTerm forgets the states traced in the last term: tasks that ended under other leaders are
// not remembered for ever, and a new leader traces its first view of each task.
func (t *tracer) newTerm() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.said = nil
}

// repeats says whether st is a reconciliation's answer that only repeats the last state traced
// for its task, and notes st's state as the last one. The leader reconciles every task every
// --reconcile-interval: the master's "still running" for each would be two rows per running
// task every ten minutes (a thousand daemons: 288,000 rows a day), none of them news. The
// first answer of a term is traced (the new leader's view), and so is every answer that
// differs (a task found unreachable, lost or gone).
func (t *tracer) repeats(task string, st mesos.TaskStatus) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := st.GetState()
	last, known := t.said[task]
	if ended(s) {
		delete(t.said, task)
	} else {
		if t.said == nil {
			t.said = map[string]mesos.TaskState{}
		}
		t.said[task] = s
	}
	return st.GetReason() == mesos.REASON_RECONCILIATION && known && last == s && !ended(s)
}

// recentSet remembers the last recentSetSize strings added.
type recentSet struct {
	mu   sync.Mutex
	set  map[string]struct{}
	ring []string
	next int
}

const recentSetSize = 4096

// add adds k and says whether it was new.
func (r *recentSet) add(k string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.set[k]; ok {
		return false
	}
	if r.set == nil {
		r.set, r.ring = make(map[string]struct{}, recentSetSize), make([]string, recentSetSize)
	}
	delete(r.set, r.ring[r.next])
	r.ring[r.next] = k
	r.next = (r.next + 1) % recentSetSize
	r.set[k] = struct{}{}
	return true
}

// openTracer opens the database of cfg.EventTraceDB, or returns nil when there is none.
func openTracer(ctx context.Context, cfg Config, log logrus.FieldLogger) (*tracer, error) {
	if cfg.EventTraceDB == "" {
		return nil, nil
	}
	db, err := eventtrace.Connect(cfg.EventTraceDB)
	if err != nil {
		return nil, fmt.Errorf("--event-trace-db: %w", err)
	}
	if cfg.EventTraceRetention == 0 {
		cfg.EventTraceRetention = 30 * 24 * time.Hour
	}
	log = log.WithField("component", "eventtrace")
	// A database that does not answer yet does not keep the scheduler from scheduling: the
	// events wait in the writer's queue, and every read and write makes the tables first once
	// it answers.
	readyCtx, cancel := context.WithTimeout(ctx, traceReadyWait)
	err = db.Ready(readyCtx)
	cancel()
	switch {
	case ctx.Err() != nil:
		db.Close()
		return nil, ctx.Err()
	case err != nil:
		log.WithError(err).WithField("database", db.Dialect()).Warn("event trace database not ready; scheduling without it: " +
			"the events wait in a queue of 10,000 and are written once it answers, and the history and statistics answer 503 until then")
	default:
		log.WithField("database", db.Dialect()).Info("event trace database open")
	}
	return &tracer{db: db, w: eventtrace.NewWriter(db, eventtrace.WriterConfig{}, log), results: eventtrace.NewResults(), log: log,
		retention: cfg.EventTraceRetention, purgeEvery: 10 * time.Minute}, nil
}

// traceReadyWait bounds the first attempt at the event trace database as the scheduler starts.
const traceReadyWait = 10 * time.Second

// traceCloseGrace bounds the writing of the queued events at shutdown: a database that is down
// must not hold the process past its supervisor's patience (SIGKILL loses them anyway).
const traceCloseGrace = 5 * time.Second

// termFlushGrace bounds the writing of a leadership term's task results as it ends.
const termFlushGrace = 2 * time.Second

// close writes the task results left and every queued event, then closes the database.
func (t *tracer) close() {
	if t == nil {
		return
	}
	// Results counted after the last term's end was written (its work was unwinding) go in
	// too, within the same grace as the events.
	deadline := time.Now().Add(traceCloseGrace)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	(&eventtrace.Statistics{DB: t.db, Results: t.results, Log: t.log}).Flush(ctx)
	cancel()
	t.w.CloseWithin(max(0, time.Until(deadline)))
	if s := t.w.Stats(); s.Dropped > 0 || s.Failed > 0 {
		t.log.WithFields(logrus.Fields{"written": s.Written, "dropped": s.Dropped, "failed": s.Failed}).Warn("event trace: not every event was written")
	}
	t.db.Close()
}

// launched records a task's TASK_STAGING, as Elastic-Job-Cloud does when it launches one;
// original is, for a relaunch, the failed task it replaces.
func (t *tracer) launched(ti mesos.TaskInfo, original string) {
	if t == nil {
		return
	}
	id, err := taskid.Parse(ti.TaskID.Value)
	if err != nil {
		return
	}
	t.repeats(id.String(), mesos.TaskStatus{State: mesos.TASK_STAGING.Enum()})
	t.w.Trace(eventtrace.StatusTrace{JobName: id.JobName, OriginalTaskID: original, TaskID: id.String(), SlaveID: id.AgentID, Source: "CLOUD_SCHEDULER",
		ExecutionType: string(id.Type), ShardingItems: fmt.Sprintf("[%d]", id.Item), State: mesos.TASK_STAGING.String(), CreationTime: time.Now()})
}

// unsent traces the end of a task written ahead whose ACCEPT was never sent, the Mesos stream
// having ended first: Mesos never heard of it and will send no update, so its TASK_STAGING
// (traced before the ACCEPT, so that it precedes every update of a task that did launch) would
// otherwise be its last row for good. TASK_DROPPED is Mesos's state for a task never launched.
// It is no task result: the shard is queued to launch again, in the same run.
func (t *tracer) unsent(ti mesos.TaskInfo) {
	if t == nil {
		return
	}
	id, err := taskid.Parse(ti.TaskID.Value)
	if err != nil {
		return
	}
	t.w.Trace(eventtrace.StatusTrace{JobName: id.JobName, TaskID: id.String(), SlaveID: id.AgentID, Source: "CLOUD_SCHEDULER",
		ExecutionType: string(id.Type), ShardingItems: fmt.Sprintf("[%d]", id.Item), State: mesos.TASK_DROPPED.String(),
		Message: unsentMessage, CreationTime: time.Now()})
}

// statusTime is when the update's state was reached, as whoever made the update (executor,
// agent, master) stamped it: a task that ended while no leader was there, its update
// recorded minutes later, ended then. now stands in for an update without a timestamp, or
// with one ahead of it (a clock ahead of the scheduler's: no run ends in the future).
func statusTime(st mesos.TaskStatus, now time.Time) time.Time {
	ts := st.GetTimestamp()
	if ts <= 0 {
		return now
	}
	// Seconds in a float64 hold about a microsecond's precision at today's epoch: rounded to
	// it, a time stamped to the millisecond comes back as that millisecond.
	at := time.UnixMicro(int64(math.Round(ts * 1e6)))
	if at.After(now) {
		return now
	}
	return at
}

// unsentMessage is the message of an unsent task's TASK_DROPPED.
const unsentMessage = "the launch was never sent: the Mesos stream ended first; the shard is queued to launch again"

// recorded traces a status update the leader has recorded: its JOB_STATUS_TRACE_LOG row, the
// execution event the executor put in its data, and, if counts, the task result it is.
func (t *tracer) recorded(st mesos.TaskStatus, counts bool) {
	if t == nil {
		return
	}
	id, err := taskid.Parse(st.TaskID.Value)
	if err != nil {
		return
	}
	source := "CLOUD_SCHEDULER"
	if st.GetSource() == mesos.SOURCE_EXECUTOR {
		source = "CLOUD_EXECUTOR"
	}
	slave := id.AgentID
	if st.AgentID != nil {
		slave = st.AgentID.Value
	}
	if t.repeats(id.String(), st) && len(st.Data) == 0 && !counts {
		return // no execution, no end, no result: nothing else to write either
	}
	t.w.Trace(eventtrace.StatusTrace{JobName: id.JobName, TaskID: id.String(), SlaveID: slave, Source: source,
		ExecutionType: string(id.Type), ShardingItems: fmt.Sprintf("[%d]", id.Item), State: st.GetState().String(), Message: st.GetMessage(), CreationTime: time.Now()})
	d, _ := taskdata.DecodeStatus(st.Data) // undecodable data has no execution event; the trace row stands
	ex := d.Execution
	if ex != nil && ex.TaskID == id.String() {
		t.w.Execution(*ex)
	}
	if ended(st.GetState()) && (ex == nil || ex.TaskID != id.String() || ex.CompleteTime == nil) {
		// The end comes from the agent or the master (the executor died, the agent was lost)
		// or from a run's end record: no completion of the executor's closes the run's
		// execution row, which would show as running for good.
		t.w.Ended(eventtrace.TaskEnd{TaskID: id.String(), At: statusTime(st, time.Now()), Success: st.GetState() == mesos.TASK_FINISHED,
			Cause: endCause(st)})
	}
	if !counts {
		return
	}
	switch st.GetState() {
	case mesos.TASK_FINISHED:
		t.results.Add(true)
	case mesos.TASK_RUNNING:
		if st.GetMessage() == "COMPLETE" { // a daemon's run ended
			t.results.Add(d.Execution == nil || d.Execution.Success)
		}
	case mesos.TASK_FAILED, mesos.TASK_ERROR, mesos.TASK_LOST, mesos.TASK_DROPPED, mesos.TASK_GONE, mesos.TASK_GONE_BY_OPERATOR, mesos.TASK_UNKNOWN:
		t.results.Add(false)
	}
}

// closeOrphans has the writer close the executions left open by tasks that no longer run
// (eventtrace.Orphans), as the term begins and then as often as the purge runs: their ends were
// lost with an earlier leader's queue (a SIGKILL, a shutdown past its grace) or a full queue,
// and the history would show them running for good.
func (t *tracer) closeOrphans(ctx context.Context, store *state.Store) {
	for {
		running, err := store.Running(ctx)
		switch {
		case err == nil:
			set := make(map[string]bool, len(running))
			for _, r := range running {
				set[r.TaskID] = true
			}
			now := time.Now()
			t.w.CloseOrphans(eventtrace.Orphans{Running: set, Before: now, At: now})
		case ctx.Err() == nil:
			t.log.WithError(err).Warn("cannot read the running tasks: the executions they left open are looked at next time")
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(t.purgeEvery):
		}
	}
}

// traceEventsDesc exports the writer's counts (eventtrace.Writer.Stats), which were only logged.
var traceEventsDesc = prometheus.NewDesc("ejcloud_event_trace_events_total",
	"event trace events by outcome: written; dropped (the queue was full, or the writer closed); failed (refused by the database, or left unwritten when the shutdown's grace ended)",
	[]string{"outcome"}, nil)

// traceCollector reads the writer's counts at each scrape.
type traceCollector struct{ t *tracer }

func (c traceCollector) Describe(ch chan<- *prometheus.Desc) { ch <- traceEventsDesc }

func (c traceCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.t.w.Stats()
	ch <- prometheus.MustNewConstMetric(traceEventsDesc, prometheus.CounterValue, float64(s.Written), "written")
	ch <- prometheus.MustNewConstMetric(traceEventsDesc, prometheus.CounterValue, float64(s.Dropped), "dropped")
	ch <- prometheus.MustNewConstMetric(traceEventsDesc, prometheus.CounterValue, float64(s.Failed), "failed")
}

// api is what the REST API reads of the trace.
func (t *tracer) api() *api.Trace {
	if t == nil {
		return nil
	}
	return &api.Trace{DB: t.db, Results: t.results}
}

// lead runs the leader's statistics and retention jobs until ctx ends; wg owns them.
//
// The task results not yet in a row are the term's own: they start from none, and the term
// writes what is left as it ends, into the rows of the periods in progress, which the next
// term's rows of those periods add to (eventtrace.Statistics.Flush). Counts left from an
// earlier term (its end could not write them, or they came as its work unwound) are of
// periods long gone maybe, and are discarded, logged, rather than written into this term's
// first rows. Rows computed from the minute rows instead would be exact across terms too, but
// would cost the statistics jobs and the API a sum of up to 1,440 rows each, and fail when the
// retention is shorter than a day.
func (t *tracer) lead(ctx context.Context, wg *sync.WaitGroup, store *state.Store) {
	if t == nil {
		return
	}
	t.newTerm()
	if succ, fail := t.results.Reset(); succ > 0 || fail > 0 {
		t.log.WithFields(logrus.Fields{"success": succ, "failed": fail}).Warn("task results an earlier leadership term could not write are discarded")
	}
	stats := &eventtrace.Statistics{DB: t.db, Results: t.results, Source: traceSource{store}, Log: t.log}
	wg.Add(3)
	go func() {
		defer wg.Done()
		t.closeOrphans(ctx, store)
	}()
	go func() {
		defer wg.Done()
		stats.Run(ctx)
		// The term is over: its context is done, but its counts are still to be written, in a
		// few small transactions; briefly, since a shutdown waits for them (during the HTTP
		// server's grace).
		flushCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), termFlushGrace)
		defer cancel()
		stats.Flush(flushCtx)
	}()
	go func() {
		defer wg.Done()
		t.db.RunPurge(ctx, t.retention, t.purgeEvery, t.log)
	}()
}

// traceSource counts what the statistics jobs need in the leader's model.
type traceSource struct{ store *state.Store }

func (s traceSource) RunningCounts(ctx context.Context) (tasks, jobs int, err error) {
	running, err := s.store.Running(ctx)
	if err != nil {
		return 0, 0, err
	}
	seen := map[string]bool{}
	for _, r := range running {
		seen[r.Meta.JobName] = true
	}
	return len(running), len(seen), nil
}

func (s traceSource) RegisteredJobs(ctx context.Context) (int, error) {
	jobs, err := s.store.Jobs(ctx)
	return len(jobs), err
}

// ended says whether a task in state s has ended.
func ended(s mesos.TaskState) bool {
	switch s {
	case mesos.TASK_FINISHED, mesos.TASK_FAILED, mesos.TASK_KILLED, mesos.TASK_ERROR, mesos.TASK_LOST, mesos.TASK_DROPPED,
		mesos.TASK_GONE, mesos.TASK_GONE_BY_OPERATOR, mesos.TASK_UNKNOWN:
		return true
	}
	return false
}

// endCause is the failure cause of an execution that a status update ended: its state, its
// reason and its message, e.g. "TASK_FAILED (REASON_EXECUTOR_TERMINATED): Executor terminated".
func endCause(st mesos.TaskStatus) string {
	cause := st.GetState().String()
	if st.Reason != nil {
		cause += " (" + st.GetReason().String() + ")"
	}
	if m := st.GetMessage(); m != "" {
		cause += ": " + m
	}
	return cause
}
