package eventtrace

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
)

// Interval is a statistics period: MINUTE, HOUR or DAY.
type Interval string

const (
	Minute Interval = "MINUTE"
	Hour   Interval = "HOUR"
	Day    Interval = "DAY"
)

var intervals = []Interval{Minute, Hour, Day}

func (iv Interval) table() string { return taskResultPrefix + string(iv) }

// Truncate is the start of the period holding t (days in UTC).
func (iv Interval) Truncate(t time.Time) time.Time {
	t = t.UTC()
	switch iv {
	case Minute:
		return t.Truncate(time.Minute)
	case Hour:
		return t.Truncate(time.Hour)
	}
	return time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
}

// Duration is the length of the period.
func (iv Interval) Duration() time.Duration {
	switch iv {
	case Minute:
		return time.Minute
	case Hour:
		return time.Hour
	}
	return 24 * time.Hour
}

// maxFill bounds the zero rows written for a gap (a scheduler down for a month must not write
// 43,200 minute rows at once): the longest span any statistics query reads.
const maxFill = 24 * 60

// TaskResult is a row of TASK_RESULT_STATISTICS_<interval>, with 2.1.5's JSON fields.
type TaskResult struct {
	ID                int64    `json:"id"`
	SuccessCount      int      `json:"successCount"`
	FailedCount       int      `json:"failedCount"`
	StatisticInterval Interval `json:"statisticInterval"`
	StatisticsTime    int64    `json:"statisticsTime"`
	CreationTime      int64    `json:"creationTime"`
}

// Running is a row of TASK_RUNNING_STATISTICS or JOB_RUNNING_STATISTICS.
type Running struct {
	ID             int64 `json:"id"`
	RunningCount   int   `json:"runningCount"`
	StatisticsTime int64 `json:"statisticsTime"`
	CreationTime   int64 `json:"creationTime"`
}

// Registered is a row of JOB_REGISTER_STATISTICS.
type Registered struct {
	ID              int64 `json:"id"`
	RegisteredCount int   `json:"registeredCount"`
	StatisticsTime  int64 `json:"statisticsTime"`
	CreationTime    int64 `json:"creationTime"`
}

// Results counts task results for each interval until its row is written. The leader adds to
// it as it records status updates. The counts are a leadership term's: the term writes what is
// left when it ends (Statistics.Flush), and the next starts from none (Reset).
type Results struct {
	mu     sync.Mutex // guards counts
	counts map[Interval][2]int
}

// NewResults returns empty counters.
func NewResults() *Results { return &Results{counts: map[Interval][2]int{}} }

// Add counts one task result.
func (r *Results) Add(success bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, iv := range intervals {
		c := r.counts[iv]
		if success {
			c[0]++
		} else {
			c[1]++
		}
		r.counts[iv] = c
	}
}

// take returns and resets an interval's counts.
func (r *Results) take(iv Interval) (success, failed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.counts[iv]
	delete(r.counts, iv)
	return c[0], c[1]
}

// Pending returns an interval's counts not yet written.
func (r *Results) Pending(iv Interval) (success, failed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.counts[iv]
	return c[0], c[1]
}

// Reset empties the counters at the start of a leadership term, and returns the day's counts
// it discarded (they hold the hour's and minute's): what an earlier term could not write. They
// are of periods gone, maybe days ago; the new term's first rows must not take them.
func (r *Results) Reset() (success, failed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.counts[Day]
	clear(r.counts)
	return c[0], c[1]
}

// giveBack returns counts whose row could not be written, so the next row holds them.
func (r *Results) giveBack(iv Interval, success, failed int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := r.counts[iv]
	r.counts[iv] = [2]int{c[0] + success, c[1] + failed}
}

// Source is what the statistics jobs count in the scheduler's state.
type Source interface {
	// RunningCounts returns the tasks in the running queue and the jobs with at least one.
	RunningCounts(ctx context.Context) (tasks, jobs int, err error)
	// RegisteredJobs returns how many job configs are registered.
	RegisteredJobs(ctx context.Context) (int, error)
}

