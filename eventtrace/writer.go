package eventtrace

import (
	"context"
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	mysqldrv "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/sirupsen/logrus"
	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/ejcloud/ejcloud/taskdata"
)

// StatusTrace is one row of JOB_STATUS_TRACE_LOG: a status update the scheduler recorded.
type StatusTrace struct {
	ID             string
	JobName        string
	OriginalTaskID string
	TaskID         string
	SlaveID        string
	Source         string // CLOUD_SCHEDULER, CLOUD_EXECUTOR
	ExecutionType  string // READY, FAILOVER
	ShardingItems  string // "[0]", as Elastic-Job prints the list
	State          string // TASK_RUNNING, …
	Message        string
	CreationTime   time.Time
}

// event is one write: a status trace, an execution's start or completion, the end of a
// task whose executor could not report its executions' completions, or a sweep closing the
// executions a dead leader left open (orphans). Going through the one queue orders a sweep
// after every event queued before it.
type event struct {
	trace   *StatusTrace
	exec    *taskdata.Execution
	ended   *TaskEnd
	orphans *Orphans
	flush   chan struct{} // a marker: closed once every event before it is written
}

// TaskEnd completes the executions of a task still open (no complete time) when the task
// ended without its executor reporting their end: the executor died with it, its agent was
// lost, or its report was lost and the scheduler learned the end another way. Without it
// those rows would show as running for good.
type TaskEnd struct {
	TaskID  string
	At      time.Time
	Success bool
	Cause   string // the failure cause of an unsuccessful end
}

// Orphans closes the executions still open whose task no longer runs: their end was lost (a
// scheduler stopped with it in its queue, SIGKILLed, or past its close's grace; a queue that
// overflowed), and without this they would show as running for good. Running is the set of
// tasks running when the sweep was queued: an end recorded before that was queued before the
// sweep, and is written first, so a task the set leaves out has had its own events written by
// then. What the sweep writes is a guess that a report overwrites: an executor's completion,
// or the task's end (TaskEnd), coming later (from another scheduler's queue, or queued just
// after the model the set was read from).
type Orphans struct {
	Running map[string]bool
	Before  time.Time // only executions started before it
	At      time.Time // their complete time
}

// OrphanCause is the failure cause of an execution Orphans closed.
const OrphanCause = "its end was never recorded (lost with a scheduler that stopped, or with a full event queue), and its task no longer runs"

// Writer writes events in batches from one goroutine, so that the scheduler's offer cycle and
// status acknowledgements never wait for the database. Offer never blocks: when the queue is
// full the event is dropped, counted and logged. While the database is unavailable the writer
// holds its batch and retries it, and the queue holds the rest (write). Close writes
// everything queued before it.
type Writer struct {
	db     *DB
	log    logrus.FieldLogger
	in     chan event
	batch  int
	linger time.Duration
	mu     sync.RWMutex // guards closed against Offer racing Close
	closed bool
	done   chan struct{}
	// ctx bounds every write; abandon ends it when CloseWithin's grace is over, so that what is
	// left fails at once instead of each batch waiting out its timeouts.
	ctx     context.Context
	abandon context.CancelFunc
	dropped atomic.Int64
	failed  atomic.Int64
	written atomic.Int64
	lastLog atomic.Int64 // unix nanoseconds of the last "dropped" warning
	// downSince is when the database became unavailable (zero while it takes writes), and
	// downLogged when that was last logged; only the writing goroutine uses them.
	downSince, downLogged time.Time
	// origins holds the original task ids of tasks recently traced (only the writing
	// goroutine uses it).
	origins originCache
}

// originCache remembers, for the last originCacheSize tasks whose TASK_STAGING was written or
// looked up, the task each replaces ("" for none), so that their later rows carry it without a
// query each: the cost of the original task id on every row is then a query per task launched
// by an earlier leader, not per row.
type originCache struct {
	byTask map[string]string
	ring   []string
	next   int
}

const originCacheSize = 16384

func (c *originCache) get(task string) (string, bool) {
	o, ok := c.byTask[task]
	return o, ok
}

func (c *originCache) put(task, original string) {
	if c.byTask == nil {
		c.byTask, c.ring = make(map[string]string, originCacheSize), make([]string, originCacheSize)
	}
	if _, ok := c.byTask[task]; !ok {
		delete(c.byTask, c.ring[c.next])
		c.ring[c.next] = task
		c.next = (c.next + 1) % originCacheSize
	}
	c.byTask[task] = original
}

