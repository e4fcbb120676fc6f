package scheduler

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// BenchmarkTraceBurst is BenchmarkBurst's burst of 3,400 tasks — each traced three times
// (TASK_STAGING at launch, TASK_RUNNING, TASK_FINISHED): a 10,200-event burst — without a
// trace and with an SQLite one. The launch and finish rates must not drop with tracing: the
// writer takes the events off the event loop. It also reports how long the writer needs after
// the last acknowledgement to have written everything, and how many events it dropped.
func BenchmarkTraceBurst(b *testing.B) {
	for _, traced := range []bool{false, true} {
		name := "untraced"
		if traced {
			name = "sqlite"
		}
		b.Run(name, func(b *testing.B) { benchTraceBurst(b, 20, 170, traced) })
	}
}

func benchTraceBurst(b *testing.B, jobs, shards int, traced bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base, names := burstJobs(b, ctx, jobs, shards)
	store := benchModel(b, ctx, base)
	total := jobs * shards
	var launchTime, finishTime, drainTime time.Duration
	var written, dropped int64
	for b.Loop() {
		b.StopTimer()
		var tr *tracer
		if traced {
			cfg := Config{EventTraceDB: "sqlite://" + filepath.Join(b.TempDir(), "trace.db")}
			var err error
			if tr, err = openTracer(ctx, cfg, quietLog()); err != nil {
				b.Fatal(err)
			}
		}
		loopCtx, stop := context.WithCancel(ctx)
		fake := &burstMesos{wake: make(chan struct{}, 1), want: int64(total)}
		ld := testLeader(store, fake)
		ld.inst.trace = tr
		ld.suppressed = true
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); ld.serve(loopCtx, make(chan error)) }()
		go func() { defer wg.Done(); fake.agent(loopCtx, ld.events) }()
		b.StartTimer()
		start := time.Now()
		for _, name := range names {
			if err := store.AddReady(ctx, name, false); err != nil {
				b.Fatal(err)
			}
		}
		offerUntilDone(b, ld, fake, total)
		finishTime += time.Since(start)
		launchTime += time.Unix(0, fake.allAt.Load()).Sub(start)
		b.StopTimer()
		if tr != nil {
			acked := time.Now()
			if err := tr.w.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			drainTime += time.Since(acked)
			s := tr.w.Stats()
			written += s.Written
			dropped += s.Dropped
			if s.Written+s.Dropped != int64(3*total) || s.Failed != 0 {
				b.Fatalf("writer stats %+v; want %d events written or dropped", s, 3*total)
			}
		}
		stop()
		wg.Wait()
		tr.close()
		b.StartTimer()
	}
	n := float64(b.N * total)
	b.ReportMetric(n/launchTime.Seconds(), "launches/s")
	b.ReportMetric(n/finishTime.Seconds(), "finished/s")
	if traced {
		b.ReportMetric(float64(written)/float64(b.N), "events-written/op")
		b.ReportMetric(float64(dropped)/float64(b.N), "events-dropped/op")
		b.ReportMetric(drainTime.Seconds()*1000/float64(b.N), "drain-ms/op")
	}
}
