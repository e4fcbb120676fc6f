package state_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/state/statetest"
	"github.com/ejcloud/ejcloud/taskid"
)

// BenchmarkMirrorLoad measures a takeover (issue 14): a new leader loads the model of a
// namespace with n jobs and its queues, reading one node per getData (read=getData, as before
// multiRead) and in batches of multiRead (read=multiRead), on the same seeded namespace. Each
// load is a fresh session, so that nothing is cached and every watch is armed again. Run it
// with -benchtime=1x or 3x: seeding 100,000 jobs takes a while. Compare with
// benchstat -col /read.
func BenchmarkMirrorLoad(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			env := statetest.StartZooKeeper(b)
			want := seedLoad(b, env, n)
			for _, read := range []string{"getData", "multiRead"} {
				b.Run("read="+read, func(b *testing.B) {
					defer state.SetMultiReadLoad(read == "multiRead")()
					benchLoad(b, env, want)
				})
			}
		})
	}
}

func benchLoad(b *testing.B, env statetest.Env, want loadCounts) {
	var elapsed, watched time.Duration
	var trips, loadTrips uint64
	for b.Loop() {
		b.StopTimer()
		s := connectBench(b, env)
		ctx, cancel := context.WithCancel(b.Context())
		start := s.RoundTrips()
		// The load's own round trips, before the watches are armed.
		restore := state.SetLoadedHook(func() { loadTrips += s.RoundTrips() - start })
		b.StartTimer()
		began := time.Now()
		m, err := s.Mirror(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		elapsed += time.Since(began)
		b.StopTimer()
		restore()
		// The watches of the config nodes are armed in the background, after the load.
		<-m.Watched()
		watched += time.Since(began)
		trips += s.RoundTrips() - start
		want.check(b, ctx, m)
		cancel()
		s.Close()
		b.StartTimer()
	}
	b.ReportMetric(float64(elapsed.Milliseconds())/float64(b.N), "ms/load")
	b.ReportMetric(float64(watched.Milliseconds())/float64(b.N), "ms/watched")
	b.ReportMetric(float64(loadTrips)/float64(b.N), "roundtrips/load")
	b.ReportMetric(float64(trips)/float64(b.N), "roundtrips/watched")
}

// loadCounts is what the loaded model must hold.
type loadCounts struct {
	jobs, ready, running, failover, disabled int
}

// check reads the model and fails unless it holds everything seeded, without a round trip.
func (w loadCounts) check(b *testing.B, ctx context.Context, m *state.Store) {
	before := m.RoundTrips()
	jobs, err := m.Jobs(ctx)
	if err != nil {
		b.Fatal(err)
	}
	ready, err := m.Ready(ctx)
	if err != nil {
		b.Fatal(err)
	}
	running, err := m.Running(ctx)
	if err != nil {
		b.Fatal(err)
	}
	failover, err := m.Failovers(ctx)
	if err != nil {
		b.Fatal(err)
	}
	_, disabled, err := m.Disabled(ctx)
	if err != nil {
		b.Fatal(err)
	}
	if trips := m.RoundTrips() - before; trips != 0 {
		b.Fatalf("reading the model made %d round trips; want 0", trips)
	}
	got := loadCounts{len(jobs), len(ready), len(running), len(failover), len(disabled)}
	if got != w {
		b.Fatalf("model holds %+v; want %+v", got, w)
	}
}

func connectBench(b *testing.B, env statetest.Env) *state.Store {
	ctx, cancel := context.WithTimeout(b.Context(), 30*time.Second)
	defer cancel()
	s, err := state.Connect(ctx, state.Config{Servers: env.Servers, Namespace: env.Namespace, Logger: newLogger().Logger})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

// seedLoad registers n jobs of one app and queues work the way a busy scheduler has it: 5%
// of the jobs ready, 2% running with 3 shards, 0.5% with a shard in failover, and 20 jobs
// disabled (which drops their ready entries, so those are taken from outside the ready set).
func seedLoad(b *testing.B, env statetest.Env, n int) loadCounts {
	b.Helper()
	ctx := b.Context()
	s := connectBench(b, env)
	defer s.Close()
	began := time.Now()
	if err := s.CreateApp(ctx, testApp("app")); err != nil {
		b.Fatal(err)
	}
	name := func(i int) string { return fmt.Sprintf("job%06d", i) }
	// Writes from many goroutines are pipelined over the one connection and group-committed
	// by ZooKeeper's log, so this is far faster than one create after another.
	inParallel := func(what string, count int, f func(i int) error) {
		const workers = 64
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < count; i += workers {
					if err := f(i); err != nil {
						errs <- fmt.Errorf("%s %d: %w", what, i, err)
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	inParallel("create job", n, func(i int) error { return s.CreateJob(ctx, testJob(name(i), "app")) })
	want := loadCounts{jobs: n, ready: n / 20, running: n / 50 * 3, failover: n / 200, disabled: 20}
	inParallel("add ready", want.ready, func(i int) error { return s.AddReady(ctx, name(i), true) })
	// Running and failover jobs come after the ready ones.
	inParallel("launch", n/50, func(i int) error {
		job := name(want.ready + i)
		ids := make([]taskid.ID, 3)
		for item := range ids {
			ids[item] = taskid.New(taskid.Meta{JobName: job, Item: item}, taskid.Ready, "S0")
		}
		return s.RecordLaunch(ctx, state.Launch{Tasks: ids})
	})
	inParallel("add failover", want.failover, func(i int) error {
		id := taskid.New(taskid.Meta{JobName: name(want.ready + n/50 + i), Item: 0}, taskid.Failover, "S0")
		_, err := s.AddFailover(ctx, id)
		return err
	})
	inParallel("disable", want.disabled, func(i int) error { return s.DisableJob(ctx, name(n-1-i)) })
	b.Logf("seeded %d jobs, %d ready, %d running tasks, %d failover, %d disabled in %v (%d round trips)",
		want.jobs, want.ready, want.running, want.failover, want.disabled, time.Since(began).Round(time.Millisecond), s.RoundTrips())
	return want
}