// Statistics runs Elastic-Job-Cloud's statistics jobs on the leader: every minute the task
// results of the minute and the running tasks and jobs, every hour and day the task results of
// the hour and day, every day the registered jobs. A period with no row (the scheduler was
// down) gets zero rows, so that charts show the gap as zeros.
type Statistics struct {
	DB      *DB
	Results *Results
	Source  Source
	Log     logrus.FieldLogger
	Now     func() time.Time // default time.Now
	// ticked is the minute boundary Run last wrote at (or started at): the results counted
	// since are of the periods that began then, whatever the clock says when Flush runs.
	ticked time.Time
}

// Run writes the statistics at each minute boundary until ctx ends.
func (s *Statistics) Run(ctx context.Context) {
	now := s.now()
	last := Minute.Truncate(now)
	s.ticked = last
	for {
		timer := time.NewTimer(last.Add(time.Minute).Sub(s.now()))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		at := Minute.Truncate(s.now())
		if !at.After(last) {
			continue // the timer fired early against a changed clock
		}
		s.Tick(ctx, last, at)
		last = at
		s.ticked = at
	}
}

// Flush writes the task results counted and not yet in a row, as a leadership term ends (after
// Run has returned): each interval's into the row of the period in progress, stamped at the
// period's end as Tick stamps it, to which the next term's Tick of that period adds its own
// counts (AddTaskResult). Without it a leader change or a shutdown lost up to a day of them.
// What cannot be written is left in Results, and logged.
func (s *Statistics) Flush(ctx context.Context) {
	from := s.ticked
	if from.IsZero() {
		from = s.now()
	}
	for _, iv := range intervals {
		succ, fail := s.Results.take(iv)
		if succ == 0 && fail == 0 {
			continue
		}
		if err := s.DB.AddTaskResult(ctx, iv, iv.Truncate(from).Add(iv.Duration()), succ, fail); err != nil {
			s.Results.giveBack(iv, succ, fail)
			s.Log.WithError(err).WithFields(logrus.Fields{"interval": iv, "success": succ, "failed": fail}).Warn("task result statistics of the leadership term not written")
		}
	}
}

// Tick writes the rows due when the clock passes from prev to at (both minute boundaries).
func (s *Statistics) Tick(ctx context.Context, prev, at time.Time) {
	for _, iv := range intervals {
		if iv != Minute && iv.Truncate(at).Equal(iv.Truncate(prev)) {
			continue
		}
		succ, fail := s.Results.take(iv)
		if err := s.DB.AddTaskResult(ctx, iv, iv.Truncate(at), succ, fail); err != nil {
			s.Results.giveBack(iv, succ, fail)
			s.Log.WithError(err).WithField("interval", iv).Warn("task result statistics not written")
		}
	}
	if tasks, jobs, err := s.Source.RunningCounts(ctx); err != nil {
		s.Log.WithError(err).Warn("running statistics skipped: cannot read the running queue")
	} else {
		if err := s.DB.addCount(ctx, TaskRunningStats, "running_count", Minute, at, tasks); err != nil {
			s.Log.WithError(err).Warn("task running statistics not written")
		}
		if err := s.DB.addCount(ctx, JobRunningStats, "running_count", Minute, at, jobs); err != nil {
			s.Log.WithError(err).Warn("job running statistics not written")
		}
	}
	if !Day.Truncate(at).Equal(Day.Truncate(prev)) || s.noRegisterRow(ctx) {
		if n, err := s.Source.RegisteredJobs(ctx); err != nil {
			s.Log.WithError(err).Warn("registered job statistics skipped: cannot read the job configs")
		} else if err := s.DB.addCount(ctx, JobRegisterStats, "registered_count", Day, Day.Truncate(at), n); err != nil {
			s.Log.WithError(err).Warn("registered job statistics not written")
		}
	}
}

// noRegisterRow reports that today has no JOB_REGISTER_STATISTICS row yet: a leader that
// starts mid-day writes one rather than leaving the day empty.
func (s *Statistics) noRegisterRow(ctx context.Context) bool {
	latest, ok, err := s.DB.latestTime(ctx, JobRegisterStats)
	return err == nil && (!ok || latest.Before(Day.Truncate(s.now())))
}

