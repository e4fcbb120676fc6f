package eventtrace

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/eventtrace/eventtracetest"
	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// proxied puts a proxy the test can cut between the DSN's server and its clients.
func proxied(t *testing.T, dsn string) (string, *statetest.Proxy) {
	t.Helper()
	if strings.HasPrefix(dsn, "mysql://") {
		start, end := strings.Index(dsn, "@tcp(")+len("@tcp("), strings.IndexByte(dsn, ')')
		p := statetest.NewProxy(t, dsn[start:end])
		return dsn[:start] + p.Addr + dsn[end:], p
	}
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	p := statetest.NewProxy(t, u.Host)
	u.Host = p.Addr
	return u.String(), p
}

func running(i int) StatusTrace {
	return StatusTrace{JobName: "job-a", TaskID: tid, SlaveID: "agent-S0", Source: "CLOUD_SCHEDULER", ExecutionType: "READY",
		ShardingItems: "[0]", State: "TASK_RUNNING", Message: fmt.Sprint(i), CreationTime: t0}
}

// A database that is unreachable for seconds, far longer than a few quick retries, costs no
// event while the queue has room: the writer keeps its batch and retries it until the database
// is back, and the events offered meanwhile wait in the queue. Closing during an outage still
// ends within its grace, the events left counted failed.
func TestAnOutageCostsNoEventWhileTheQueueHasRoom(t *testing.T) {
	for _, b := range backends[1:] {
		t.Run(b.name, func(t *testing.T) {
			dsn, p := proxied(t, b.dsn(t))
			db, err := Open(context.Background(), dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			w := NewWriter(db, WriterConfig{Batch: 10, Linger: 10 * time.Millisecond}, quiet())
			for i := range 10 {
				w.Trace(running(i))
			}
			flush(t, w)

			p.Cut()
			for i := 10; i < 40; i++ {
				w.Trace(running(i))
			}
			// The outage lasts 3 s: the old writer gave each batch up after about 1 s.
			outage := time.NewTimer(3 * time.Second)
			check := time.NewTicker(50 * time.Millisecond)
		down:
			for {
				select {
				case <-outage.C:
					break down
				case <-check.C:
					if s := w.Stats(); s.Failed > 0 || s.Written > 10 {
						t.Fatalf("during the outage: writer stats %+v; want the 30 events held, none failed", s)
					}
				}
			}
			check.Stop()
			p.Restore()
			flush(t, w)
			if s := w.Stats(); s.Written != 40 {
				t.Fatalf("after the outage: writer stats %+v; want all 40 written", s)
			}
			pg, err := db.StatusTraces(context.Background(), Query{PerPage: 1})
			if err != nil || pg.Total != 40 {
				t.Fatalf("%d rows (%v); want 40", pg.Total, err)
			}

			p.Cut()
			for i := 40; i < 45; i++ {
				w.Trace(running(i))
			}
			closed := make(chan struct{})
			go func() {
				defer close(closed)
				w.CloseWithin(200 * time.Millisecond)
			}()
			select {
			case <-closed:
			case <-time.After(20 * time.Second):
				t.Fatal("CloseWithin(200ms) still retries the unreachable database after 20 s")
			}
			if s := w.Stats(); s.Written != 40 || s.Failed != 5 || s.Dropped != 0 {
				t.Fatalf("after closing during an outage: writer stats %+v; want 40 written and the 5 held failed", s)
			}
		})
	}
}

// A database down when the writer starts (a scheduler started during its outage): the events
// wait, neither written nor failed, reads say it is not ready, and once it answers its tables
// are made and the events written.
func TestADatabaseDownAtTheStartGetsItsTablesAndEventsOnceItAnswers(t *testing.T) {
	for _, b := range backends[1:] {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			dsn, p := proxied(t, b.dsn(t))
			p.Cut()
			db, err := Connect(dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			w := NewWriter(db, WriterConfig{Batch: 10, Linger: 10 * time.Millisecond}, quiet())
			defer w.Close()
			for i := range 5 {
				w.Trace(running(i))
			}
			held, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			if err := w.Flush(held); err == nil {
				t.Fatal("events written while the database was unreachable")
			}
			if s := w.Stats(); s.Written != 0 || s.Failed != 0 {
				t.Fatalf("writer stats %+v while the database is down; want the 5 events held", s)
			}
			if _, err := db.StatusTraces(ctx, Query{}); !NotReady(err) {
				t.Fatalf("a search while the database is down: %v; want it not ready", err)
			}
			p.Restore()
			flush(t, w)
			if pg, err := db.StatusTraces(ctx, Query{PerPage: 1}); err != nil || pg.Total != 5 {
				t.Fatalf("%d rows (%v); want the 5 events", pg.Total, err)
			}
		})
	}
}

