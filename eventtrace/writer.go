package eventtrace

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/sirupsen/logrus"

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

// event is one write: a status trace, an execution's start or completion, or the end of a
// task whose executor could not report its executions' completions.
type event struct {
	trace *StatusTrace
	exec  *taskdata.Execution
	ended *TaskEnd
	flush chan struct{} // a marker: closed once every event before it is written
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

// Writer writes events in batches from one goroutine, so that the scheduler's offer cycle and
// status acknowledgements never wait for the database. Offer never blocks: when the queue is
// full the event is dropped, counted and logged. Close writes everything queued before it.
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

// Close writes everything queued, then stops the writer. Later events are dropped.
func (w *Writer) Close() { w.CloseWithin(-1) }

// CloseWithin is Close for at most grace (none if negative): a database that is down or hangs
// would hold a scheduler's shutdown for each queued batch's retries and timeouts, for half an
// hour with a full queue. What is not written by then is counted failed.
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

// write writes a batch in one transaction, retrying a few times: a restarting database should
// not cost the events. Markers are released once the events before them are written.
func (w *Writer) write(buf []event) {
	n := 0
	for _, e := range buf {
		if e.flush == nil {
			n++
		}
	}
	if n > 0 {
		err := fmt.Errorf("abandoned at the end of the writer's grace: %w", context.Canceled)
		for attempt := 0; attempt < 3 && w.ctx.Err() == nil; attempt++ {
			if attempt > 0 {
				time.Sleep(time.Duration(attempt) * 200 * time.Millisecond) // backoff between retries of a failed transaction
			}
			ctx, cancel := context.WithTimeout(w.ctx, 30*time.Second)
			err = w.db.writeBatch(ctx, buf)
			cancel()
			if err == nil {
				break
			}
		}
		if err != nil {
			w.writeEach(buf, err)
		} else {
			w.written.Add(int64(n))
		}
	}
	for _, e := range buf {
		if e.flush != nil {
			close(e.flush)
		}
	}
}

// writeEach writes a batch that failed as a whole one event at a time, so that one event the
// database refuses (a value too long for its column, say) costs that event only. A database
// that refuses several in a row is taken to be down, and the rest are not tried.
func (w *Writer) writeEach(buf []event, batchErr error) {
	const downAfter = 3
	var failed, refusedInARow int
	var last error
	for _, e := range buf {
		if e.flush != nil {
			continue
		}
		if refusedInARow < downAfter && w.ctx.Err() == nil {
			ctx, cancel := context.WithTimeout(w.ctx, 30*time.Second)
			last = w.db.writeBatch(ctx, []event{e})
			cancel()
			if last == nil {
				w.written.Add(1)
				refusedInARow = 0
				continue
			}
			refusedInARow++
		}
		failed++
	}
	if failed > 0 {
		if last == nil {
			last = batchErr
		}
		w.failed.Add(int64(failed))
		w.log.WithError(last).WithField("events", failed).Error("event trace: events could not be written")
	}
}

func (t *DB) writeBatch(ctx context.Context, buf []event) error {
	tx, err := t.db.BeginTx(ctx, nil)
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
			if _, err := insTrace.ExecContext(ctx, s.ID, s.JobName, s.OriginalTaskID, s.TaskID, s.SlaveID, s.Source, s.ExecutionType, s.ShardingItems, s.State, cut(s.Message), t.ts(s.CreationTime)); err != nil {
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
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// writeExecution records a start as a running row (is_success 0 as Elastic-Job writes it, in
// tables it may have made with is_success NOT NULL; no complete time) unless
// the row exists, and a completion as an update of its row, or a whole row when the start
// never arrived. Executors re-send unacknowledged updates: both are idempotent.
func (t *DB) writeExecution(ctx context.Context, tx *sql.Tx, ex *taskdata.Execution) error {
	if ex.CompleteTime == nil {
		var one int
		err := tx.QueryRowContext(ctx, t.q(`SELECT 1 FROM `+ExecutionLog+` WHERE id = ?`), ex.ID).Scan(&one)
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
	res, err := tx.ExecContext(ctx, t.q(`UPDATE `+ExecutionLog+` SET is_success = ?, complete_time = ?, failure_cause = ? WHERE id = ?`), success, t.ts(*ex.CompleteTime), cause, ex.ID)
	if err != nil {
		return fmt.Errorf("complete execution %s: %w", ex.ID, err)
	}
	if n, err := res.RowsAffected(); err == nil && n > 0 {
		return nil
	}
	var one int
	if err := tx.QueryRowContext(ctx, t.q(`SELECT 1 FROM `+ExecutionLog+` WHERE id = ?`), ex.ID).Scan(&one); err == nil {
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
	_, err := tx.ExecContext(ctx, t.q(`UPDATE `+ExecutionLog+` SET is_success = ?, complete_time = ?, failure_cause = ? WHERE task_id = ? AND complete_time IS NULL`),
		success, t.ts(end.At), cause, end.TaskID)
	if err != nil {
		return fmt.Errorf("end the open executions of task %s: %w", end.TaskID, err)
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
