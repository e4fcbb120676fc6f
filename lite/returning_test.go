package lite_test

import (
	"context"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/lite"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// setCron writes a new cron into the job's config in ZooKeeper, which every instance follows.
func setCron(t *testing.T, tr *state.Tree, cfg lite.JobConfig, cronExpr string) {
	t.Helper()
	cfg.Cron = cronExpr
	data, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	set(t, tr, tr.Set(cfg.JobName+"/config", data, -1))
}

func data(t *testing.T, tr *state.Tree, rel string) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := tr.Get(ctx, rel)
	if err != nil {
		t.Fatalf("read %s: %v", rel, err)
	}
	return string(n.Data), n.Exists
}

// An instance whose session expired in the middle of a fire comes back while another instance
// has taken its items over for that fire and not yet run them: it does not run them (it runs
// only what is still its own), and every item of the fire runs exactly once.
//
// The moment is made to last: the test holds leader/sharding/processing (which stops claims)
// while the taker, a, takes c's items, then cuts a off (its session lives) and lets claims
// through again before c comes back; so c, catching up on the fire it was cut in, finds items
// 0 and 1 taken by a, unclaimed for the fire and not running. Item 2 shows when c has caught
// up: disabled while a took it (a could not run it and gave it back), enabled again, it is
// c's to run again for the fire, in the same claim that would take 0 and 1. b's runs of the
// fire are held throughout, so that no resharding moves the items meanwhile.
func TestReturningInstanceDoesNotRunItemsTakenOverByAnother(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	tr := inspect(t, env)
	pa := statetest.NewProxy(t, env.Servers[0])
	pc := statetest.NewProxy(t, env.Servers[0])
	const name = "taken"
	const a, b, c = "127.0.0.1@-@a", "127.0.0.1@-@b", "127.0.0.1@-@c"
	cfg := simpleJob(name, "* * * * * ?", 9)

	var held atomic.Int64 // the fire whose runs on b, and on c until it is cut, are held
	var cCut atomic.Bool
	releaseB, forever := make(chan struct{}), make(chan struct{})
	rec := &recorder{work: 100 * time.Millisecond, hold: func(inst string, item int, fire int64) <-chan struct{} {
		switch {
		case fire != held.Load():
			return nil
		case inst == b:
			return releaseB
		case inst == c && !cCut.Load():
			return forever // until the cut cancels them
		}
		return nil
	}}

	// a leads (it is started first) and reaches ZooKeeper through a proxy, with a session long
	// enough to outlive its cut.
	ia := startWith(t, []string{pa.Addr}, env.Namespace, a, cfg, rec, 8*time.Second, nil, nil)
	await.True(t, 5*time.Second, "a leads", func() bool { d, _ := data(t, tr, name+"/leader/election/instance"); return d == a })
	ib := start(t, env.Servers, env.Namespace, b, cfg, rec)
	ic := start(t, []string{pc.Addr}, env.Namespace, c, cfg, rec)
	owned := map[string][]int{c: {0, 1, 2}, b: {3, 4, 5}, a: {6, 7, 8}}
	await.True(t, 10*time.Second, "three instances share the items", func() bool {
		return fmt.Sprint(assignment(t, tr, name, 9)) == fmt.Sprint(owned)
	})
	fire := (time.Now().UnixMilli()+300)/1000*1000 + 1000
	held.Store(fire)
	awaitRuns(t, rec, 5*time.Second, "the fire runs: b and c held, a done", func(runs []run) bool {
		n := 0
		for _, x := range runs {
			if x.fire == fire && (x.inst != a || x.done) {
				n++
			}
		}
		return n == 9
	})
	setCron(t, tr, cfg, never) // no fire from now on until the test says so

	set(t, tr, tr.Create(name+"/leader/sharding/processing", nil, true))
	set(t, tr, tr.Create(name+"/sharding/2/disabled", nil, false))
	cCut.Store(true)
	pc.Cut()
	await.True(t, 3*sessionTimeout, "c's session expires", func() bool { return !exists(t, tr, name+"/instances/"+c) })
	await.True(t, 5*time.Second, "a takes c's items 0 and 1 and gives 2 back", func() bool {
		f0, _ := data(t, tr, name+"/sharding/0/failover")
		f1, _ := data(t, tr, name+"/sharding/1/failover")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		flags, err := tr.Children(ctx, name+"/leader/failover/items")
		return err == nil && len(flags) == 0 && f0 == a && f1 == a && !exists(t, tr, name+"/sharding/2/failover")
	})
	pa.Cut()
	set(t, tr, tr.Delete(name+"/leader/sharding/processing", -1))
	set(t, tr, tr.Delete(name+"/sharding/2/disabled", -1))
	pc.Restore()
	back := time.Now()
	await.True(t, 3*sessionTimeout, "c registers again", func() bool { return exists(t, tr, name+"/instances/"+c) })
	awaitRuns(t, rec, 5*time.Second, "c catches up on item 2 of the fire", func(runs []run) bool {
		for _, x := range runs {
			if x.inst == c && x.item == 2 && x.fire == fire && x.start.After(back) && x.done {
				return true
			}
		}
		return false
	})
	pa.Restore()
	awaitRuns(t, rec, 10*time.Second, "a runs items 0 and 1 of the fire", func(runs []run) bool {
		return len(doneByFire(runs)[fire]) == 6 // 0, 1, 2 and a's own 6, 7, 8
	})
	close(releaseB)
	awaitRuns(t, rec, 5*time.Second, "b finishes the fire", func(runs []run) bool { return len(doneByFire(runs)[fire]) == 9 })

	setCron(t, tr, cfg, "* * * * * ?")
	resumed := time.Now().UnixMilli()
	var from, to int64
	awaitRuns(t, rec, 10*time.Second, "two more fires on the three instances", func(runs []run) bool {
		n := 0
		for f, items := range doneByFire(runs) {
			if f > resumed && len(items) == 9 {
				n++
				if from == 0 || f < from {
					from = f
				}
				to = max(to, f)
			}
		}
		return n >= 2
	})
	for _, x := range []*instance{ia, ib, ic} {
		x.stop(t)
	}

	runs := rec.snapshot()
	taken := map[int]bool{0: true, 1: true} // by a, as ZooKeeper showed before c came back
	byA := map[int]bool{}
	for _, x := range runs {
		if x.fire != fire || !taken[x.item] {
			continue
		}
		if x.inst == c && x.start.After(back) {
			t.Errorf("c, back, ran item %d of fire %s, which a had taken over", x.item, fmtFire(fire))
		}
		if x.inst == a && x.done {
			byA[x.item] = true
		}
	}
	if len(byA) != len(taken) {
		t.Errorf("a finished items %v of fire %s; want the items it had taken over, %v", byA, fmtFire(fire), taken)
	}
	checkOncePerFire(t, runs, 9, fire, fire)
	checkOncePerFire(t, runs, 9, from, to)
}