// Making the tables goes on by itself past the deadline of the caller that started it: an index
// on a large table that 2.1.5 made can take longer than any caller waits, and a making cut short
// by each caller in turn would never end. Here the making is held up by a lock on the table
// (the index it must add waits for it), beyond the caller's deadline; once the lock is gone the
// index is there without another call.
func TestTheTablesAreMadePastTheDeadlineOfTheCallerThatAskedFirst(t *testing.T) {
	ctx := context.Background()
	dsn := eventtracetest.Postgres(t)
	d, err := parseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	first, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	first.Close()
	other, err := sql.Open(d.driver, d.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.ExecContext(ctx, `DROP INDEX EXECUTION_JOB_INDEX`); err != nil {
		t.Fatal(err)
	}
	lock, err := other.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Rollback()
	if _, err := lock.ExecContext(ctx, `LOCK TABLE `+ExecutionLog+` IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}

	db, err := Connect(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if err := db.Ready(short); !NotReady(err) {
		t.Fatalf("Ready while the table is locked: %v; want not ready", err)
	}
	if err := lock.Commit(); err != nil {
		t.Fatal(err)
	}
	await.True(t, 20*time.Second, "the index made with no further call", func() bool {
		var n int
		err := other.QueryRowContext(ctx, `SELECT COUNT(*) FROM pg_indexes WHERE indexname = 'execution_job_index'`).Scan(&n)
		return err == nil && n == 1
	})
	if err := db.Ready(ctx); err != nil {
		t.Fatalf("Ready once the tables are made: %v", err)
	}
}

// The writer has a connection of its own: API reads that hold every connection of theirs do
// not hold up the writes.
func TestReadsHoldingEveryConnectionDoNotStopTheWriter(t *testing.T) {
	db, err := Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	w := NewWriter(db, WriterConfig{}, quiet())
	defer w.Close()
	for range defaultMaxOpenConn { // slow searches, each holding a connection (released before w.Close)
		c, err := db.db.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	w.Trace(running(0))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Flush(ctx); err != nil {
		t.Fatalf("the writer waits for a connection the reads hold: %v (stats %+v)", err, w.Stats())
	}
}

// A read that cannot get a connection, or whose query does not end, gives up at readTimeout
// rather than waiting for as long as its client does.
func TestReadsGiveUpAtTheirBound(t *testing.T) {
	db, err := Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "t.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	defer func(d time.Duration) { readTimeout = d }(readTimeout)
	readTimeout = 200 * time.Millisecond
	for range defaultMaxOpenConn {
		c, err := db.db.Conn(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	done := make(chan error, 1)
	go func() {
		_, err := db.Executions(context.Background(), Query{})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("a read without a connection: %v; want its deadline exceeded", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a read without a connection still waits after 10 s")
	}
}

// A sharding item is an INT column: a filter beyond int32 is refused naming the parameter on
// every database (PostgreSQL refused to bind it, a 503), and the largest int32 is searched.
func TestShardingItemBeyondInt32IsRefused(t *testing.T) {
	eachDB(t, func(t *testing.T, db *DB) {
		for _, v := range []string{"2147483648", "9223372036854775807", "99999999999999999999", "-1"} {
			_, err := db.Executions(context.Background(), Query{Filters: map[string]string{"shardingItem": v}})
			var fe *config.FieldError
			if !errors.As(err, &fe) || fe.Field != "shardingItem" {
				t.Errorf("shardingItem=%s: %v; want a field error naming shardingItem", v, err)
			}
		}
		if p, err := db.Executions(context.Background(), Query{Filters: map[string]string{"shardingItem": "2147483647"}}); err != nil || p.Total != 0 {
			t.Errorf("shardingItem=2147483647: %+v (%v); want no row and no error", p, err)
		}
	})
}

// A MySQL session reads and writes times in UTC whatever the server's zone: the TIMESTAMP
// columns of tables that Elastic-Job-Cloud 2.1.5 made convert from the session's zone, and the
// driver sends UTC. A DSN that names a time_zone keeps it.
func TestMySQLSessionsAreInUTC(t *testing.T) {
	ctx := context.Background()
	dsn := eventtracetest.MariaDB(t)
	root, err := sql.Open("mysql", strings.TrimPrefix(dsn, "mysql://"))
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	var global string
	if err := root.QueryRowContext(ctx, "SELECT @@global.time_zone").Scan(&global); err != nil {
		t.Fatal(err)
	}
	if _, err := root.ExecContext(ctx, "SET GLOBAL time_zone = '+05:00'"); err != nil { // sessions start in it
		t.Fatal(err)
	}
	defer func() {
		if _, err := root.ExecContext(ctx, "SET GLOBAL time_zone = '"+global+"'"); err != nil {
			t.Errorf("restore the server's time zone %s: %v", global, err)
		}
	}()
	db, err := Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for _, q := range []string{`DROP TABLE JOB_EXECUTION_LOG`, `CREATE TABLE JOB_EXECUTION_LOG (id VARCHAR(40) NOT NULL, job_name VARCHAR(100) NOT NULL,
		task_id VARCHAR(255) NOT NULL, hostname VARCHAR(255) NOT NULL, ip VARCHAR(50) NOT NULL, sharding_item INT NOT NULL,
		execution_source VARCHAR(20) NOT NULL, failure_cause VARCHAR(4000) NULL, is_success INT NOT NULL,
		start_time TIMESTAMP NULL, complete_time TIMESTAMP NULL, PRIMARY KEY (id))`} { // 2.1.5's table
		if _, err := db.db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	w := NewWriter(db, WriterConfig{}, quiet())
	defer w.Close()
	w.Execution(exec("e1", "job-a", 0, t0))
	flush(t, w)
	var unix int64
	if err := root.QueryRowContext(ctx, "SELECT UNIX_TIMESTAMP(start_time) FROM "+strings.TrimPrefix(dsn[strings.LastIndexByte(dsn, '/'):], "/")+".JOB_EXECUTION_LOG").Scan(&unix); err != nil {
		t.Fatal(err)
	}
	if unix != t0.Unix() {
		t.Fatalf("start_time holds %v; want %v (off by %v)", time.Unix(unix, 0).UTC(), t0, t0.Sub(time.Unix(unix, 0)))
	}
	var zone string
	if err := db.db.QueryRowContext(ctx, "SELECT @@session.time_zone").Scan(&zone); err != nil || zone != "+00:00" {
		t.Fatalf("session time zone %q (%v); want +00:00", zone, err)
	}
	own, err := Open(ctx, dsn+"?time_zone=%27%2B01%3A00%27")
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	if err := own.db.QueryRowContext(ctx, "SELECT @@session.time_zone").Scan(&zone); err != nil || zone != "+01:00" {
		t.Fatalf("session time zone %q (%v) with time_zone in the DSN; want the DSN's +01:00", zone, err)
	}
}

// Two schedulers writing the same periods at once (a deposed leader's last Flush beside its
// successor's first Tick) make one row a period, holding both counts: each looked for the
// period's row and, finding none, inserted its own.
func TestConcurrentWritesOfAPeriodMakeOneRow(t *testing.T) {
	for _, b := range backends[1:] {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			dsn := b.dsn(t)
			var dbs [2]*DB
			for i := range dbs {
				db, err := Open(ctx, dsn)
				if err != nil {
					t.Fatal(err)
				}
				defer db.Close()
				dbs[i] = db
			}
			const periods = 40
			errs := make(chan error, 2*periods)
			for p := range periods {
				at := t0.Add(time.Duration(p) * time.Minute)
				start := make(chan struct{})
				for _, db := range dbs {
					go func() { <-start; errs <- db.AddTaskResult(ctx, Minute, at, 1, 0) }()
				}
				close(start)
			}
			for range 2 * periods {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
			rows, err := dbs[0].TaskResults(ctx, Minute, t0)
			if err != nil {
				t.Fatal(err)
			}
			seen := map[int64]int{}
			for _, r := range rows {
				seen[r.StatisticsTime]++
				if r.SuccessCount != 2 {
					t.Errorf("the row of %v holds %d successes; want both writes' 2", time.UnixMilli(r.StatisticsTime).UTC(), r.SuccessCount)
				}
			}
			for at, n := range seen {
				if n != 1 {
					t.Errorf("%d rows for %v; want one", n, time.UnixMilli(at).UTC())
				}
			}
			if len(seen) != periods {
				t.Errorf("%d periods have rows; want %d", len(seen), periods)
			}
		})
	}
}

// A term that ends writes its results into the rows of the periods in progress; the next
// term's rows of those periods add to them, one row a period. The row of a period in progress
// is not yet the last period's.
func TestFlushedResultsJoinTheNextTermsRows(t *testing.T) {
	eachDB(t, func(t *testing.T, db *DB) {
		ctx := context.Background()
		now := t0.Add(30 * time.Second) // inside the minute that ends at t0+1m
		res := NewResults()
		s := &Statistics{DB: db, Results: res, Source: fakeSource{}, Log: quiet(), Now: func() time.Time { return now }}
		res.Add(true)
		res.Add(false)
		s.Flush(ctx) // the term ends
		if p, f := res.Pending(Day); p != 0 || f != 0 {
			t.Fatalf("pending after the flush: %d/%d", p, f)
		}
		if r, err := db.LatestTaskResult(ctx, Minute, now); err != nil || r.ID != 0 {
			t.Fatalf("latest minute row at %v: %+v (%v); want none: the flushed row is of the minute in progress", now, r, err)
		}
		next := NewResults() // the next term, in the same minute
		s2 := &Statistics{DB: db, Results: next, Source: fakeSource{}, Log: quiet(), Now: func() time.Time { return now }}
		next.Add(true)
		s2.Tick(ctx, t0, t0.Add(time.Minute))
		rows, err := db.TaskResults(ctx, Minute, t0)
		if err != nil || len(rows) != 1 || rows[0].SuccessCount != 2 || rows[0].FailedCount != 1 || rows[0].StatisticsTime != t0.Add(time.Minute).UnixMilli() {
			t.Fatalf("minute rows %+v (%v); want one at %v holding both terms' 2/1", rows, err, t0.Add(time.Minute))
		}
		for _, iv := range []Interval{Hour, Day} {
			rows, err := db.TaskResults(ctx, iv, t0)
			if err != nil || len(rows) != 1 || rows[0].SuccessCount != 1 || rows[0].FailedCount != 1 || rows[0].StatisticsTime != iv.Truncate(now).Add(iv.Duration()).UnixMilli() {
				t.Fatalf("%s rows %+v (%v); want the first term's 1/1 at the end of the period", iv, rows, err)
			}
		}
	})
}