// WriterConfig sizes a Writer.
type WriterConfig struct {
	Queue int // events held while the database is slower than the scheduler (default 10,000)
	Batch int // most events per transaction (default 500)
	// Linger is how long a batch waits for more events before it is written (default 50 ms).
	Linger time.Duration
}

// NewWriter starts a writer on db; Close stops it.
func NewWriter(db *DB, cfg WriterConfig, log logrus.FieldLogger) *Writer {
	if cfg.Queue <= 0 {
		cfg.Queue = 10000
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 500
	}
	if cfg.Linger <= 0 {
		cfg.Linger = 50 * time.Millisecond
	}
	w := &Writer{db: db, log: log, in: make(chan event, cfg.Queue), batch: cfg.Batch, linger: cfg.Linger, done: make(chan struct{})}
	w.ctx, w.abandon = context.WithCancel(context.Background())
	go w.run()
	return w
}

// Trace queues a status trace.
func (w *Writer) Trace(st StatusTrace) {
	if st.ID == "" {
		st.ID = newID()
	}
	if st.CreationTime.IsZero() {
		st.CreationTime = time.Now()
	}
	w.offer(event{trace: &st})
}

// Execution queues an execution event: its start (no CompleteTime) or its completion.
func (w *Writer) Execution(ex taskdata.Execution) {
	if ex.ID == "" {
		return // without an id the completion could not find its start
	}
	w.offer(event{exec: &ex})
}

// Ended queues the completion of a task's open executions (TaskEnd).
func (w *Writer) Ended(end TaskEnd) {
	w.offer(event{ended: &end})
}

// CloseOrphans queues a sweep of the executions left open by tasks that no longer run.
func (w *Writer) CloseOrphans(o Orphans) {
	w.offer(event{orphans: &o})
}

func (w *Writer) offer(e event) {
	w.mu.RLock()
	defer w.mu.RUnlock()
	if w.closed {
		w.drop("the writer is closed")
		return
	}
	select {
	case w.in <- e:
	default:
		w.drop("the queue is full")
	}
}

func (w *Writer) drop(why string) {
	n := w.dropped.Add(1)
	now := time.Now().UnixNano()
	if last := w.lastLog.Load(); now-last > int64(10*time.Second) && w.lastLog.CompareAndSwap(last, now) {
		w.log.WithFields(logrus.Fields{"dropped_total": n, "why": why}).Warn("event trace: events dropped rather than slowing the scheduler")
	}
}

// Stats are the writer's counters.
type Stats struct{ Written, Dropped, Failed int64 }

// Stats returns how many events were written, dropped for a full queue, and lost to errors.
func (w *Writer) Stats() Stats {
	return Stats{Written: w.written.Load(), Dropped: w.dropped.Load(), Failed: w.failed.Load()}
}

