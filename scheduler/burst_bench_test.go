package scheduler

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// burstMesos stands in for Mesos in the burst benchmark: every task an ACCEPT launches is
// reported TASK_RUNNING and then TASK_FINISHED, as an agent with instant tasks would, and
// every acknowledgement is counted.
type burstMesos struct {
	mu       sync.Mutex
	pending  []mesos.TaskInfo
	wake     chan struct{}
	launched atomic.Int64
	acked    atomic.Int64
	firstAt  time.Time
	allAt    atomic.Int64 // unix nanos when the last task was launched
	want     int64
}

func (f *burstMesos) Call(_ context.Context, c *scheduler.Call) (mesos.Response, error) {
	switch c.Type {
	case scheduler.Call_ACCEPT:
		var tasks []mesos.TaskInfo
		for _, op := range c.Accept.Operations {
			if op.Launch != nil {
				tasks = append(tasks, op.Launch.TaskInfos...)
			}
		}
		if n := f.launched.Add(int64(len(tasks))); n >= f.want && f.allAt.Load() == 0 {
			f.allAt.Store(time.Now().UnixNano())
		}
		f.mu.Lock()
		f.pending = append(f.pending, tasks...)
		f.mu.Unlock()
		select {
		case f.wake <- struct{}{}:
		default:
		}
	case scheduler.Call_ACKNOWLEDGE:
		f.acked.Add(1)
	}
	return nil, nil
}

// agent reports the tasks launched so far, RUNNING then FINISHED, into the leader's events.
func (f *burstMesos) agent(ctx context.Context, events chan<- scheduler.Event) {
	n := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.wake:
		}
		f.mu.Lock()
		tasks := f.pending
		f.pending = nil
		f.mu.Unlock()
		for _, s := range []mesos.TaskState{mesos.TASK_RUNNING, mesos.TASK_FINISHED} {
			for _, t := range tasks {
				n++
				st := mesos.TaskStatus{TaskID: t.TaskID, State: s.Enum(), AgentID: &t.AgentID,
					Source: mesos.SOURCE_EXECUTOR.Enum(), UUID: []byte(fmt.Sprintf("u%08d", n))}
				select {
				case events <- scheduler.Event{Type: scheduler.Event_UPDATE, Update: &scheduler.Event_Update{Status: st}}:
				case <-ctx.Done():
					return
				}
			}
		}
	}
}

// BenchmarkBurst triggers every job at once and runs the leader's event loop — offer cycles,
// write-ahead, ACCEPTs, and each task's TASK_RUNNING and TASK_FINISHED — against a real
// ZooKeeper, with Mesos replaced by burstMesos (4 large agents, instant tasks). It reports
// ZooKeeper round trips per task with the triggers (one per job) and over the task's life
// alone (launch, RUNNING, FINISHED), and the launch and finish rates. Issue 14: ≤ 0.2 round trips per task for both shapes, ≥ 5,000 launches/s.
func BenchmarkBurst(b *testing.B) {
	for _, shape := range []struct{ jobs, shards int }{{200, 10}, {20, 100}, {100, 100}} {
		b.Run(fmt.Sprintf("%dx%d", shape.jobs, shape.shards), func(b *testing.B) {
			benchBurst(b, shape.jobs, shape.shards)
		})
	}
}

func benchBurst(b *testing.B, jobs, shards int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	base, names := burstJobs(b, ctx, jobs, shards)
	store := benchModel(b, ctx, base)
	total := jobs * shards
	var trips, lifeTrips uint64
	var launchTime, finishTime time.Duration
	for b.Loop() {
		b.StopTimer()
		loopCtx, stop := context.WithCancel(ctx)
		fake := &burstMesos{wake: make(chan struct{}, 1), want: int64(total)}
		ld := testLeader(store, fake)
		ld.suppressed = true
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); ld.serve(loopCtx, make(chan error)) }()
		go func() { defer wg.Done(); fake.agent(loopCtx, ld.events) }()
		before := base.RoundTrips()
		b.StartTimer()
		start := time.Now()
		for _, name := range names {
			if err := store.AddReady(ctx, name, false); err != nil {
				b.Fatal(err)
			}
		}
		afterTriggers := base.RoundTrips()
		// Offers arrive until every task is launched: Mesos re-offers what a cycle left.
		offerUntilDone(b, ld, fake, total)
		finishTime += time.Since(start)
		launchTime += time.Unix(0, fake.allAt.Load()).Sub(start)
		b.StopTimer()
		trips += base.RoundTrips() - before
		lifeTrips += base.RoundTrips() - afterTriggers
		stop()
		wg.Wait()
		if r, err := store.Running(ctx); err != nil || len(r) != 0 {
			b.Fatalf("after the burst %d tasks are still running (%v)", len(r), err)
		}
		b.StartTimer()
	}
	n := float64(b.N * total)
	b.ReportMetric(float64(trips)/n, "zk-roundtrips/task")
	b.ReportMetric(float64(lifeTrips)/n, "zk-roundtrips/task-life")
	b.ReportMetric(n/launchTime.Seconds(), "launches/s")
	b.ReportMetric(n/finishTime.Seconds(), "finished/s")
}

