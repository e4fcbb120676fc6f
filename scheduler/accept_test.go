package scheduler

import (
	"context"
	"errors"
	"io"
	"slices"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/ejcloud/ejcloud/config"
)

// refusingAccept is Mesos answering every ACCEPT with an error (a 4xx or 5xx) and every other
// call as ackRecorder does.
type refusingAccept struct{ ackRecorder }

func (r *refusingAccept) Call(ctx context.Context, c *scheduler.Call) (mesos.Response, error) {
	if c.Type == scheduler.Call_ACCEPT {
		return nil, errors.New("400 Bad Request")
	}
	return r.ackRecorder.Call(ctx, c)
}

// A launch whose ACCEPT Mesos refused is not counted launched (it was, and logged "launched"
// after the call's warning), and Mesos is asked about its tasks at once: they are recorded
// running, and waited an hour for the stale-task check before.
func TestALaunchMesosRefusedIsNotCountedAndItsTasksAreReconciled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base, jobs := burstJobs(t, ctx, 1, 2)
	fake := &refusingAccept{}
	ld := testLeader(benchModel(t, ctx, base), fake)
	if err := ld.store.AddReady(ctx, jobs[0], false); err != nil {
		t.Fatal(err)
	}
	ld.cycle(ctx, burstOffers(0))
	running, err := base.RunningOf(ctx, jobs[0])
	if err != nil || len(running) != 2 {
		t.Fatalf("running %v (%v); want the 2 shards written ahead", running, err)
	}
	if n := counterValue(ld.inst.metrics.launched); n != 0 {
		t.Errorf("ejcloud_tasks_launched_total = %v; want 0: Mesos refused the ACCEPT", n)
	}
	if n := counterValue(ld.inst.metrics.launchesUnconfirmed); n != 2 {
		t.Errorf("ejcloud_tasks_launch_unconfirmed_total = %v; want 2", n)
	}
	var want []string
	for _, r := range running {
		want = append(want, r.TaskID)
	}
	fake.mu.Lock()
	asked := slices.Clone(fake.reconciled)
	fake.mu.Unlock()
	slices.Sort(want)
	slices.Sort(asked)
	if !slices.Equal(asked, want) {
		t.Fatalf("Mesos was asked about %v; want the launch's tasks %v", asked, want)
	}
	if len(ld.recon.pending) != 2 {
		t.Fatalf("the reconciliation run waits for %d tasks; want 2 (asked again until Mesos answers)", len(ld.recon.pending))
	}
}

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}

// A job that cannot be placed says so at Info once, and again only when its reasons change,
// not at every offer cycle for as long as it waits (the rest at Debug).
func TestUnplacedShardsAreLoggedWhenTheirReasonsChange(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base, jobs := burstJobs(t, ctx, 1, 2, func(j *config.Job) { j.CPUCount = 2000 }) // no agent has 2,000 cpus
	ld := testLeader(benchModel(t, ctx, base), &ackRecorder{})
	log := logrus.New()
	log.SetOutput(io.Discard)
	log.SetLevel(logrus.DebugLevel)
	hook := logtest.NewLocal(log)
	ld.log = log
	if err := ld.store.AddReady(ctx, jobs[0], false); err != nil {
		t.Fatal(err)
	}
	for round := range 3 {
		ld.cycle(ctx, burstOffers(round))
	}
	levels := map[logrus.Level]int{}
	for _, e := range hook.AllEntries() {
		if e.Message == "shards not placed this cycle" {
			levels[e.Level]++
		}
	}
	if levels[logrus.InfoLevel] != 1 || levels[logrus.DebugLevel] != 2 {
		t.Fatalf("'shards not placed this cycle' logged %v; want once at info, then at debug", levels)
	}
}