// Flush waits until every event queued before it is written, or ctx ends.
func (w *Writer) Flush(ctx context.Context) error {
	mark := make(chan struct{})
	w.mu.RLock()
	if w.closed {
		w.mu.RUnlock()
		return nil
	}
	select {
	case w.in <- event{flush: mark}:
	case <-ctx.Done():
		w.mu.RUnlock()
		return ctx.Err()
	}
	w.mu.RUnlock()
	select {
	case <-mark:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close writes everything queued, then stops the writer. Later events are dropped. It waits
// for a database that is unavailable to come back.
func (w *Writer) Close() { w.CloseWithin(-1) }

// CloseWithin is Close for at most grace (none if negative): a database that is down or hangs
// would hold a scheduler's shutdown for as long as it is. What is not written by then is
// counted failed.
func (w *Writer) CloseWithin(grace time.Duration) {
	w.mu.Lock()
	if !w.closed {
		w.closed = true
		close(w.in)
	}
	w.mu.Unlock()
	if grace >= 0 {
		t := time.AfterFunc(grace, w.abandon)
		defer t.Stop()
	}
	<-w.done
	w.abandon()
}

func (w *Writer) run() {
	defer close(w.done)
	buf := make([]event, 0, w.batch)
	linger := time.NewTimer(0)
	<-linger.C
	for e := range w.in {
		buf = append(buf[:0], e)
		// Wait a little for more: one transaction of many rows costs the scheduler's CPUs far
		// less than many of a few. A flush marker or a full batch ends the wait.
		linger.Reset(w.linger)
	more:
		for len(buf) < w.batch && buf[len(buf)-1].flush == nil {
			select {
			case e, ok := <-w.in:
				if !ok {
					break more
				}
				buf = append(buf, e)
			case <-linger.C:
				break more
			}
		}
		if !linger.Stop() {
			select {
			case <-linger.C:
			default:
			}
		}
		w.write(buf)
	}
}

// Attempts at a batch while the database is unavailable: the first retries come soon (a
// failover, a restart), later ones at most retryMost apart, so that the writer notices the
// database's return within seconds without hammering it meanwhile.
const (
	retryFirst     = 200 * time.Millisecond
	retryMost      = 5 * time.Second
	attemptTimeout = 30 * time.Second // one transaction: a database that hangs is unavailable
	pingTimeout    = 5 * time.Second
)

// write writes a batch in one transaction. While the database is unavailable (unreachable,
// restarting, out of connections, locked: see unavailable) the batch is kept and tried again,
// and the events offered meanwhile wait in the queue: a restarting database costs no event,
// and only a queue that overflows drops (counted). A batch the database answers with an error
// about its rows is written one event at a time (writeEach). Once the writer is abandoned
// (CloseWithin's grace is over) what is left is counted failed. Markers are released once the
// events before them are done with.
func (w *Writer) write(buf []event) {
	evs := make([]event, 0, len(buf))
	for _, e := range buf {
		if e.flush == nil {
			evs = append(evs, e)
		}
	}
	backoff := retryFirst
	for len(evs) > 0 {
		if w.ctx.Err() != nil {
			w.failed.Add(int64(len(evs)))
			w.log.WithField("events", len(evs)).Error("event trace: events not written: the writer's grace at close is over")
			break
		}
		err := w.attempt(evs)
		if err == nil {
			w.written.Add(int64(len(evs)))
			break
		}
		if !w.unavailable(err) {
			if evs, err = w.writeEach(evs); len(evs) == 0 {
				break
			}
		}
		if w.ctx.Err() != nil {
			continue
		}
		w.wentDown(err, len(evs))
		w.pause(backoff)
		backoff = min(2*backoff, retryMost)
	}
	for _, e := range buf {
		if e.flush != nil {
			close(e.flush)
		}
	}
}

// attempt writes events in one transaction.
func (w *Writer) attempt(evs []event) error {
	ctx, cancel := context.WithTimeout(w.ctx, attemptTimeout)
	defer cancel()
	err := w.db.Ready(ctx)
	if err == nil {
		err = w.db.writeBatch(ctx, evs, &w.origins)
	}
	if err == nil && !w.downSince.IsZero() {
		w.log.WithField("unavailable_for", time.Since(w.downSince).Round(time.Millisecond)).Info("event trace: the database takes writes again")
		w.downSince = time.Time{}
	}
	return err
}

// wentDown logs that the database is unavailable: when it becomes so, and then once a minute.
func (w *Writer) wentDown(err error, held int) {
	now := time.Now()
	if w.downSince.IsZero() {
		w.downSince = now
	} else if now.Sub(w.downLogged) < time.Minute {
		return
	}
	w.downLogged = now
	w.log.WithError(err).WithFields(logrus.Fields{"held": held, "queued": len(w.in), "unavailable_for": now.Sub(w.downSince).Round(time.Second)}).
		Warn("event trace: the database is unavailable; the events wait and are retried (they are dropped only if the queue fills)")
}

// pause waits d, or until the writer is abandoned.
func (w *Writer) pause(d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-w.ctx.Done():
	}
}

// unavailable tells a database that cannot take writes now from one that refuses the rows:
// an error that says so (transient), or a database that does not answer a ping. Retrying later
// writes the rows then. Otherwise the database answered about the rows themselves, and
// retrying would not help: an unknown error, too, is taken so once a ping shows the database
// up, lest an event no database takes held the writer, and with it every event, for good.
func (w *Writer) unavailable(err error) bool {
	if transient(err) || NotReady(err) || w.ctx.Err() != nil {
		return true
	}
	ctx, cancel := context.WithTimeout(w.ctx, pingTimeout)
	defer cancel()
	return w.db.w.PingContext(ctx) != nil
}

// writeEach writes, one event at a time, a batch the database refused as a whole, so that an
// event it refuses (a value too long for its column, say) costs that event only. If the
// database becomes unavailable meanwhile, the events not yet written are returned to be
// retried as a batch.
func (w *Writer) writeEach(evs []event) (rest []event, err error) {
	var refused int
	var last error
	defer func() {
		if refused > 0 {
			w.failed.Add(int64(refused))
			w.log.WithError(last).WithField("events", refused).Error("event trace: the database refused events")
		}
	}()
	for i, e := range evs {
		if w.ctx.Err() != nil {
			return evs[i:], w.ctx.Err()
		}
		err := w.attempt([]event{e})
		switch {
		case err == nil || e.trace != nil && duplicate(err):
			// A status trace already there is this very event (its id is its own): an earlier
			// attempt wrote it, and the reply to its commit was lost with its connection.
			w.written.Add(1)
		case w.unavailable(err):
			return evs[i:], err
		default:
			refused++
			last = err
		}
	}
	return nil, nil
}

// transient says that err is the database being unavailable rather than refusing what it was
// sent: no connection or a broken one, no answer in time, a server shutting down, starting up,
// out of connections, memory or disk, read-only (a standby, a primary being demoted), a lock
// not granted in time, a deadlock or serialization failure. Whatever else a server answers is
// about the statement and its rows (data and constraint errors: a value too long, a NULL, a
// duplicate key).
func transient(err error) bool {
	var ne net.Error
	var ce *pgconn.ConnectError
	var pe *pgconn.PgError
	var me *mysqldrv.MySQLError
	var se *sqlite.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, driver.ErrBadConn), errors.Is(err, sql.ErrConnDone),
		errors.Is(err, mysqldrv.ErrInvalidConn), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.As(err, &ne), errors.As(err, &ce), pgconn.Timeout(err):
		return true
	case errors.As(err, &pe):
		switch pe.Code[:min(2, len(pe.Code))] {
		case "08", "40", "53", "57", "58": // connection, rollback (deadlock, serialization), resources, operator intervention, system
			return true
		}
		return pe.Code == "55P03" || pe.Code == "25006" // lock not available; read-only transaction
	case errors.As(err, &me):
		switch me.Number {
		case 1021, 1037, 1038, 1040, 1041, 1053, 1114, 1152, 1158, 1159, 1160, 1161, 1205, 1213, 1290, 1792, 1836, 1927, 4031:
			// disk full, out of memory (2), too many connections, out of resources, shutdown,
			// table full, aborted connection, network read and write errors (4), lock wait
			// timeout, deadlock, --read-only, read-only transaction, read-only mode, connection
			// killed (MariaDB), idle connection closed (MySQL 8)
			return true
		}
	case errors.As(err, &se):
		switch se.Code() & 0xff {
		case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED, sqlite3.SQLITE_READONLY, sqlite3.SQLITE_IOERR, sqlite3.SQLITE_FULL, sqlite3.SQLITE_CANTOPEN, sqlite3.SQLITE_PROTOCOL:
			return true
		}
	}
	return false
}

