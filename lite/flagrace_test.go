package lite_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// A survivor flags for failover only the items of instances that are gone when the flag is
// written: not those that a resharding hands, while it is flagging, to an instance that joined
// after it read the live instances (a rolling restart: b leaves, c replaces it). Flagged, they
// would be taken over while c lives, and c would skip them.
//
// a reads the instances (b gone) and the items (b's 0 and 1 still b's), and is held just before
// its first flag; meanwhile c joins and the leader, a, gives it items 0 and 1. A running marker
// the test holds on item 3 keeps a from resharding before that; c's own flags are held for the
// whole test, so that only a's, decided before c came, can be written.
func TestItemsReshardedToAnInstanceThatJoinedWhileFlaggingAreNotFlagged(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	tr := inspect(t, env)
	const name = "flagrace"
	const a, b, c = "127.0.0.1@-@a", "127.0.0.1@-@b", "127.0.0.1@-@c"
	cfg := simpleJob(name, never, 4)

	var mu sync.Mutex
	var took []string // the instances that attempted a taking
	taking := func(inst string) { mu.Lock(); took = append(took, inst); mu.Unlock() }
	var armed atomic.Bool
	flagging, resume, holdC := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var resumeOnce sync.Once
	release := func() { resumeOnce.Do(func() { close(resume) }) }

	startHooked(t, env.Servers, env.Namespace, a, cfg, &recorder{}, func(op string) {
		switch op {
		case "flag":
			if armed.CompareAndSwap(true, false) {
				close(flagging)
				<-resume
			}
		case "take":
			taking(a)
		}
	})
	t.Cleanup(release) // before a stops (cleanups run last first)
	await.True(t, 5*time.Second, "a leads", func() bool { d, _ := data(t, tr, name+"/leader/election/instance"); return d == a })
	ib := start(t, env.Servers, env.Namespace, b, cfg, &recorder{})
	await.True(t, 10*time.Second, "b has items 0 and 1, a 2 and 3", func() bool {
		return fmt.Sprint(assignment(t, tr, name, 4)) == fmt.Sprint(map[string][]int{a: {2, 3}, b: {0, 1}})
	})
	// While a run is marked, no resharding starts (reshardIfIdle): the items stay b's until the
	// test lets the leader go on.
	set(t, tr, tr.Create(name+"/sharding/3/running", []byte("test"), true))

	armed.Store(true)
	ib.stop(t)
	select {
	case <-flagging:
	case <-time.After(3 * sessionTimeout):
		t.Fatal("a did not flag b's items within 3 session timeouts of b's end")
	}
	startHooked(t, env.Servers, env.Namespace, c, cfg, &recorder{}, func(op string) {
		switch op {
		case "flag":
			<-holdC
		case "take":
			taking(c)
		}
	})
	t.Cleanup(func() { close(holdC) }) // before c stops
	await.True(t, 5*time.Second, "c registers", func() bool { return exists(t, tr, name+"/instances/"+c) })
	set(t, tr, tr.Delete(name+"/sharding/3/running", -1))
	set(t, tr, tr.Set(name+"/leader/sharding/necessary", nil, -1)) // wakes the leader to reshard
	want := fmt.Sprint(map[string][]int{a: {2, 3}, c: {0, 1}})
	await.True(t, 10*time.Second, "c has b's items 0 and 1", func() bool {
		return fmt.Sprint(assignment(t, tr, name, 4)) == want && !exists(t, tr, name+"/leader/sharding/necessary")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sh, err := tr.Get(ctx, name+"/leader/sharding")
	if err != nil {
		t.Fatalf("read the sharding: %v", err)
	}

	release() // a's flag goes now, decided on b's items
	// Its flagging over, a looks at the instances again, finds c, raises the resharding flag and
	// reshards (as the leader, after it has taken any flagged item): the sharding's version moves.
	await.True(t, 10*time.Second, "a has looked at the instances again and resharded", func() bool {
		n, err := tr.Get(ctx, name+"/leader/sharding")
		return err == nil && n.Version > sh.Version
	})
	flags, err := tr.Children(ctx, name+"/leader/failover/items")
	if err != nil {
		t.Fatalf("read the failover flags: %v", err)
	}
	for i := range 4 {
		if f, ok := data(t, tr, fmt.Sprintf("%s/sharding/%d/failover", name, i)); ok {
			t.Errorf("item %d was taken over by %s while its owner lives", i, f)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(flags) > 0 || len(took) > 0 {
		t.Errorf("items of live instances were flagged for failover: flags %v left, takings by %v; want none", flags, took)
	}
	if got := fmt.Sprint(assignment(t, tr, name, 4)); got != want {
		t.Errorf("the sharding is %s; want %s", got, want)
	}
}

// A flag whose instance lives (written while it was dead, or by a tool) is dropped, not taken:
// taken, the item would leave its live owner, which skips an item another instance took.
func TestAStaleFlagIsDroppedNotTaken(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	tr := inspect(t, env)
	const name = "stale"
	const a, b = "127.0.0.1@-@a", "127.0.0.1@-@b"
	cfg := simpleJob(name, never, 2)
	start(t, env.Servers, env.Namespace, a, cfg, &recorder{})
	await.True(t, 5*time.Second, "a leads", func() bool { d, _ := data(t, tr, name+"/leader/election/instance"); return d == a })
	start(t, env.Servers, env.Namespace, b, cfg, &recorder{})
	await.True(t, 10*time.Second, "each instance has an item", func() bool {
		return fmt.Sprint(assignment(t, tr, name, 2)) == fmt.Sprint(map[string][]int{a: {1}, b: {0}})
	})
	_, taken, err := tr.GetW(context.Background(), name+"/sharding/0/failover")
	if err != nil {
		t.Fatal(err)
	}
	set(t, tr, tr.Create(name+"/leader/failover/items/0", nil, false)) // b lives
	await.True(t, 10*time.Second, "the flag is gone", func() bool { _, ok := data(t, tr, name+"/leader/failover/items/0"); return !ok })
	select {
	case ev := <-taken:
		t.Fatalf("item 0 of the live b was taken over (%v)", ev.Type)
	default:
	}
	if got := fmt.Sprint(assignment(t, tr, name, 2)); got != fmt.Sprint(map[string][]int{a: {1}, b: {0}}) {
		t.Fatalf("assignment %s after the stale flag; want it unchanged", got)
	}
}