// burstOffers is one offer from each of 4 large agents.
func burstOffers(round int) []mesos.Offer {
	out := make([]mesos.Offer, 4)
	for i := range out {
		out[i] = mesos.Offer{ID: mesos.OfferID{Value: fmt.Sprintf("O%d-%d", round, i)}, AgentID: mesos.AgentID{Value: fmt.Sprintf("S%d", i)},
			Hostname: fmt.Sprintf("host%d", i), Resources: []mesos.Resource{
				{Name: "cpus", Type: mesos.SCALAR.Enum(), Scalar: &mesos.Value_Scalar{Value: 1000}, Role: ptr("*")},
				{Name: "mem", Type: mesos.SCALAR.Enum(), Scalar: &mesos.Value_Scalar{Value: 1 << 22}, Role: ptr("*")},
			}}
	}
	return out
}

// waitFor polls cond until it holds or d passes (the offer loop's pacing, not a test's wait).
func waitFor(cond func() bool, d time.Duration) {
	end := time.Now().Add(d)
	for !cond() && time.Now().Before(end) {
		time.Sleep(100 * time.Microsecond)
	}
}

// burstJobs registers app "app" and jobs TRANSIENT jobs of shards shards each (job0000, …) on a
// store of their own: what the burst benchmarks start from. change, if given, alters each job
// before it is registered.
func burstJobs(b testing.TB, ctx context.Context, jobs, shards int, change ...func(*config.Job)) (*state.Store, []string) {
	return burstJobsLimited(b, ctx, 100000, jobs, shards, change...)
}

// burstJobsLimited is burstJobs in a store whose queues hold at most limit entries.
func burstJobsLimited(b testing.TB, ctx context.Context, limit, jobs, shards int, change ...func(*config.Job)) (*state.Store, []string) {
	env := statetest.StartZooKeeper(b)
	base, err := state.Connect(ctx, state.Config{Servers: env.Servers, Namespace: env.Namespace, Logger: quietLog(), QueueSizeLimit: limit})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(base.Close)
	app := config.DefaultApp()
	app.AppName, app.AppURL, app.BootstrapScript = "app", "/opt/app", "./run"
	if err := base.CreateApp(ctx, app); err != nil {
		b.Fatal(err)
	}
	names := make([]string, jobs)
	for i := range jobs {
		names[i] = fmt.Sprintf("job%04d", i)
		j := config.Job{JobName: names[i], AppName: "app", JobType: config.Script, JobExecutionType: config.Transient,
			TimeZone: "UTC", ShardingTotalCount: shards, CPUCount: 0.01, MemoryMB: 1, ScriptCommandLine: "true",
			Placement: config.Binpack, JobShardingStrategyType: config.AvgAllocation, JobProperties: map[string]string{}}
		for _, ch := range change {
			ch(&j)
		}
		if err := base.CreateJob(ctx, j); err != nil {
			b.Fatal(err)
		}
	}
	return base, names
}

// offerUntilDone offers agents to the leader until every task of the burst is launched, then
// waits until both of each task's updates (RUNNING, FINISHED) are acknowledged.
func offerUntilDone(b *testing.B, ld *leader, fake *burstMesos, total int) {
	deadline := time.Now().Add(2 * time.Minute)
	for offer := 0; fake.launched.Load() < int64(total); offer++ {
		if time.Now().After(deadline) {
			b.Fatalf("launched %d of %d tasks in 2 minutes", fake.launched.Load(), total)
		}
		ld.events <- scheduler.Event{Type: scheduler.Event_OFFERS, Offers: &scheduler.Event_Offers{Offers: burstOffers(offer)}}
		waitFor(func() bool { return len(ld.events) == 0 }, 10*time.Millisecond)
	}
	for fake.acked.Load() < int64(2*total) {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d updates acknowledged in 2 minutes", fake.acked.Load(), 2*total)
		}
		time.Sleep(time.Millisecond)
	}
}
