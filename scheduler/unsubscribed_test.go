package scheduler

import (
	"context"
	"errors"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"

	"github.com/ejcloud/ejcloud/api"
	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/taskid"
)

// Between subscriptions, an operation whose Mesos calls nothing would make later is refused at
// once and changes nothing (503, SPEC §7), instead of hanging until the client gives up; a
// disable is recorded and its kills wait for the next subscription; and a running task of a
// disabled job is killed when Mesos speaks of it, as the reconciliation after every
// subscription makes it do, so that a kill lost with a leader is made anyway.
func TestOperationsBetweenSubscriptions(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base, jobs := burstJobs(t, ctx, 1, 2)
	job := jobs[0]
	fake := &ackRecorder{}
	ld := testLeader(benchModel(t, ctx, base), fake)
	ld.inst.ld = ld
	if err := ld.inst.Trigger(ctx, job); err != nil {
		t.Fatal(err)
	}
	ld.cycle(ctx, burstOffers(0))
	running, err := base.RunningOf(ctx, job)
	if err != nil || len(running) != 2 {
		t.Fatalf("%d tasks running (%v); want 2", len(running), err)
	}

	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, api.ErrNoSubscription) {
			t.Fatalf("%s: %v; want %v", what, err, api.ErrNoSubscription)
		}
	}
	refused("reconcile", ld.inst.Reconcile(ctx, true))
	j, err := base.Job(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	bigger := j
	bigger.CPUCount *= 2
	refused("an update that restarts the tasks", ld.inst.UpdateJob(ctx, bigger))
	if now, err := base.Job(ctx, job); err != nil || now.CPUCount != j.CPUCount {
		t.Fatalf("cpuCount %v (%v) after the refused update; want %v", now.CPUCount, err, j.CPUCount)
	}
	refused("delete app", ld.inst.DeleteApp(ctx, "app"))
	if _, err := base.App(ctx, "app"); err != nil {
		t.Fatalf("the app after the refused delete: %v", err)
	}

	if err := ld.inst.DisableJob(ctx, job); err != nil {
		t.Fatalf("disable: %v", err)
	}
	if _, killed := fake.launchesAndKills(); killed != 0 {
		t.Fatalf("%d kills without a subscription", killed)
	}
	// Mesos speaks of the first task (an explicit reconciliation's answer): it is killed.
	first, err := taskid.Parse(running[0].TaskID)
	if err != nil {
		t.Fatal(err)
	}
	ld.update(ctx, mesos.TaskStatus{TaskID: mesos.TaskID{Value: first.String()}, State: mesos.TASK_RUNNING.Enum(),
		AgentID: &mesos.AgentID{Value: first.AgentID}, Source: mesos.SOURCE_MASTER.Enum(), Reason: mesos.REASON_RECONCILIATION.Enum()})
	if _, killed := fake.launchesAndKills(); killed != 1 {
		t.Fatalf("%d kills after the disabled job's task was reported running; want 1", killed)
	}

	// The next subscription's loop makes the disable's kills.
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- ld.serve(sctx, make(chan error)) }()
	await.True(t, 10*time.Second, "the disable's two kills made", func() bool { _, killed := fake.launchesAndKills(); return killed == 3 })
	stop()
	<-served
}

// Offers read before the stream ended are not used: Mesos rescinded them with the stream, so
// a launch on them would be recorded running and then refused, its run lost.
func TestOffersOfAnEndedStreamAreNotUsed(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base, jobs := burstJobs(t, ctx, 1, 2)
	fake := &ackRecorder{}
	ld := testLeader(benchModel(t, ctx, base), fake)
	ld.inst.ld = ld
	if err := ld.inst.Trigger(ctx, jobs[0]); err != nil {
		t.Fatal(err)
	}
	ld.events <- scheduler.Event{Type: scheduler.Event_OFFERS, Offers: &scheduler.Event_Offers{Offers: burstOffers(0)}}
	ld.drain(ctx)
	running, err := base.RunningOf(ctx, jobs[0])
	fake.mu.Lock()
	launched := fake.launched
	fake.mu.Unlock()
	if err != nil || len(running) != 0 || launched != 0 {
		t.Fatalf("%d tasks running (%v), %d launched; want the ended stream's offers unused", len(running), err, launched)
	}
	ld.cycle(ctx, burstOffers(1)) // the next subscription's offers launch the run
	if running, err := base.RunningOf(ctx, jobs[0]); err != nil || len(running) != 2 {
		t.Fatalf("%d tasks running (%v) after the next offers; want 2", len(running), err)
	}
}

// The offer cycle drops the failover entries of shards beyond a job's lowered
// shardingTotalCount (an update made them), rather than leave them queued for ever.
func TestTheCycleDropsTheShardsBeyondALoweredTotal(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base, jobs := burstJobs(t, ctx, 1, 2)
	for item := range 2 {
		if _, err := base.AddFailover(ctx, taskid.New(taskid.Meta{JobName: jobs[0], Item: item}, taskid.Ready, "S0")); err != nil {
			t.Fatal(err)
		}
	}
	j, err := base.Job(ctx, jobs[0])
	if err != nil {
		t.Fatal(err)
	}
	j.ShardingTotalCount = 1
	if _, err := base.UpdateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	ld := testLeader(benchModel(t, ctx, base), &ackRecorder{})
	if _, err := ld.eligible(ctx); err != nil {
		t.Fatal(err)
	}
	fo, err := base.Failovers(ctx)
	if err != nil || len(fo) != 1 || fo[0].Meta.Item != 0 {
		t.Fatalf("failover entries %v (%v); want only shard 0's", fo, err)
	}
}