// duplicate says that err is a primary key or unique constraint violated.
func duplicate(err error) bool {
	var pe *pgconn.PgError
	var me *mysqldrv.MySQLError
	var se *sqlite.Error
	switch {
	case errors.As(err, &pe):
		return pe.Code == "23505"
	case errors.As(err, &me):
		return me.Number == 1062 // ER_DUP_ENTRY
	case errors.As(err, &se):
		return se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY || se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE
	}
	return false
}

// writeBatch writes buf in one transaction. A status trace of a relaunched task carries the
// task it replaces on every row, as Elastic-Job 2.1.5's JobEventRdbStorage wrote it: the
// scheduler names it at the TASK_STAGING only, and a later row takes it from that row, looked
// up here rather than by the scheduler, so that the status updates never wait for the database
// and the rows of a task launched by an earlier leader get it too.
func (t *DB) writeBatch(ctx context.Context, buf []event, origins *originCache) error {
	release, err := t.writeTurn(ctx)
	if err != nil {
		return err
	}
	defer release()
	tx, err := t.w.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	insTrace, err := tx.PrepareContext(ctx, t.q(`INSERT INTO `+StatusTraceLog+` (id, job_name, original_task_id, task_id, slave_id, source, execution_type, sharding_item, state, message, creation_time) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`))
	if err != nil {
		return fmt.Errorf("prepare: %w", err)
	}
	defer insTrace.Close()
	for _, e := range buf {
		switch {
		case e.trace != nil:
			s := e.trace
			original, err := t.originalTaskID(ctx, tx, s, origins)
			if err != nil {
				return err
			}
			if _, err := insTrace.ExecContext(ctx, s.ID, s.JobName, original, s.TaskID, s.SlaveID, s.Source, s.ExecutionType, s.ShardingItems, s.State, cut(s.Message), t.ts(s.CreationTime)); err != nil {
				return fmt.Errorf("insert a status trace: %w", err)
			}
		case e.exec != nil:
			if err := t.writeExecution(ctx, tx, e.exec); err != nil {
				return err
			}
		case e.ended != nil:
			if err := t.endExecutions(ctx, tx, e.ended); err != nil {
				return err
			}
		case e.orphans != nil:
			if err := t.closeOrphans(ctx, tx, e.orphans); err != nil {
				return err
			}
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// stagingState is the state whose row names the task a relaunch replaces.
const stagingState = "TASK_STAGING"

// originalTaskID is the original task id of a status trace's row: the trace's own at the
// TASK_STAGING, or one given; else its TASK_STAGING row's, found in the transaction (the
// STAGING may be earlier in the same batch), "" when there is none (not a relaunch, or a
// STAGING dropped or purged).
func (t *DB) originalTaskID(ctx context.Context, tx *sql.Tx, s *StatusTrace, origins *originCache) (string, error) {
	if s.State == stagingState {
		origins.put(s.TaskID, s.OriginalTaskID)
		return s.OriginalTaskID, nil
	}
	if s.OriginalTaskID != "" {
		return s.OriginalTaskID, nil
	}
	if o, ok := origins.get(s.TaskID); ok {
		return o, nil
	}
	var o sql.NullString
	err := tx.QueryRowContext(ctx, t.q(`SELECT original_task_id FROM `+StatusTraceLog+` WHERE task_id = ? AND state = ? LIMIT 1`), s.TaskID, stagingState).Scan(&o)
	if err != nil && !errors.Is(err, sql.ErrNoRows) {
		return "", fmt.Errorf("look up the original task of %s: %w", s.TaskID, err)
	}
	// Its TASK_STAGING was queued before any later update of the task: absent now, it is
	// absent for good, and "" is remembered too.
	origins.put(s.TaskID, o.String)
	return o.String, nil
}

// writeExecution records a start as a running row (is_success 0 as Elastic-Job writes it, in
// tables it may have made with is_success NOT NULL; no complete time) unless
// the row exists, and a completion as an update of its row, or a whole row when the start
// never arrived. Executors re-send unacknowledged updates: both are idempotent.
//
// The id is the executor's to choose, so every statement is bound to the event's task too (the
// scheduler has checked that it is the task of the update that carried it): an id of another
// task's run finds no row of this task, and the insert that follows is refused for its
// duplicate id, leaving that run as it was.
func (t *DB) writeExecution(ctx context.Context, tx *sql.Tx, ex *taskdata.Execution) error {
	if ex.CompleteTime == nil {
		var one int
		err := tx.QueryRowContext(ctx, t.q(`SELECT 1 FROM `+ExecutionLog+` WHERE id = ? AND task_id = ?`), ex.ID, ex.TaskID).Scan(&one)
		if err == nil {
			return nil
		}
		if err != sql.ErrNoRows {
			return fmt.Errorf("look up execution %s: %w", ex.ID, err)
		}
		_, err = tx.ExecContext(ctx, t.q(`INSERT INTO `+ExecutionLog+` (id, job_name, task_id, hostname, ip, sharding_item, execution_source, is_success, start_time) VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?)`),
			ex.ID, ex.JobName, ex.TaskID, ex.Hostname, ex.IP, ex.ShardingItem, ex.ExecutionSource, t.ts(ex.StartTime))
		if err != nil {
			return fmt.Errorf("insert execution %s: %w", ex.ID, err)
		}
		return nil
	}
	success := 0
	if ex.Success {
		success = 1
	}
	var cause any
	if ex.FailureCause != "" {
		cause = cut(ex.FailureCause)
	}
	res, err := tx.ExecContext(ctx, t.q(`UPDATE `+ExecutionLog+` SET is_success = ?, complete_time = ?, failure_cause = ? WHERE id = ? AND task_id = ?`),
		success, t.ts(*ex.CompleteTime), cause, ex.ID, ex.TaskID)
	if err != nil {
		return fmt.Errorf("complete execution %s: %w", ex.ID, err)
	}
	if n, err := res.RowsAffected(); err == nil && n > 0 {
		return nil
	}
	var one int
	if err := tx.QueryRowContext(ctx, t.q(`SELECT 1 FROM `+ExecutionLog+` WHERE id = ? AND task_id = ?`), ex.ID, ex.TaskID).Scan(&one); err == nil {
		return nil // MySQL counts only changed rows: a repeated completion changes none
	}
	_, err = tx.ExecContext(ctx, t.q(`INSERT INTO `+ExecutionLog+` (id, job_name, task_id, hostname, ip, sharding_item, execution_source, failure_cause, is_success, start_time, complete_time) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`),
		ex.ID, ex.JobName, ex.TaskID, ex.Hostname, ex.IP, ex.ShardingItem, ex.ExecutionSource, cause, success, t.ts(ex.StartTime), t.ts(*ex.CompleteTime))
	if err != nil {
		return fmt.Errorf("insert completed execution %s: %w", ex.ID, err)
	}
	return nil
}

// endExecutions completes the task's executions that have no complete time (through
// EXECUTION_TASK_INDEX). Completed ones are left as their executor reported them, so that a
// repeated end, or one after the executor's own completion, changes nothing.
func (t *DB) endExecutions(ctx context.Context, tx *sql.Tx, end *TaskEnd) error {
	success := 0
	var cause any
	if end.Success {
		success = 1
	} else if end.Cause != "" {
		cause = cut(end.Cause)
	}
	// A sweep's guess (Orphans) is replaced too: the sweep may have read the model of the
	// running tasks after the task's end and before its events were queued.
	_, err := tx.ExecContext(ctx, t.q(`UPDATE `+ExecutionLog+` SET is_success = ?, complete_time = ?, failure_cause = ? WHERE task_id = ? AND (complete_time IS NULL OR failure_cause = ?)`),
		success, t.ts(end.At), cause, end.TaskID, OrphanCause)
	if err != nil {
		return fmt.Errorf("end the open executions of task %s: %w", end.TaskID, err)
	}
	return nil
}

// closeOrphans closes, failed, the open executions started before o.Before whose task is not in
// o.Running, found through EXECUTION_OPEN_ROWS_INDEX (createSchema): as many rows as runs
// under way, not the retention's.
func (t *DB) closeOrphans(ctx context.Context, tx *sql.Tx, o *Orphans) error {
	rows, err := tx.QueryContext(ctx, t.q(`SELECT id, task_id FROM `+ExecutionLog+` WHERE complete_time IS NULL AND start_time < ?`), t.ts(o.Before))
	if err != nil {
		return fmt.Errorf("find the open executions: %w", err)
	}
	var orphans []string
	for rows.Next() {
		var id, task string
		if err := rows.Scan(&id, &task); err != nil {
			rows.Close()
			return fmt.Errorf("read the open executions: %w", err)
		}
		if !o.Running[task] {
			orphans = append(orphans, id)
		}
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return fmt.Errorf("read the open executions: %w", err)
	}
	end := t.q(`UPDATE ` + ExecutionLog + ` SET is_success = 0, complete_time = ?, failure_cause = ? WHERE id = ? AND complete_time IS NULL`)
	for _, id := range orphans {
		if _, err := tx.ExecContext(ctx, end, t.ts(o.At), OrphanCause, id); err != nil {
			return fmt.Errorf("close the orphaned execution %s: %w", id, err)
		}
	}
	return nil
}

// cut makes a message one that every database takes: valid UTF-8 without NUL bytes
// (PostgreSQL refuses both, MySQL invalid UTF-8; a script's error, or a message Mesos passed on
// unchecked, can hold them), bounded to the 4,000 bytes of Elastic-Job's columns without
// leaving half a UTF-8 sequence.
func cut(s string) string {
	if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
	}
	if len(s) <= taskdata.MaxFailureCause {
		return s
	}
	s = s[:taskdata.MaxFailureCause]
	for !utf8.ValidString(s) {
		s = s[:len(s)-1]
	}
	return s
}

// newID is a random UUID, as Elastic-Job's event ids are.
func newID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}