func (s *Statistics) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// AddTaskResult adds task results to the row at statistics time at, after zero rows for the
// periods since the latest row. A row at at already there (the period's results that an
// earlier leadership term wrote as it ended, see Statistics.Flush) takes the counts: one row a
// period, holding them all.
func (t *DB) AddTaskResult(ctx context.Context, iv Interval, at time.Time, success, failed int) error {
	return t.inTx(ctx, func(tx *sql.Tx) error {
		gaps, err := t.gaps(ctx, tx, iv.table(), iv, at)
		if err != nil {
			return err
		}
		ins := t.q(`INSERT INTO ` + iv.table() + ` (success_count, failed_count, statistics_time, creation_time) VALUES (?, ?, ?, ?)`)
		now := time.Now()
		for _, g := range gaps {
			if _, err := tx.ExecContext(ctx, ins, 0, 0, t.ts(g), t.ts(now)); err != nil {
				return fmt.Errorf("fill %s: %w", iv.table(), err)
			}
		}
		var id int64
		err = tx.QueryRowContext(ctx, t.q(`SELECT id FROM `+iv.table()+` WHERE statistics_time = ? ORDER BY id LIMIT 1`), t.ts(at)).Scan(&id)
		switch {
		case err == sql.ErrNoRows:
			if _, err := tx.ExecContext(ctx, ins, success, failed, t.ts(at), t.ts(now)); err != nil {
				return fmt.Errorf("insert into %s: %w", iv.table(), err)
			}
		case err != nil:
			return fmt.Errorf("find the row of %s at %v: %w", iv.table(), at, err)
		default:
			if _, err := tx.ExecContext(ctx, t.q(`UPDATE `+iv.table()+` SET success_count = COALESCE(success_count, 0) + ?, failed_count = COALESCE(failed_count, 0) + ? WHERE id = ?`), success, failed, id); err != nil {
				return fmt.Errorf("add to %s: %w", iv.table(), err)
			}
		}
		return nil
	})
}

// addCount writes a running or registered count row at at, after rows for the gap that carry
// the latest count on, as Elastic-Job-Cloud does: the jobs stayed registered, and the tasks
// ran on, while no leader counted them (task results, by contrast, are zeros: none was seen).
func (t *DB) addCount(ctx context.Context, table, col string, iv Interval, at time.Time, n int) error {
	return t.inTx(ctx, func(tx *sql.Tx) error {
		gaps, err := t.gaps(ctx, tx, table, iv, at)
		if err != nil {
			return err
		}
		var last int
		if len(gaps) > 0 {
			q := `SELECT ` + col + ` FROM ` + table + ` WHERE statistics_time = (SELECT MAX(statistics_time) FROM ` + table + `)`
			if err := tx.QueryRowContext(ctx, q).Scan(&last); err != nil {
				return fmt.Errorf("latest count of %s: %w", table, err)
			}
		}
		ins := t.q(`INSERT INTO ` + table + ` (` + col + `, statistics_time, creation_time) VALUES (?, ?, ?)`)
		now := time.Now()
		for _, g := range gaps {
			if _, err := tx.ExecContext(ctx, ins, last, t.ts(g), t.ts(now)); err != nil {
				return fmt.Errorf("fill %s: %w", table, err)
			}
		}
		if _, err := tx.ExecContext(ctx, ins, n, t.ts(at), t.ts(now)); err != nil {
			return fmt.Errorf("insert into %s: %w", table, err)
		}
		return nil
	})
}

