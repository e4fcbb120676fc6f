package lite_test

import (
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

// startHooked is start with a hook called just before the instance sends a claim or a taking.
func startHooked(t *testing.T, servers []string, ns, id string, cfg lite.JobConfig, j any, hook func(op string)) *instance {
	t.Helper()
	return startWith(t, servers, ns, id, cfg, j, sessionTimeout, hook, nil)
}

// lostAnswer is a transaction whose answer the proxy throws away (see loseAnswer).
type lostAnswer struct {
	sent  chan struct{} // closed when it is about to be sent
	syncs atomic.Int32  // syncs the instance sent since
}

// hook is the instance's hook (lite.SetBeforeMulti): the first time op is about to be sent once
// armed, the proxy throws the server's replies away and the test is told (it then waits for the
// transaction to show in ZooKeeper and breaks the connection: the transaction is made, its
// answer lost).
func (l *lostAnswer) hook(p *statetest.Proxy, op string, armed *atomic.Bool) func(string) {
	return func(o string) {
		if o == op && armed.CompareAndSwap(true, false) {
			p.DropReplies()
			close(l.sent)
		}
	}
}

// observe counts the syncs sent after the transaction (lite.SetObserveOp).
func (l *lostAnswer) observe(op string, _ time.Duration) {
	select {
	case <-l.sent:
		if op == "sync" {
			l.syncs.Add(1)
		}
	default:
	}
}

// lostAnswerSession is the session timeout of an instance whose answer is lost. From the hook
// to the cut the proxy drops every reply, pings' too, and the session must outlive that (the
// test's reads of the transaction included) for the answer to be lost rather than the session:
// with sessionTimeout, a loaded machine (tests side by side) sometimes took longer.
const lostAnswerSession = 3 * sessionTimeout

// loseAnswer starts instance id through the proxy p with a lostAnswer armed for op.
func loseAnswer(t *testing.T, p *statetest.Proxy, ns, id, op string, cfg lite.JobConfig, j any, armed *atomic.Bool) (*instance, *lostAnswer) {
	t.Helper()
	l := &lostAnswer{sent: make(chan struct{})}
	return startWith(t, []string{p.Addr}, ns, id, cfg, j, lostAnswerSession, l.hook(p, op, armed), l.observe), l
}

// readBackAfterSync checks that the instance synced before it read the transaction back: the
// connection may be to another server of an ensemble, which may not have applied it yet.
func (l *lostAnswer) readBackAfterSync(t *testing.T) {
	t.Helper()
	if l.syncs.Load() == 0 {
		t.Error("the transaction whose answer was lost was read back without a sync")
	}
}

// breakConnection closes the proxied connection once made holds (the transaction whose reply
// the proxy drops has been applied) and lets the client reconnect to its session at once.
func breakConnection(t *testing.T, p *statetest.Proxy, sent <-chan struct{}, made func() bool) {
	t.Helper()
	select {
	case <-sent:
	case <-time.After(10 * time.Second):
		t.Fatal("the transaction whose answer is to be lost was not sent within 10s")
	}
	await.True(t, 5*time.Second, "the transaction is applied", made)
	p.Cut()
	p.Restore()
}

func record(t *testing.T, tr *state.Tree, rel string) (fire int64, done bool) {
	t.Helper()
	d, ok := data(t, tr, rel)
	if !ok {
		t.Fatalf("%s is missing", rel)
	}
	var r struct {
		Fire int64 `json:"fire"`
		Done bool  `json:"done"`
	}
	if err := json.Unmarshal([]byte(d), &r); err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	return r.Fire, r.Done
}

// A claim that ZooKeeper made but whose answer was lost with the connection (the session
// lives) is read back and its items run: its markers name the instance, so nobody else would.
func TestClaimWhoseAnswerWasLostRunsItsItems(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	tr := inspect(t, env)
	p := statetest.NewProxy(t, env.Servers[0])
	const name = "lostclaim"
	cfg := simpleJob(name, "* * * * * ?", 2)
	rec := &recorder{work: 50 * time.Millisecond}
	var armed atomic.Bool
	a, lost := loseAnswer(t, p, env.Namespace, "127.0.0.1@-@a", "claim", cfg, rec, &armed)
	await.True(t, 10*time.Second, "a owns both items", func() bool { return len(assignment(t, tr, name, 2)["127.0.0.1@-@a"]) == 2 })
	armed.Store(true)
	breakConnection(t, p, lost.sent, func() bool { return exists(t, tr, name+"/sharding/0/running") })
	fire, _ := record(t, tr, name+"/sharding/0")
	awaitRuns(t, rec, 3*sessionTimeout, "both items of the fire whose claim's answer was lost run", func(runs []run) bool {
		return len(doneByFire(runs)[fire]) == 2
	})
	lost.readBackAfterSync(t)
	awaitRuns(t, rec, 5*time.Second, "both items of a later fire run", aFireAfter(fire, 2))
	a.stop(t)
	checkOncePerFire(t, rec.snapshot(), 2, fire, fire)
}

// A taking of a failed-over item that ZooKeeper made but whose answer was lost (the flag gone,
// the failover node naming the taker) is read back and the item run: its owner is dead, and
// nobody else takes an item whose taker lives. c, which gets the item at the next sharding,
// is kept busy meanwhile so that b is the taker, and would not run it either (it was taken).
func TestTakingWhoseAnswerWasLostRunsTheItem(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	tr := inspect(t, env)
	p := statetest.NewProxy(t, env.Servers[0])
	const name = "losttake"
	const a, b, c = "127.0.0.1@-@a", "127.0.0.1@-@b", "127.0.0.1@-@c"
	cfg := simpleJob(name, "* * * * * ?", 3)
	var holdA, holdC atomic.Bool
	forever, releaseC := make(chan struct{}), make(chan struct{})
	rec := &recorder{work: 50 * time.Millisecond, hold: func(inst string, item int, fire int64) <-chan struct{} {
		switch {
		case inst == a && holdA.Load():
			return forever // until a stops
		case inst == c && holdC.Load():
			return releaseC
		}
		return nil
	}}
	var armed atomic.Bool
	ia := start(t, env.Servers, env.Namespace, a, cfg, rec)
	await.True(t, 5*time.Second, "a leads", func() bool { d, _ := data(t, tr, name+"/leader/election/instance"); return d == a })
	_, lost := loseAnswer(t, p, env.Namespace, b, "take", cfg, rec, &armed)
	start(t, env.Servers, env.Namespace, c, cfg, rec)
	want := map[string][]int{c: {0}, b: {1}, a: {2}}
	await.True(t, 10*time.Second, "the sharding "+fmt.Sprint(want), func() bool { return fmt.Sprint(assignment(t, tr, name, 3)) == fmt.Sprint(want) })
	held := time.Now()
	holdA.Store(true)
	holdC.Store(true)
	var fire int64
	awaitRuns(t, rec, 5*time.Second, "a and c are held in runs", func(runs []run) bool {
		var ha, hc bool
		for _, x := range runs {
			if x.start.After(held) && !x.done {
				if x.inst == a && x.item == 2 {
					ha, fire = true, x.fire
				}
				hc = hc || x.inst == c
			}
		}
		return ha && hc
	})
	armed.Store(true)
	ia.stop(t) // its run of item 2 is interrupted, its node goes
	breakConnection(t, p, lost.sent, func() bool {
		d, ok := data(t, tr, name+"/sharding/2/failover")
		return ok && d == b && !exists(t, tr, name+"/leader/failover/items/2")
	})
	awaitRuns(t, rec, 3*sessionTimeout, "b runs item 2 for the fire a did not finish", func(runs []run) bool {
		return doneByFire(runs)[fire][2] == 1 && func() bool {
			for _, x := range runs {
				if x.inst == b && x.item == 2 && x.fire == fire && x.done {
					return true
				}
			}
			return false
		}()
	})
	lost.readBackAfterSync(t)
	close(releaseC)
	for f, items := range doneByFire(rec.snapshot()) {
		for item, n := range items {
			if n > 1 {
				t.Errorf("fire %s: item %d finished %d times", fmtFire(f), item, n)
			}
		}
	}
}
