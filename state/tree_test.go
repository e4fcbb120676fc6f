package state_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/state/statetest"
)

func dialTree(t *testing.T, env statetest.Env) *state.Tree {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := state.Dial(ctx, state.Config{Servers: env.Servers, Namespace: env.Namespace, SessionTimeout: 2 * time.Second, Logger: newLogger().Logger})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(tr.Close)
	return tr
}

// A Tree creates no scheduler layout, and Absent fails a transaction when its node exists.
func TestTreeLayoutFreeAndAbsent(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	tr := dialTree(t, env)
	ctx := ctxT(t)
	must(t, tr.Ensure(ctx, "job/leader/sharding"), "Ensure")
	names, err := tr.Children(ctx, "")
	must(t, err, "Children")
	if len(names) != 1 || names[0] != "job" {
		t.Errorf("namespace children = %v; want only [job]", names)
	}
	must(t, tr.Multi(ctx, tr.Absent("job/leader/sharding/processing"), tr.Create("job/a", []byte("1"), false)), "Multi with Absent of a missing node")
	must(t, tr.Do(ctx, tr.Create("job/leader/sharding/processing", nil, true)), "create processing")
	err = tr.Multi(ctx, tr.Absent("job/leader/sharding/processing"), tr.Create("job/b", nil, false))
	mustIs(t, err, state.ErrExists, "Multi with Absent of an existing node")
	if n, err := tr.Get(ctx, "job/b"); err != nil || n.Exists {
		t.Errorf("job/b after a failed multi: %+v, %v; want absent", n, err)
	}
}

