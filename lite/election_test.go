package lite_test

import (
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/lite"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// A candidate that finds the leader's node made when it creates it (by a candidate that did
// not hold the latch with it: another goroutine of its session, before Lock kept them apart,
// or a process of an older version) has lost the election, which is no error: not for Run,
// which registers the instance through an election, nor for a fire, which would be skipped.
func TestAnElectionLostAtTheCreateIsNoError(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	tr := inspect(t, env)
	const name = "race"
	const a, x = "127.0.0.1@-@a", "127.0.0.1@-@x"
	cfg := simpleJob(name, "* * * * * ?", 2)
	rec := &recorder{work: 50 * time.Millisecond}
	var armed atomic.Bool
	armed.Store(true)
	ia := newInstance(t, env.Servers, env.Namespace, a, cfg, rec, nil)
	lite.SetBeforeMulti(ia, func(op string) {
		if op == "lead" && armed.CompareAndSwap(true, false) {
			if err := tr.Do(t.Context(), tr.Create(name+"/leader/election/instance", []byte(x), true)); err != nil {
				t.Errorf("the other candidate's leader node: %v", err)
			}
		}
	})
	runInstance(t, ia)
	await.True(t, 10*time.Second, "the other candidate leads", func() bool { d, _ := data(t, tr, name+"/leader/election/instance"); return d == x })
	set(t, tr, tr.Delete(name+"/leader/election/instance", -1)) // it goes: a is elected
	await.True(t, 10*time.Second, "a leads", func() bool { d, _ := data(t, tr, name+"/leader/election/instance"); return d == a })
	awaitRuns(t, rec, 10*time.Second, "both items run", aFireAfter(time.Now().UnixMilli(), 2))
}

// Items that a new shard count adds owe no run for the fires before it, also when the leader
// that makes them has not fired yet (it has just become leader): an instance catching up on a
// fire it ran before the change must not run them for it.
func TestNewItemsOweNoRunForEarlierFiresWhenTheLeaderHasNotFired(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	tr := inspect(t, env)
	const name = "newitems"
	const a, b, c = "127.0.0.1@-@a", "127.0.0.1@-@b", "127.0.0.1@-@c"
	cfg := simpleJob(name, "* * * * * ?", 2)
	rec := &recorder{work: 50 * time.Millisecond}
	ib := start(t, env.Servers, env.Namespace, b, cfg, rec)
	await.True(t, 5*time.Second, "b leads", func() bool { d, _ := data(t, tr, name+"/leader/election/instance"); return d == b })
	// c stays out of the election when b goes, so that a, which has never fired, leads.
	var blockC atomic.Bool
	gate := make(chan struct{})
	var open sync.Once
	ic := newInstance(t, env.Servers, env.Namespace, c, cfg, rec, nil)
	lite.SetBeforeMulti(ic, func(op string) {
		if op == "elect" && blockC.Load() {
			<-gate
		}
	})
	runInstance(t, ic)
	t.Cleanup(func() { open.Do(func() { close(gate) }) }) // before c stops
	await.True(t, 10*time.Second, "c has item 0, b item 1", func() bool {
		got := assignment(t, tr, name, 2)
		return fmt.Sprint(got[c]) == "[0]" && fmt.Sprint(got[b]) == "[1]"
	})
	awaitRuns(t, rec, 5*time.Second, "c runs a fire", func(runs []run) bool {
		for _, x := range runs {
			if x.inst == c && x.done {
				return true
			}
		}
		return false
	})
	setCron(t, tr, cfg, never)
	start(t, env.Servers, env.Namespace, a, cfg, rec) // never fires
	blockC.Store(true)
	ib.stop(t)
	await.True(t, 10*time.Second, "a leads", func() bool { d, _ := data(t, tr, name+"/leader/election/instance"); return d == a })
	open.Do(func() { close(gate) })
	await.True(t, 10*time.Second, "c has item 0, a item 1", func() bool {
		got := assignment(t, tr, name, 2)
		return fmt.Sprint(got[c]) == "[0]" && fmt.Sprint(got[a]) == "[1]"
	})
	grown := cfg
	grown.Cron, grown.ShardingTotalCount = never, 3
	data, _ := json.Marshal(grown)
	set(t, tr, tr.Set(name+"/config", data, -1))
	changed := time.Now().UnixMilli()
	await.True(t, 10*time.Second, "item 2 is given to c", func() bool {
		return fmt.Sprint(assignment(t, tr, name, 3)[c]) == "[0 2]"
	})
	setCron(t, tr, grown, "* * * * * ?")
	awaitRuns(t, rec, 10*time.Second, "item 2 runs", func(runs []run) bool {
		for _, x := range runs {
			if x.item == 2 && x.done && x.fire > changed {
				return true
			}
		}
		return false
	})
	for _, x := range rec.snapshot() {
		if x.item == 2 && x.fire <= changed {
			t.Errorf("%s ran item 2 for fire %s, before the shard count that made it (%s)", x.inst, fmtFire(x.fire), fmtFire(changed))
		}
	}
}