// gaps are the period starts after the table's latest row and before at (at most maxFill).
func (t *DB) gaps(ctx context.Context, q querier, table string, iv Interval, at time.Time) ([]time.Time, error) {
	var latest nullTime
	if err := q.QueryRowContext(ctx, "SELECT MAX(statistics_time) FROM "+table).Scan(&latest); err != nil {
		return nil, fmt.Errorf("latest row of %s: %w", table, err)
	}
	if !latest.Valid {
		return nil, nil
	}
	var out []time.Time
	from := iv.Truncate(latest.Time).Add(iv.Duration())
	if earliest := at.Add(-maxFill * iv.Duration()); from.Before(earliest) {
		from = earliest
	}
	for g := from; g.Before(at); g = g.Add(iv.Duration()) {
		out = append(out, g)
	}
	return out, nil
}

func (t *DB) latestTime(ctx context.Context, table string) (time.Time, bool, error) {
	if err := t.Ready(ctx); err != nil {
		return time.Time{}, false, err
	}
	var latest nullTime
	if err := t.db.QueryRowContext(ctx, "SELECT MAX(statistics_time) FROM "+table).Scan(&latest); err != nil {
		return time.Time{}, false, fmt.Errorf("latest row of %s: %w", table, err)
	}
	return latest.Time, latest.Valid, nil
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (t *DB) inTx(ctx context.Context, f func(*sql.Tx) error) error {
	if err := t.Ready(ctx); err != nil {
		return err
	}
	// The statistics' writes look for a period's row, then add to it or insert it: two at once
	// (a deposed leader's last Flush beside its successor's first Tick, from two processes) each
	// found none and inserted one, and a period had two rows, of which the reads show one. They
	// take turns, on a lock of the database's: SQLite's transactions take turns already
	// (_txlock=immediate, and within the process writeTurn, which every write takes);
	// MySQL's named lock is its connection's, hence the one pinned here.
	release, err := t.writeTurn(ctx)
	if err != nil {
		return err
	}
	defer release()
	begin := t.db.BeginTx
	if t.d.name == "mysql" {
		conn, err := t.db.Conn(ctx)
		if err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		defer conn.Close()
		var got sql.NullInt64
		if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(CONCAT(DATABASE(), '.ejcloud_statistics'), 30)`).Scan(&got); err != nil || got.Int64 != 1 {
			return fmt.Errorf("take the statistics lock (%v): %w", got, errors.Join(err, errStatisticsLock))
		}
		defer conn.ExecContext(context.WithoutCancel(ctx), `SELECT RELEASE_LOCK(CONCAT(DATABASE(), '.ejcloud_statistics'))`)
		begin = conn.BeginTx
	}
	tx, err := begin(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	if t.d.name == "postgres" {
		if _, err := tx.ExecContext(ctx, `SELECT pg_advisory_xact_lock(hashtext(current_database() || '.ejcloud_statistics'))`); err != nil {
			return fmt.Errorf("take the statistics lock: %w", err)
		}
	}
	if err := f(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// errStatisticsLock is a statistics write that did not get its turn within 30 s.
var errStatisticsLock = errors.New("the statistics lock was not granted")

// TaskResults returns the rows of an interval's table from since on, oldest first.
func (t *DB) TaskResults(ctx context.Context, iv Interval, since time.Time) ([]TaskResult, error) {
	ctx, cancel := reading(ctx)
	defer cancel()
	if err := t.Ready(ctx); err != nil {
		return nil, err
	}
	rows, err := t.db.QueryContext(ctx, t.q("SELECT id, success_count, failed_count, statistics_time, creation_time FROM "+iv.table()+" WHERE statistics_time >= ? ORDER BY statistics_time, id"), t.ts(since))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", iv.table(), err)
	}
	defer rows.Close()
	out := []TaskResult{}
	for rows.Next() {
		r := TaskResult{StatisticInterval: iv}
		var st, ct nullTime
		if err := rows.Scan(&r.ID, &r.SuccessCount, &r.FailedCount, &st, &ct); err != nil {
			return nil, fmt.Errorf("read %s: %w", iv.table(), err)
		}
		r.StatisticsTime, r.CreationTime = st.Time.UnixMilli(), ct.Time.UnixMilli()
		out = append(out, r)
	}
	return out, rows.Err()
}

// LatestTaskResult returns the newest row of an interval's table up to now, or a zero row at
// now. A row of the period in progress (Statistics.Flush wrote it) is not the last period's.
func (t *DB) LatestTaskResult(ctx context.Context, iv Interval, now time.Time) (TaskResult, error) {
	ctx, cancel := reading(ctx)
	defer cancel()
	r := TaskResult{StatisticInterval: iv, StatisticsTime: now.UnixMilli(), CreationTime: now.UnixMilli()}
	if err := t.Ready(ctx); err != nil {
		return r, err
	}
	var st, ct nullTime
	err := t.db.QueryRowContext(ctx, t.q("SELECT id, success_count, failed_count, statistics_time, creation_time FROM "+iv.table()+" WHERE statistics_time <= ? ORDER BY statistics_time DESC, id DESC LIMIT 1"), t.ts(now)).
		Scan(&r.ID, &r.SuccessCount, &r.FailedCount, &st, &ct)
	if err == sql.ErrNoRows {
		return r, nil
	}
	if err != nil {
		return r, fmt.Errorf("read %s: %w", iv.table(), err)
	}
	r.StatisticsTime, r.CreationTime = st.Time.UnixMilli(), ct.Time.UnixMilli()
	return r, nil
}

// SumTaskResults sums an interval's rows from since on.
func (t *DB) SumTaskResults(ctx context.Context, iv Interval, since time.Time) (success, failed int, err error) {
	ctx, cancel := reading(ctx)
	defer cancel()
	if err := t.Ready(ctx); err != nil {
		return 0, 0, err
	}
	var s, f sql.NullInt64
	if err := t.db.QueryRowContext(ctx, t.q("SELECT SUM(success_count), SUM(failed_count) FROM "+iv.table()+" WHERE statistics_time >= ?"), t.ts(since)).Scan(&s, &f); err != nil {
		return 0, 0, fmt.Errorf("sum %s: %w", iv.table(), err)
	}
	return int(s.Int64), int(f.Int64), nil
}

// TaskRunning returns TASK_RUNNING_STATISTICS from since on; JobRunning and JobRegister the
// same of their tables.
func (t *DB) TaskRunning(ctx context.Context, since time.Time) ([]Running, error) {
	return t.running(ctx, TaskRunningStats, since)
}

// JobRunning returns JOB_RUNNING_STATISTICS from since on.
func (t *DB) JobRunning(ctx context.Context, since time.Time) ([]Running, error) {
	return t.running(ctx, JobRunningStats, since)
}

func (t *DB) running(ctx context.Context, table string, since time.Time) ([]Running, error) {
	out := []Running{}
	err := t.counts(ctx, table, "running_count", since, func(id int64, n int, st, ct int64) {
		out = append(out, Running{ID: id, RunningCount: n, StatisticsTime: st, CreationTime: ct})
	})
	return out, err
}

// JobRegister returns JOB_REGISTER_STATISTICS from since on.
func (t *DB) JobRegister(ctx context.Context, since time.Time) ([]Registered, error) {
	out := []Registered{}
	err := t.counts(ctx, JobRegisterStats, "registered_count", since, func(id int64, n int, st, ct int64) {
		out = append(out, Registered{ID: id, RegisteredCount: n, StatisticsTime: st, CreationTime: ct})
	})
	return out, err
}

func (t *DB) counts(ctx context.Context, table, col string, since time.Time, add func(id int64, n int, st, ct int64)) error {
	ctx, cancel := reading(ctx)
	defer cancel()
	if err := t.Ready(ctx); err != nil {
		return err
	}
	rows, err := t.db.QueryContext(ctx, t.q("SELECT id, "+col+", statistics_time, creation_time FROM "+table+" WHERE statistics_time >= ? ORDER BY statistics_time, id"), t.ts(since))
	if err != nil {
		return fmt.Errorf("read %s: %w", table, err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var n sql.NullInt64
		var st, ct nullTime
		if err := rows.Scan(&id, &n, &st, &ct); err != nil {
			return fmt.Errorf("read %s: %w", table, err)
		}
		add(id, int(n.Int64), st.Time.UnixMilli(), ct.Time.UnixMilli())
	}
	return rows.Err()
}
