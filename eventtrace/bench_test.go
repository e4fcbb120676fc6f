package eventtrace

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/eventtrace/eventtracetest"
)

// sweepRows is the completed executions BenchmarkOrphanSweep's table holds: 30 days of 20 runs
// a minute, within --event-trace-retention's default.
const sweepRows = 30 * 24 * 60 * 20

// eachBenchDB runs f against each database, as eachDB does for tests.
func eachBenchDB(b *testing.B, f func(b *testing.B, db *DB)) {
	dsns := map[string]func() string{
		"sqlite":   func() string { return "sqlite://" + filepath.Join(b.TempDir(), "trace.db") },
		"postgres": func() string { return eventtracetest.Postgres(b) },
		"mariadb":  func() string { return eventtracetest.MariaDB(b) },
	}
	for _, name := range []string{"sqlite", "postgres", "mariadb"} {
		b.Run(name, func(b *testing.B) {
			db, err := Open(context.Background(), dsns[name]())
			if err != nil {
				b.Fatal(err)
			}
			defer db.Close()
			f(b, db)
		})
	}
}

// BenchmarkExecutionWrites is the writer writing 2,000 executions, each started and then
// completed (4,000 events, in batches of what is queued), until all are written: what the
// indexes of JOB_EXECUTION_LOG cost the writer.
func BenchmarkExecutionWrites(b *testing.B) {
	eachBenchDB(b, func(b *testing.B, db *DB) {
		round := 0
		for b.Loop() {
			w := NewWriter(db, WriterConfig{}, quiet())
			for i := range 2000 {
				e := exec(fmt.Sprintf("r%d-%04d", round, i), "job-a", i%5, t0)
				w.Execution(e)
				w.Execution(completed(e, t0.Add(time.Second), nil))
			}
			w.Close()
			if s := w.Stats(); s.Failed != 0 || s.Dropped != 0 || s.Written != 4000 {
				b.Fatalf("writer stats %+v; want 4000 written", s)
			}
			round++
		}
	})
}

// BenchmarkOrphanSweep is one sweep of the orphaned executions (closeOrphans, in its own
// transaction as the writer runs it) over sweepRows completed executions and 200 open ones, half
// of them of running tasks: what a leader does every 10 minutes.
func BenchmarkOrphanSweep(b *testing.B) {
	eachBenchDB(b, func(b *testing.B, db *DB) {
		ctx := context.Background()
		start := time.Date(2026, 10, 1, 0, 0, 0, 0, time.UTC)
		running := map[string]bool{}
		const batch = 500
		for k := 0; k < sweepRows+200; k += batch {
			var sb strings.Builder
			var args []any
			sb.WriteString(`INSERT INTO ` + ExecutionLog + ` (id, job_name, task_id, hostname, ip, sharding_item, execution_source, is_success, start_time, complete_time) VALUES `)
			for i := k; i < k+batch && i < sweepRows+200; i++ {
				if i > k {
					sb.WriteString(", ")
				}
				sb.WriteString("(?, ?, ?, ?, ?, ?, ?, ?, ?, ?)")
				at := start.Add(time.Duration(i) * 3 * time.Second)
				task := fmt.Sprintf("job-%d@-@0@-@READY@-@S0@-@%d", i%200, i)
				var done any = db.ts(at.Add(time.Second))
				if i >= sweepRows {
					done = nil // open
					if i%2 == 0 {
						running[task] = true
					}
				}
				args = append(args, fmt.Sprint("e", i), fmt.Sprint("job-", i%200), task, "host", "127.0.0.1", 0, "NORMAL_TRIGGER", 1, db.ts(at), done)
			}
			if _, err := db.db.ExecContext(ctx, db.q(sb.String()), args...); err != nil {
				b.Fatal(err)
			}
		}
		before := start.Add(time.Duration(sweepRows+200) * 3 * time.Second)
		b.ResetTimer()
		for b.Loop() {
			tx, err := db.db.BeginTx(ctx, nil)
			if err != nil {
				b.Fatal(err)
			}
			if err := db.closeOrphans(ctx, tx, &Orphans{Running: running, Before: before, At: before}); err != nil {
				b.Fatal(err)
			}
			if err := tx.Rollback(); err != nil { // each sweep finds the same orphans
				b.Fatal(err)
			}
		}
	})
}
