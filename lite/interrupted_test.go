package lite_test

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/lite"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// An item interrupted by its instance's death is run again for its fire by the instance the
// resharding hands it to, even when that instance's catching up comes before anyone flags the
// item for failover (the flag is held back here): its claim for a later fire does not
// overwrite the record of the run that is owed.
func TestInterruptedItemRunsForItsFireWhenReshardedBeforeItIsFlagged(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	tr := inspect(t, env)
	const name = "owed"
	const a, b = "127.0.0.1@-@a", "127.0.0.1@-@b"
	cfg := simpleJob(name, "* * * * * ?", 2)
	var holdA, holdFlags atomic.Bool
	forever, flagGate := make(chan struct{}), make(chan struct{})
	rec := &recorder{work: 50 * time.Millisecond, hold: func(inst string, item int, fire int64) <-chan struct{} {
		if inst == a && holdA.Load() {
			return forever // until a stops
		}
		return nil
	}}
	ia := start(t, env.Servers, env.Namespace, a, cfg, rec)
	await.True(t, 5*time.Second, "a leads", func() bool { d, _ := data(t, tr, name+"/leader/election/instance"); return d == a })
	startHooked(t, env.Servers, env.Namespace, b, cfg, rec, func(op string) {
		if op == "flag" && holdFlags.Load() {
			<-flagGate
		}
	})
	t.Cleanup(func() { close(flagGate) }) // before b stops (cleanups run last first)
	await.True(t, 10*time.Second, "b has item 0, a item 1", func() bool {
		got := assignment(t, tr, name, 2)
		return fmt.Sprint(got[a]) == "[1]" && fmt.Sprint(got[b]) == "[0]"
	})
	held := time.Now()
	holdA.Store(true)
	var fire int64
	awaitRuns(t, rec, 5*time.Second, "a is held in a run of item 1", func(runs []run) bool {
		for _, x := range runs {
			if x.inst == a && x.item == 1 && x.start.After(held) && !x.done {
				fire = x.fire
				return true
			}
		}
		return false
	})
	awaitRuns(t, rec, 5*time.Second, "b runs a later fire", func(runs []run) bool {
		for _, x := range runs {
			if x.inst == b && x.fire > fire && x.done {
				return true
			}
		}
		return false
	})
	holdFlags.Store(true)
	ia.stop(t) // its run of item 1 is interrupted; b reshards and catches up before flagging
	awaitRuns(t, rec, 3*sessionTimeout, "b runs item 1 for the fire a did not finish", func(runs []run) bool {
		return doneByFire(runs)[fire][1] == 1
	})
	for f, items := range doneByFire(rec.snapshot()) {
		for item, n := range items {
			if n > 1 {
				t.Errorf("fire %s: item %d finished %d times", fmtFire(f), item, n)
			}
		}
	}
}

// A graceful stop (Run's context ends: a SIGTERM during a deploy) while one item of a claim
// still runs and another has finished: the finished one's completion is written before the
// session closes, so the survivors run only the interrupted one again for the fire.
func TestAGracefulStopRecordsTheItemsThatFinishedBeforeIt(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	tr := inspect(t, env)
	const name = "gracefulstop"
	const a, b = "127.0.0.1@-@a", "127.0.0.1@-@b"
	cfg := simpleJob(name, neverCron, 4)
	rec := holding(func(inst string, item int) bool { return inst == a && item == 3 })
	ia := start(t, env.Servers, env.Namespace, a, cfg, rec)
	await.True(t, 5*time.Second, "a leads", func() bool { d, _ := data(t, tr, name+"/leader/election/instance"); return d == a })
	start(t, env.Servers, env.Namespace, b, cfg, rec)
	await.True(t, 10*time.Second, "b:[0 1] a:[2 3]", func() bool {
		got := assignment(t, tr, name, 4)
		return fmt.Sprint(got[a]) == "[2 3]" && fmt.Sprint(got[b]) == "[0 1]"
	})
	fire := time.Now().UnixMilli()
	lite.Fire(ia.in, fire)
	awaitRuns(t, rec, 5*time.Second, "a finished item 2 and runs item 3", func(runs []run) bool {
		return doneByFire(runs)[fire][2] == 1 && exists(t, tr, name+"/sharding/3/running")
	})
	ia.stop(t) // graceful: item 3 is interrupted, item 2 had finished
	if f, done := record(t, tr, name+"/sharding/2"); f != fire || !done {
		t.Fatalf("item 2's record after the stop: fire %d done %v; want fire %d done", f, done, fire)
	}
	awaitRuns(t, rec, 4*sessionTimeout, "b runs the interrupted item 3 for the fire", func(runs []run) bool {
		return doneByFire(runs)[fire][3] == 1
	})
	if n := doneByFire(rec.snapshot())[fire][2]; n != 1 {
		t.Errorf("item 2, finished before the graceful stop, finished %d times for the fire; want 1 (%s)", n, lastFires(rec.snapshot(), 2))
	}
}

