package state_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/state/statetest"
	"github.com/ejcloud/ejcloud/taskid"
)

const batch = 100

func batchOf(job string) []taskid.ID {
	ids := make([]taskid.ID, batch)
	for i := range ids {
		ids[i] = taskid.New(taskid.Meta{JobName: job, Item: i}, taskid.Ready, "S0")
	}
	return ids
}

// BenchmarkLaunchBatch records the launch of 100 tasks of a job the way the offer cycle does:
// one multi (plus one create of the job's running node, as after the previous run's cleanup).
func BenchmarkLaunchBatch(b *testing.B) {
	s := benchStore(b)
	ctx := b.Context()
	start := s.RoundTrips()
	began := time.Now()
	for i := 0; b.Loop(); i++ {
		if err := s.RecordLaunch(ctx, state.Launch{Tasks: batchOf(fmt.Sprintf("multi%d", i))}); err != nil {
			b.Fatal(err)
		}
	}
	report(b, s.RoundTrips()-start, time.Since(began))
}

// BenchmarkLaunchPerTask is the baseline: one write per task, as Elastic-Job-Cloud 2.1.5 did.
func BenchmarkLaunchPerTask(b *testing.B) {
	s := benchStore(b)
	ctx := b.Context()
	start := s.RoundTrips()
	began := time.Now()
	for i := 0; b.Loop(); i++ {
		for _, id := range batchOf(fmt.Sprintf("single%d", i)) {
			if err := s.RecordLaunch(ctx, state.Launch{Tasks: []taskid.ID{id}}); err != nil {
				b.Fatal(err)
			}
		}
	}
	report(b, s.RoundTrips()-start, time.Since(began))
}

func benchStore(b *testing.B) *state.Store {
	env := statetest.StartZooKeeper(b)
	s, err := state.Connect(b.Context(), state.Config{Servers: env.Servers, Namespace: env.Namespace, Logger: newLogger().Logger})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(s.Close)
	return s
}

func report(b *testing.B, roundTrips uint64, elapsed time.Duration) {
	b.ReportMetric(float64(roundTrips)/float64(b.N), "roundtrips/batch")
	b.ReportMetric(float64(roundTrips)/float64(b.N*batch), "roundtrips/task")
	b.ReportMetric(float64(elapsed.Microseconds())/float64(b.N*batch), "µs/task")
}
