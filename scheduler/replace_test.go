package scheduler

import (
	"context"
	"sync"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"

	"github.com/ejcloud/ejcloud/config"
)

// killRecorder is a Mesos that takes every call and remembers the tasks it was asked to kill.
type killRecorder struct {
	mu     sync.Mutex
	kills  []string
	launch int
}

func (m *killRecorder) Call(_ context.Context, c *scheduler.Call) (mesos.Response, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch c.Type {
	case scheduler.Call_KILL:
		m.kills = append(m.kills, c.Kill.TaskID.Value)
	case scheduler.Call_ACCEPT:
		for _, op := range c.Accept.Operations {
			if op.Launch != nil {
				m.launch += len(op.Launch.TaskInfos)
			}
		}
	}
	return nil, nil
}

func (m *killRecorder) counts() (launched, killed int) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.launch, len(m.kills)
}

// A Replace job's fire is queued before the event loop takes the replacement it asks for, and an
// offer cycle can come between them and launch the fire's own run. The replacement then must not
// kill that run: it replaces only a run older than the fire, which still holds the fire back.
// (The integration test of Replace lost its first run this way on a loaded machine: the trigger's
// run was killed during its launch.)
func TestAReplaceFireDoesNotKillItsOwnRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base, _ := burstJobs(t, ctx, 0, 1)
	j := config.Job{JobName: "rep", AppName: "app", JobType: config.Script, JobExecutionType: config.Transient,
		TimeZone: "UTC", ShardingTotalCount: 2, CPUCount: 0.01, MemoryMB: 1, ScriptCommandLine: "true",
		Placement: config.Binpack, JobShardingStrategyType: config.AvgAllocation, JobProperties: map[string]string{},
		ConcurrencyPolicy: config.Replace}
	if err := base.CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	fake := &killRecorder{}
	ld := testLeader(benchModel(t, ctx, base), fake)
	ld.inst.ld = ld

	// The trigger queues the run and asks for the replacement; the offer cycle wins the race.
	if err := ld.inst.Trigger(ctx, "rep"); err != nil {
		t.Fatal(err)
	}
	ld.cycle(ctx, burstOffers(0))
	for _, job := range ld.replacing.take() {
		ld.replace(ctx, job)
	}
	if launched, killed := fake.counts(); launched != 2 || killed != 0 {
		t.Fatalf("the trigger's run: %d tasks launched, %d killed; want 2 launched and none killed", launched, killed)
	}
	if r, err := base.RunningOf(ctx, "rep"); err != nil || len(r) != 2 {
		t.Fatalf("%d tasks running (%v); want the trigger's 2", len(r), err)
	}

	// A second fire while that run runs: it waits in the ready queue, and its replacement kills
	// the older run's shards.
	if err := ld.inst.Trigger(ctx, "rep"); err != nil {
		t.Fatal(err)
	}
	for _, job := range ld.replacing.take() {
		ld.replace(ctx, job)
	}
	if launched, killed := fake.counts(); launched != 2 || killed != 2 {
		t.Fatalf("the second fire: %d tasks launched, %d killed; want the first run's 2 killed and nothing new launched", launched, killed)
	}
}
