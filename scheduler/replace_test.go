package scheduler

import (
	"context"
	"slices"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/taskid"
)

// launchesAndKills reports how many tasks a were asked to launch and to kill.
func (a *ackRecorder) launchesAndKills() (launched, killed int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.launched, len(a.kills)
}

// replaceWorld is a Replace job of two shards in a fresh store, with the Mesos calls of its
// leaders recorded.
type replaceWorld struct {
	base *state.Store
	job  string
	fake *ackRecorder
}

func newReplaceWorld(t *testing.T, ctx context.Context, change func(*config.Job)) replaceWorld {
	base, names := burstJobs(t, ctx, 1, 2, func(j *config.Job) {
		j.ConcurrencyPolicy = config.Replace
		if change != nil {
			change(j)
		}
	})
	return replaceWorld{base: base, job: names[0], fake: &ackRecorder{}}
}

// leader is a new leader over the world's store.
func (w replaceWorld) leader(t *testing.T, ctx context.Context) *leader {
	ld := testLeader(benchModel(t, ctx, w.base), w.fake)
	ld.inst.ld = ld
	return ld
}

func (w replaceWorld) trigger(t *testing.T, ctx context.Context, ld *leader) {
	t.Helper()
	if err := ld.inst.Trigger(ctx, w.job); err != nil {
		t.Fatal(err)
	}
}

// firstRun triggers the job and launches the run in an offer cycle that comes before the loop
// takes the replacement the trigger asked for.
func (w replaceWorld) firstRun(t *testing.T, ctx context.Context, ld *leader) {
	t.Helper()
	w.trigger(t, ctx, ld)
	ld.cycle(ctx, burstOffers(0))
	ld.replaceQueued(ctx)
}

// A Replace job's fire is queued before the event loop takes the replacement it asks for, and an
// offer cycle can come between them and launch the fire's own run. The replacement then must not
// kill that run: it replaces only a run older than the fire, which still holds the fire back.
// (The integration test of Replace lost its first run this way on a loaded machine: the trigger's
// run was killed during its launch.)
func TestAReplaceFireDoesNotKillItsOwnRun(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := newReplaceWorld(t, ctx, nil)
	ld := w.leader(t, ctx)

	// The trigger queues the run and asks for the replacement; the offer cycle wins the race.
	w.firstRun(t, ctx, ld)
	if launched, killed := w.fake.launchesAndKills(); launched != 2 || killed != 0 {
		t.Fatalf("the trigger's run: %d tasks launched, %d killed; want 2 launched and none killed", launched, killed)
	}
	if r, err := w.base.RunningOf(ctx, w.job); err != nil || len(r) != 2 {
		t.Fatalf("%d tasks running (%v); want the trigger's 2", len(r), err)
	}

	// A second fire while that run runs: it waits in the ready queue, and its replacement kills
	// the older run's shards.
	w.trigger(t, ctx, ld)
	ld.replaceQueued(ctx)
	if launched, killed := w.fake.launchesAndKills(); launched != 2 || killed != 2 {
		t.Fatalf("the second fire: %d tasks launched, %d killed; want the first run's 2 killed and nothing new launched", launched, killed)
	}
}

// A replacement that cannot be decided — here the leadership's confirmation fails, as while
// ZooKeeper is out of reach — is asked again on the loop's tick, not dropped: dropped, the new
// fire would wait behind the old run as under Forbid, and a hung run would hold it for good.
func TestAReplaceThatCannotBeDecidedIsAskedAgain(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := newReplaceWorld(t, ctx, nil)
	ld := w.leader(t, ctx)
	w.firstRun(t, ctx, ld) // the fire's own run: nothing to replace
	refuse := true
	ld.confirm = func(context.Context) error {
		if refuse {
			return state.ErrNotLeader
		}
		return nil
	}

	w.trigger(t, ctx, ld)
	ld.replaceQueued(ctx)
	ld.replaceQueued(ctx) // a tick while still unconfirmed
	if launched, killed := w.fake.launchesAndKills(); launched != 2 || killed != 0 {
		t.Fatalf("unconfirmed: %d tasks launched, %d killed; want the first run's 2 launched and none killed", launched, killed)
	}
	refuse = false
	ld.replaceQueued(ctx) // the next tick
	if launched, killed := w.fake.launchesAndKills(); launched != 2 || killed != 2 {
		t.Fatalf("confirmed: %d tasks launched, %d killed; want the first run's 2 killed", launched, killed)
	}
	ld.replaceQueued(ctx)
	if _, killed := w.fake.launchesAndKills(); killed != 2 {
		t.Fatalf("a tick after the replacement: %d kills; want the 2 only, not asked again", killed)
	}
}

