package lite_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/executor/job"
	"github.com/ejcloud/ejcloud/lite"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// BenchmarkFireOfManyItems measures one cron fire of an instance that owns every item of a job,
// against the ZooKeeper the tests start: from the fire's hand-over to the runner (as the ticker
// does it) until the runner waits again, its runs, the failover that follows and the catch-up
// done. The job does nothing, so what is measured is the fire's ZooKeeper work: its passes over
// the items, the claim and the completion. It reports ZooKeeper requests per fire
// (roundtrips/fire; reads sent together count one each).
func BenchmarkFireOfManyItems(b *testing.B) {
	for _, n := range []int{100, 1000} {
		b.Run(fmt.Sprintf("items=%d", n), func(b *testing.B) { benchmarkFire(b, n) })
	}
}

func benchmarkFire(b *testing.B, items int) {
	env := statetest.StartZooKeeper(b)
	cfg := lite.JobConfig{JobName: "bench", JobType: lite.Simple, Cron: never, ShardingTotalCount: items,
		MonitorExecution: true, Failover: true}
	var ran atomic.Int64
	j := job.SimpleFunc(func(context.Context, job.ShardingContext) error { ran.Add(1); return nil })
	in, err := lite.New(cfg, j, lite.Options{Servers: env.Servers, Namespace: env.Namespace,
		SessionTimeout: 10 * time.Second, IP: "127.0.0.1", InstanceID: "127.0.0.1@-@bench", Logger: quietLogger()})
	if err != nil {
		b.Fatalf("New: %v", err)
	}
	idle := make(chan int64, 1) // the runner's last word: the last cron fire it ran
	lite.SetIdle(in, func(last int64) {
		select { // only the runner sends: an older word nobody took makes room for this one
		case <-idle:
		default:
		}
		idle <- last
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := in.Run(ctx); err != nil {
			b.Errorf("Run: %v", err)
		}
	}()
	b.Cleanup(func() { cancel(); <-done })

	var label int64
	fire := func() {
		label = max(label+1, time.Now().UnixMilli())
		lite.Fire(in, label)
		timeout := time.NewTimer(5 * time.Minute)
		defer timeout.Stop()
		for {
			select {
			case last := <-idle:
				if last >= label {
					return
				}
			case <-timeout.C:
				b.Fatalf("the runner is not done with fire %d after 5 minutes", label)
			}
		}
	}
	fire() // the first: the sharding, which creates the items
	if got := ran.Load(); got != int64(items) {
		b.Fatalf("the first fire ran %d items; want %d", got, items)
	}
	before := lite.RoundTrips(in)
	fires := 0
	for b.Loop() {
		fire()
		fires++
	}
	b.ReportMetric(float64(lite.RoundTrips(in)-before)/float64(fires), "roundtrips/fire")
	if got, want := ran.Load(), int64(items*(fires+1)); got != want {
		b.Fatalf("%d fires ran %d items; want %d, every item once a fire", fires+1, got, want)
	}
}