// An instance whose session is lost after its runs ended and before their completion was
// recorded does not run them again when it comes back: nobody else claimed them meanwhile (it
// runs alone), so it records the completion of its own claims on its new session.
func TestCompletionLostWithTheSessionIsRecordedOnReturn(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	tr := inspect(t, env)
	proxy := statetest.NewProxy(t, env.Servers[0])
	const name, c = "unrecorded", "127.0.0.1@-@c"
	cfg := simpleJob(name, "* * * * * ?", 2)
	var held atomic.Int64
	release := make(chan struct{})
	rec := &recorder{hold: func(_ string, _ int, fire int64) <-chan struct{} {
		if fire == held.Load() {
			return release
		}
		return nil
	}}
	ic := start(t, []string{proxy.Addr}, env.Namespace, c, cfg, rec)
	await.True(t, 5*time.Second, "c has both items", func() bool {
		return fmt.Sprint(assignment(t, tr, name, 2)) == fmt.Sprint(map[string][]int{c: {0, 1}})
	})
	fire := (time.Now().UnixMilli()+300)/1000*1000 + 1000
	held.Store(fire)
	awaitRuns(t, rec, 5*time.Second, "both items of the fire run", func(runs []run) bool {
		n := 0
		for _, x := range runs {
			if x.fire == fire {
				n++
			}
		}
		return n == 2
	})
	proxy.Cut()
	close(release) // the runs end, their work done, while their completion cannot be written
	awaitRuns(t, rec, 5*time.Second, "the runs end", func(runs []run) bool { return len(doneByFire(runs)[fire]) == 2 })
	await.True(t, 3*sessionTimeout, "c's session expires", func() bool { return !exists(t, tr, name+"/instances/"+c) })
	proxy.Restore()
	back := time.Now().UnixMilli()
	await.True(t, 3*sessionTimeout, "c registers again", func() bool { return exists(t, tr, name+"/instances/"+c) })
	awaitRuns(t, rec, 5*time.Second, "c runs a fire after its return", aFireAfter(back, 2))
	ic.stop(t)
	checkOncePerFire(t, rec.snapshot(), 2, fire, fire)
}
