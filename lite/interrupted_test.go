package lite_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/internal/await"
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
