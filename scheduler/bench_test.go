package scheduler

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/scheduler/producer"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/state/statetest"
	"github.com/ejcloud/ejcloud/taskid"
)

// recordingCaller stands in for Mesos in the offer-cycle benchmark: it counts calls.
type recordingCaller struct{ calls map[scheduler.Call_Type]int }

func (r *recordingCaller) Call(_ context.Context, c *scheduler.Call) (mesos.Response, error) {
	r.calls[c.Type]++
	return nil, nil
}

func benchOffers(agents int) []mesos.Offer {
	out := make([]mesos.Offer, agents)
	for i := range out {
		out[i] = mesos.Offer{ID: mesos.OfferID{Value: fmt.Sprintf("O%d", i)}, AgentID: mesos.AgentID{Value: fmt.Sprintf("S%d", i)},
			Hostname: fmt.Sprintf("host%03d", i), Resources: []mesos.Resource{
				{Name: "cpus", Type: mesos.SCALAR.Enum(), Scalar: &mesos.Value_Scalar{Value: 32}, Role: ptr("*")},
				{Name: "mem", Type: mesos.SCALAR.Enum(), Scalar: &mesos.Value_Scalar{Value: 131072}, Role: ptr("*")},
			}}
	}
	return out
}

// BenchmarkOfferCycle runs whole offer cycles against a real ZooKeeper: 100 READY jobs of 10
// shards placed on 100 agents, written ahead in one multi, and the ACCEPTs sent (to a
// recording caller). It reports ZooKeeper round trips per launched task.
func BenchmarkOfferCycle(b *testing.B) {
	env := statetest.StartZooKeeper(b)
	ctx := context.Background()
	store, err := state.Connect(ctx, state.Config{Servers: env.Servers, Namespace: env.Namespace, Logger: quietLog()})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	app := config.DefaultApp()
	app.AppName, app.AppURL, app.BootstrapScript = "app", "/opt/app", "./run"
	if err := store.CreateApp(ctx, app); err != nil {
		b.Fatal(err)
	}
	const jobs, shards = 100, 10
	for i := range jobs {
		j := config.Job{JobName: fmt.Sprintf("job%03d", i), AppName: "app", JobType: config.Script, JobExecutionType: config.Transient,
			TimeZone: "UTC", ShardingTotalCount: shards, CPUCount: 1, MemoryMB: 1024, ScriptCommandLine: "true",
			Placement: config.Binpack, JobShardingStrategyType: config.AvgAllocation, JobProperties: map[string]string{}}
		if err := store.CreateJob(ctx, j); err != nil {
			b.Fatal(err)
		}
	}
	model := benchModel(b, ctx, store)
	rec := &recordingCaller{calls: map[scheduler.Call_Type]int{}}
	ld := testLeader(model, rec)
	ld.prod = producer.New(model, nil, ld.log, nil)
	offers := benchOffers(100)
	var trips, launched uint64
	var elapsed time.Duration
	for b.Loop() {
		b.StopTimer()
		for i := range jobs {
			model.AddReady(ctx, fmt.Sprintf("job%03d", i), false)
		}
		before := store.RoundTrips()
		b.StartTimer()
		start := time.Now()
		ld.cycle(ctx, offers)
		elapsed += time.Since(start)
		b.StopTimer()
		trips += store.RoundTrips() - before
		running, _ := model.Running(ctx)
		launched += uint64(len(running))
		for _, r := range running { // make room for the next cycle
			id, _ := taskid.Parse(r.TaskID)
			model.EndTask(ctx, id, state.NoFollowUp)
		}
		b.StartTimer()
	}
	if launched != uint64(b.N*jobs*shards) {
		b.Fatalf("launched %d tasks in %d cycles; want %d a cycle", launched, b.N, jobs*shards)
	}
	b.ReportMetric(float64(trips)/float64(launched), "zk-roundtrips/task")
	b.ReportMetric(float64(elapsed.Microseconds())/float64(launched), "µs/task")
}