// Lock excludes: a second session waits until the first releases, and a holder's session
// ending releases it too.
func TestLockExcludesAndReleasesWithTheSession(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	a, b := dialTree(t, env), dialTree(t, env)
	ctx := ctxT(t)
	release, err := a.Lock(ctx, "job/latch")
	must(t, err, "a: Lock")
	var held atomic.Bool
	got := make(chan func(), 1)
	go func() {
		r, err := b.Lock(ctx, "job/latch")
		if err != nil {
			t.Errorf("b: Lock: %v", err)
			close(got)
			return
		}
		held.Store(true)
		got <- r
	}()
	// b is waiting: its node is there, behind a's.
	await.True(t, 5*time.Second, "b waits in line", func() bool {
		names, err := a.Children(ctx, "job/latch")
		return err == nil && len(names) == 2
	})
	if held.Load() {
		t.Fatal("b took the latch while a held it")
	}
	release()
	select {
	case <-got: // b now holds it, and never releases it: its session ends below
	case <-time.After(5 * time.Second):
		t.Fatal("b did not get the latch within 5s of a's release")
	}
	c := dialTree(t, env)
	waiting := make(chan error, 1)
	go func() {
		r, err := c.Lock(ctx, "job/latch")
		if err == nil {
			r()
		}
		waiting <- err
	}()
	await.True(t, 5*time.Second, "c waits in line", func() bool {
		names, err := a.Children(ctx, "job/latch")
		return err == nil && len(names) == 2
	})
	b.Close() // the holder's session ends without releasing
	select {
	case err := <-waiting:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("c: Lock: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("c did not get the latch within 5s of the holder's session ending")
	}
}

// A release made while the connection is down takes effect once it is back: the session
// outlives a short loss, and with it the latch node, which would otherwise hold the latch for
// every other instance for as long as the holder lives.
func TestALatchReleasedDuringAConnectionLossIsReleased(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	proxy := statetest.NewProxy(t, env.Servers[0])
	ctx := ctxT(t)
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	a, err := state.Dial(dctx, state.Config{Servers: []string{proxy.Addr}, Namespace: env.Namespace, SessionTimeout: 20 * time.Second, Logger: newLogger().Logger})
	must(t, err, "Dial a")
	t.Cleanup(a.Close)
	b := dialTree(t, env)
	release, err := a.Lock(ctx, "job/latch")
	must(t, err, "a: Lock")
	proxy.Cut()
	released := make(chan struct{})
	go func() {
		release()
		close(released)
	}()
	// The release waits for the connection; the node is still there meanwhile.
	await.True(t, 5*time.Second, "the latch node still held while the connection is cut", func() bool {
		names, err := b.Children(ctx, "job/latch")
		return err == nil && len(names) == 1
	})
	proxy.Restore()
	select {
	case <-released:
	case <-time.After(15 * time.Second):
		t.Fatal("the release did not return once the connection was back")
	}
	lctx, lcancel := context.WithTimeout(ctx, 5*time.Second)
	defer lcancel()
	r, err := b.Lock(lctx, "job/latch")
	must(t, err, "b: Lock after a's release (a's session still alive)")
	r()
}

// Lock's counterpart of TestACandidateDoesNotWaitOnItsOwnEarlierNode: a latch node of the
// session made before its own (a lost create that reached the quorum late) is the one it
// holds, and the later one goes; else it waited on itself, and so did everyone after it.
func TestALatchDoesNotWaitOnItsOwnEarlierNode(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	a, b := dialTree(t, env), dialTree(t, env)
	ctx := ctxT(t)
	release, err := a.Lock(ctx, "job/latch")
	must(t, err, "a: Lock")
	var made atomic.Bool
	restore := state.SetBeforeLatchCreate(func(dir, prefix string) {
		if made.CompareAndSwap(false, true) {
			must(t, b.CreateLatchNode(dir, prefix), "b's earlier node")
		}
	})
	defer restore()
	got := make(chan error, 1)
	go func() {
		r, err := b.Lock(ctx, "job/latch")
		if err == nil {
			r()
		}
		got <- err
	}()
	await.True(t, 5*time.Second, "b waits in line with one node", func() bool {
		names, err := a.Children(ctx, "job/latch")
		return err == nil && len(names) == 2 && made.Load()
	})
	release()
	select {
	case err := <-got:
		must(t, err, "b: Lock")
	case <-time.After(5 * time.Second):
		t.Fatal("b did not get the latch within 5s of a's release")
	}
}

// GetMany reads every node asked for, in the order asked, missing ones as absent, each with
// what Get says of it (its count of children too), one request a node; a failure is an error
// and no nodes.
func TestTreeGetManyReadsEveryNodeInOrder(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	tr := dialTree(t, env)
	ctx := ctxT(t)
	must(t, tr.Ensure(ctx, "job/items"), "Ensure")
	const n = 300 // more than are read at a time
	var rels []string
	for i := range n {
		rel := fmt.Sprintf("job/items/%d", i)
		rels = append(rels, rel)
		switch i % 3 {
		case 0:
			must(t, tr.Do(ctx, tr.Create(rel, []byte(strconv.Itoa(i)), false)), "create")
		case 1:
			must(t, tr.Do(ctx, tr.Create(rel, []byte(strconv.Itoa(i)), true)), "create ephemeral")
			must(t, tr.Do(ctx, tr.Set(rel, []byte(strconv.Itoa(i)), 0)), "set")
		}
	}
	before := tr.RoundTrips()
	got, err := tr.GetMany(ctx, rels)
	must(t, err, "GetMany")
	if trips := tr.RoundTrips() - before; trips != n {
		t.Errorf("GetMany of %d nodes made %d requests; want %d", n, trips, n)
	}
	if len(got) != n {
		t.Fatalf("GetMany of %d nodes returned %d", n, len(got))
	}
	for i, g := range got {
		want, err := tr.Get(ctx, rels[i])
		must(t, err, "Get")
		if !reflect.DeepEqual(g, want) {
			t.Errorf("%s: GetMany read %+v; Get reads %+v", rels[i], g, want)
		}
		if g.Exists != (i%3 != 2) || (g.Exists && string(g.Data) != strconv.Itoa(i)) {
			t.Errorf("%s: read %+v; want %d, present unless %d %% 3 == 2", rels[i], g, i, i)
		}
	}
	if got[1].Owner != tr.SessionID() || got[1].Version != 1 {
		t.Errorf("an ephemeral node written once reads %+v; want this session's, version 1", got[1])
	}
	if dir, err := tr.GetMany(ctx, []string{"job/items"}); err != nil || dir[0].Children != 2*n/3 {
		t.Errorf("job/items reads %+v, %v; want %d children", dir, err, 2*n/3)
	}

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if got, err := tr.GetMany(cctx, rels); !errors.Is(err, context.Canceled) || got != nil {
		t.Errorf("GetMany on an ended context: %d nodes, %v; want none and context.Canceled", len(got), err)
	}
}

// A node watched again before it changed keeps the one watch: the client holds each watch
// until its node changes, and lite's loops watch several nodes at every turn though only one
// changed, so each turn left one more behind on the others. A change still wakes every holder,
// and the next look watches anew.
func TestTreeWatchesANodeOnceUntilItChanges(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	tr := dialTree(t, env)
	ctx := ctxT(t)
	must(t, tr.Ensure(ctx, "job/a"), "Ensure job/a")
	must(t, tr.Ensure(ctx, "job/list"), "Ensure job/list")
	var data, missing, list []state.Watch
	for range 50 {
		_, w, err := tr.GetW(ctx, "job/a")
		must(t, err, "GetW job/a")
		data = append(data, w)
		n, w, err := tr.GetW(ctx, "job/missing")
		must(t, err, "GetW job/missing")
		if n.Exists {
			t.Fatal("job/missing exists")
		}
		missing = append(missing, w)
		_, w, err = tr.ChildrenW(ctx, "job/list")
		must(t, err, "ChildrenW job/list")
		list = append(list, w)
	}
	if n := tr.ClientWatches(); n != 3 {
		t.Fatalf("after 50 looks at three unchanged nodes the client holds %d watches; want 3", n)
	}

	must(t, tr.Do(ctx, tr.Set("job/a", []byte("x"), -1)), "Set job/a")
	must(t, tr.Do(ctx, tr.Create("job/missing", nil, false)), "Create job/missing")
	must(t, tr.Do(ctx, tr.Create("job/list/item", nil, false)), "Create job/list/item")
	for name, ws := range map[string][]state.Watch{"job/a": data, "job/missing": missing, "job/list": list} {
		for k, w := range ws {
			select {
			case <-w:
			case <-time.After(10 * time.Second):
				t.Fatalf("look %d at %s: its watch did not fire on a change", k, name)
			}
		}
	}
	n, w, err := tr.GetW(ctx, "job/a")
	must(t, err, "GetW job/a after its change")
	if string(n.Data) != "x" {
		t.Fatalf("job/a reads %q after its change; want x", n.Data)
	}
	must(t, tr.Do(ctx, tr.Set("job/a", []byte("y"), -1)), "Set job/a again")
	select {
	case <-w:
	case <-time.After(10 * time.Second):
		t.Fatal("the watch set after job/a changed did not fire on its next change")
	}
}