// An interrupted item that a resharding hands to an instance that has not fired yet (started
// after the fire, in a rolling restart), the resharding having won the race with the failover
// flag: that instance has no fire to catch up on, and runs the owed run all the same, rather
// than at its next fire (a day later, for a daily job).
func TestAnInterruptedItemHandedToAnInstanceThatHasNotFiredRunsAtOnce(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	tr := inspect(t, env)
	const name = "newowner"
	const a, b = "127.0.0.1@-@a", "127.0.0.1@-@b"
	cfg := simpleJob(name, neverCron, 2)
	rec := holding(func(inst string, _ int) bool { return inst == b })
	var holdFlags atomic.Bool
	flagGate := make(chan struct{})
	var gateOnce sync.Once
	openGate := func() { gateOnce.Do(func() { close(flagGate) }) }
	t.Cleanup(openGate)
	startHooked(t, env.Servers, env.Namespace, a, cfg, rec, func(op string) {
		if op == "flag" && holdFlags.Load() {
			<-flagGate // the resharding wins the race with the flag
		}
	})
	await.True(t, 5*time.Second, "a leads", func() bool { d, _ := data(t, tr, name+"/leader/election/instance"); return d == a })
	ib := start(t, env.Servers, env.Namespace, b, cfg, rec)
	await.True(t, 10*time.Second, "b has item 0, a item 1", func() bool {
		got := assignment(t, tr, name, 2)
		return fmt.Sprint(got[a]) == "[1]" && fmt.Sprint(got[b]) == "[0]"
	})
	fire := time.Now().UnixMilli()
	lite.Fire(ib.in, fire) // a never fires
	await.True(t, 5*time.Second, "b runs item 0", func() bool { return exists(t, tr, name+"/sharding/0/running") })
	holdFlags.Store(true)
	ib.stop(t)
	await.True(t, 10*time.Second, "a has both items", func() bool {
		return fmt.Sprint(assignment(t, tr, name, 2)[a]) == "[0 1]"
	})
	openGate()
	awaitRuns(t, rec, 4*sessionTimeout, "item 0's interrupted run finished on a", func(runs []run) bool {
		return doneByFire(runs)[fire][0] == 1
	})
}

// An instance shut down through ZooKeeper (its instances/ node deleted, README "Operations") in
// the middle of a run: its run is cancelled, and its running marker goes only when its session
// closes, after the run has wound down, well after its node. The survivors see its node go
// while its item still runs, and do not flag the item then; they look again when the marker
// goes, and the interrupted run is run again for its fire, not at the leader's next fire.
func TestAnItemInterruptedByAShutdownThroughZooKeeperRunsForItsFire(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	_, rec, fire := shutDownMidRun(t, env, simpleJob("shutmid", neverCron, 2))
	awaitRuns(t, rec, 4*sessionTimeout, "item 0's interrupted run finished for its fire", func(runs []run) bool {
		return doneByFire(runs)[fire][0] == 1
	})
	for f, items := range doneByFire(rec.snapshot()) {
		for item, n := range items {
			if n > 1 {
				t.Errorf("fire %s: item %d finished %d times", fmtFire(f), item, n)
			}
		}
	}
}