// BenchmarkTriggerToRunning measures, through mesos-local and the real executor, the time from
// POST /api/job/trigger (Instance.Trigger) to the leader receiving the shard's TASK_RUNNING:
// producer → REVIVE → OFFERS → cycle → write-ahead → ACCEPT → executor → update → scheduler.
func BenchmarkTriggerToRunning(b *testing.B) {
	running := make(chan time.Time, 16)
	s := newSystemWith(b, 1, hooks{updateSeen: func(st mesos.TaskStatus) {
		if st.GetState() == mesos.TASK_RUNNING {
			running <- time.Now()
		}
	}})
	j := s.scriptJob("latency", 1, "")
	if err := s.store.CreateJob(context.Background(), j); err != nil {
		b.Fatal(err)
	}
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := s.sched.inst.Trigger(context.Background(), "latency"); err != nil {
			b.Fatal(err)
		}
		select {
		case at := <-running:
			lat = append(lat, at.Sub(start))
		case <-time.After(30 * time.Second):
			b.Fatal("no TASK_RUNNING 30 s after the trigger")
		}
		await.True(b, 30*time.Second, "shard ended", func() bool { return s.runningCount("latency") == 0 })
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkFailoverRelaunch measures, through mesos-local and the real executor, the time from
// SIGKILL of the executor running a failover job's shard to the leader receiving the task's
// TASK_FAILED (detect-ms: the agent sees the executor die and reports its task) and the
// TASK_RUNNING of its FAILOVER relaunch (relaunch-ms: requeue, REVIVE, offer, launch, and a
// new executor fetched and started, since the old one is gone).
func BenchmarkFailoverRelaunch(b *testing.B) {
	type seen struct {
		id    string
		state mesos.TaskState
		at    time.Time
	}
	updates := make(chan seen, 1024)
	s := newSystemWith(b, 1, hooks{updateSeen: func(st mesos.TaskStatus) {
		select {
		case updates <- seen{st.TaskID.Value, st.GetState(), time.Now()}:
		default: // never block the leader; a lost sample fails the wait below
		}
	}})
	j := s.holdJob("fo", 1, "")
	j.Failover = true
	if err := s.store.CreateJob(context.Background(), j); err != nil {
		b.Fatal(err)
	}
	await := func(what string, match func(seen) bool) seen {
		deadline := time.After(30 * time.Second)
		for {
			select {
			case u := <-updates:
				if match(u) {
					return u
				}
			case <-deadline:
				b.Fatalf("no %s within 30 s", what)
			}
		}
	}
	release := filepath.Join(s.dir, "release-fo")
	var detect, relaunch []time.Duration
	for b.Loop() {
		os.Remove(release)
		s.trigger("fo")
		first := await("TASK_RUNNING", func(u seen) bool { return u.state == mesos.TASK_RUNNING })
		pids := s.executorPIDs(s.mesos.AgentIDs()[0])
		if len(pids) != 1 {
			b.Fatalf("executors %v; want one", pids)
		}
		killed := time.Now()
		syscall.Kill(pids[0], syscall.SIGKILL)
		failed := await("TASK_FAILED", func(u seen) bool { return u.id == first.id && u.state == mesos.TASK_FAILED })
		again := await("the relaunch's TASK_RUNNING", func(u seen) bool {
			id, err := taskid.Parse(u.id)
			return err == nil && id.Type == taskid.Failover && u.state == mesos.TASK_RUNNING
		})
		detect, relaunch = append(detect, failed.at.Sub(killed)), append(relaunch, again.at.Sub(killed))
		s.release("fo")
		await("TASK_FINISHED", func(u seen) bool { return u.id == again.id && u.state == mesos.TASK_FINISHED })
	}
	for _, m := range []struct {
		name string
		d    []time.Duration
	}{{"detect", detect}, {"relaunch", relaunch}} {
		sort.Slice(m.d, func(i, j int) bool { return m.d[i] < m.d[j] })
		b.ReportMetric(float64(m.d[len(m.d)/2].Microseconds())/1000, m.name+"-p50-ms")
		b.ReportMetric(float64(m.d[len(m.d)*99/100].Microseconds())/1000, m.name+"-p99-ms")
	}
}
