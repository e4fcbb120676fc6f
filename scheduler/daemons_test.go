package scheduler

import (
	"context"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/taskid"
)

// At subscribe, a DAEMON job with nothing running is queued to run, unless its shards wait
// for a relaunch: the relaunch runs them, and a ready entry beside it would only stay queued.
func TestADaemonIsQueuedAtSubscribeOnlyWhenNothingOfItRunsOrWaits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		failedOne bool // shard 0 waits in the failover queue
		wantReady int
	}{
		{"nothing runs or waits", false, 1},
		{"a shard waits for its relaunch", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			base, jobs := burstJobs(t, ctx, 1, 2, func(j *config.Job) {
				j.JobExecutionType, j.Cron = config.Daemon, "0 0 0 1 1 ? 2099"
			})
			if tc.failedOne {
				if _, err := base.AddFailover(ctx, taskid.New(taskid.Meta{JobName: jobs[0], Item: 0}, taskid.Ready, "S0")); err != nil {
					t.Fatal(err)
				}
			}
			ld := testLeader(benchModel(t, ctx, base), &ackRecorder{})
			ld.ensureDaemons(ctx)
			if r, err := base.ReadyOf(ctx, jobs[0]); err != nil || r.Count != tc.wantReady {
				t.Fatalf("ready %+v (%v); want a count of %d", r, err, tc.wantReady)
			}
		})
	}
}

// A DAEMON job that could not be queued for a ZooKeeper fault is queued once ZooKeeper is back:
// nothing else would queue it, and it would not run until the next subscription.
func TestADaemonNotQueuedForAZooKeeperFaultIsQueuedWhenItIsBack(t *testing.T) {
	t.Parallel()
	w := newGroupWorld(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d := config.Job{JobName: "d", AppName: "app", JobType: config.Script, JobExecutionType: config.Daemon, Cron: "0 0 0 1 1 ? 2099",
		TimeZone: "UTC", ShardingTotalCount: 1, CPUCount: 0.1, MemoryMB: 32, ScriptCommandLine: "true",
		Placement: config.Binpack, JobShardingStrategyType: config.AvgAllocation, JobProperties: map[string]string{}}
	if err := w.other.CreateJob(ctx, d); err != nil {
		t.Fatal(err)
	}
	for { // the leader's model follows the registration
		if _, err := w.ld.store.Job(ctx, "d"); err == nil {
			break
		} else if ctx.Err() != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	queued := func() bool {
		r, err := w.other.ReadyOf(ctx, "d")
		return err == nil && r.Count == 1
	}
	w.proxy.Cut()
	cut, stop := context.WithTimeout(ctx, 3*time.Second)
	w.ld.ensureDaemons(cut)
	stop()
	if queued() {
		t.Fatal("queued through a cut connection")
	}
	w.proxy.Restore()
	serving(t, ctx, w.ld, func() {
		for !queued() {
			if ctx.Err() != nil {
				t.Fatal("the DAEMON job was not queued once ZooKeeper was back")
			}
			time.Sleep(20 * time.Millisecond)
		}
	})
}

// A DAEMON shard killed while its siblings run on (an agent's shutdown kills only its own) runs
// again alone: the job's shards never all end, so waiting for them would lose the shard.
func TestAKilledDaemonShardRunsAgainWhileTheOthersRunOn(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base, jobs := burstJobs(t, ctx, 1, 2, func(j *config.Job) {
		j.JobExecutionType, j.Cron = config.Daemon, "0 0 0 1 1 ? 2099"
	})
	fake := &ackRecorder{}
	ld := testLeader(benchModel(t, ctx, base), fake)
	ld.ensureDaemons(ctx)
	ld.cycle(ctx, burstOffers(0))
	running, err := base.RunningOf(ctx, jobs[0])
	if err != nil || len(running) != 2 {
		t.Fatalf("%d shards running (%v); want 2", len(running), err)
	}
	var killed, other taskid.ID
	for _, r := range running {
		id, _ := taskid.Parse(r.TaskID)
		if id.Item == 0 {
			killed = id
		} else {
			other = id
		}
	}
	ld.updates(ctx, []mesos.TaskStatus{upd(killed, mesos.TASK_KILLED, "u-killed")})
	ld.cycle(ctx, burstOffers(1))
	running, err = base.RunningOf(ctx, jobs[0])
	items := map[int]string{}
	for _, r := range running {
		id, _ := taskid.Parse(r.TaskID)
		items[id.Item] = r.TaskID
	}
	if err != nil || len(items) != 2 || items[1] != other.String() || items[0] == "" || items[0] == killed.String() {
		t.Fatalf("running %v (%v); want shard 0 relaunched beside shard 1's task %s", items, err, other)
	}
	// A ready entry with every shard running has nothing to launch: it goes, rather than keep
	// the job's work pending for ever.
	if err := base.AddReady(ctx, jobs[0], false); err != nil {
		t.Fatal(err)
	}
	await.True(t, 5*time.Second, "the leader's model has the entry", func() bool { r, _ := ld.store.ReadyOf(ctx, jobs[0]); return r.Count == 1 })
	if _, err := ld.eligible(ctx); err != nil {
		t.Fatal(err)
	}
	if r, err := base.ReadyOf(ctx, jobs[0]); err != nil || r.Count != 0 {
		t.Fatalf("ready %+v (%v); want the settled entry removed", r, err)
	}
}