// A leader that ends between a Replace fire and its replacement leaves it undone; the next
// leader finds it from the fire ledger when it subscribes: a queued run fired after the
// running one launched replaces it, and one queued before it launched waits, as it would have.
func TestANewLeaderDoesAReplacementLeftUndone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		afterLaunch bool // the second fire comes after the first run launched
		killed      int
	}{
		{"fired after the running run launched", true, 2},
		{"queued before the running run launched", false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			w := newReplaceWorld(t, ctx, func(j *config.Job) { j.Misfire = true })
			old := w.leader(t, ctx)
			w.trigger(t, ctx, old)
			if !tc.afterLaunch {
				w.trigger(t, ctx, old)
			}
			old.cycle(ctx, burstOffers(0))
			if tc.afterLaunch {
				w.trigger(t, ctx, old)
			}
			old.replacing.take() // the old leader ends before its loop takes them
			if r, err := w.base.ReadyOf(ctx, w.job); err != nil || r.Count != 1 {
				t.Fatalf("ready count %d (%v); want the second run queued", r.Count, err)
			}

			ld := w.leader(t, ctx)
			ld.resumeReplacements(ctx)
			ld.replaceQueued(ctx)
			if launched, killed := w.fake.launchesAndKills(); launched != 2 || killed != tc.killed {
				t.Fatalf("%d tasks launched, %d killed; want the first run's 2 launched and %d killed", launched, killed, tc.killed)
			}
		})
	}
}

// A replaced run's task that ends lost or gone (its agent was partitioned, and Mesos forgot the
// KILL) is not relaunched ahead of the new run, even for a failover job; one reported running
// to the next leader, which never asked for its kill, is killed.
func TestAReplacedRunsTaskIsNotRelaunchedHoweverItEnds(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := newReplaceWorld(t, ctx, func(j *config.Job) { j.Failover = true })
	ld := w.leader(t, ctx)
	w.firstRun(t, ctx, ld)
	running, err := w.base.RunningOf(ctx, w.job)
	if err != nil || len(running) != 2 {
		t.Fatalf("%d tasks running (%v); want the first run's 2", len(running), err)
	}
	w.trigger(t, ctx, ld) // a newer fire: the first run is replaced, its tasks killed
	ld.replaceQueued(ctx)
	lost, _ := taskid.Parse(running[0].TaskID)
	back, _ := taskid.Parse(running[1].TaskID)
	ld.updates(ctx, []mesos.TaskStatus{{TaskID: mesos.TaskID{Value: lost.String()}, State: mesos.TASK_GONE_BY_OPERATOR.Enum(),
		AgentID: &mesos.AgentID{Value: lost.AgentID}, Source: mesos.SOURCE_MASTER.Enum(), Reason: mesos.REASON_AGENT_REMOVED_BY_OPERATOR.Enum()}})
	if fo, err := w.base.Failovers(ctx); err != nil || len(fo) != 0 {
		t.Fatalf("failover queue %v (%v); want the replaced run's lost shard not relaunched", fo, err)
	}
	next := w.leader(t, ctx)
	w.fake.mu.Lock()
	w.fake.kills = nil
	w.fake.mu.Unlock()
	next.updates(ctx, []mesos.TaskStatus{{TaskID: mesos.TaskID{Value: back.String()}, State: mesos.TASK_RUNNING.Enum(),
		AgentID: &mesos.AgentID{Value: back.AgentID}, Source: mesos.SOURCE_MASTER.Enum(), Reason: mesos.REASON_RECONCILIATION.Enum()}})
	w.fake.mu.Lock()
	kills := slices.Clone(w.fake.kills)
	w.fake.mu.Unlock()
	if !slices.Equal(kills, []string{back.String()}) {
		t.Fatalf("the next leader's kills %v; want the replaced run's task reported running, %s", kills, back)
	}
}
