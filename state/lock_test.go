package state_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// Two goroutines of one session take a latch one after the other. Lock tells its own nodes by
// the session alone, so a second Lock of the session, without the Tree's own exclusion, took
// the first's node for its own and held the latch with it, and the first's release let other
// sessions in while the second was still inside.
func TestALatchExcludesTheGoroutinesOfOneSession(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	a, b := dialTree(t, env), dialTree(t, env)
	ctx := ctxT(t)
	release, err := a.Lock(ctx, "job/latch")
	must(t, err, "a: Lock")
	// While the first holds it, a second Lock of the session waits until its context ends.
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	r, err := a.Lock(wctx, "job/latch")
	cancel()
	if err == nil {
		r()
		t.Fatal("a second Lock of the session took the latch while the first held it")
	}
	mustIs(t, err, context.DeadlineExceeded, "a second Lock of the session while the first holds the latch")
	second := make(chan func(), 1)
	go func() {
		r, err := a.Lock(ctx, "job/latch")
		if err != nil {
			t.Errorf("a: second Lock: %v", err)
			close(second)
			return
		}
		second <- r
	}()
	release()
	var release2 func()
	select {
	case release2 = <-second:
	case <-time.After(5 * time.Second):
		t.Fatal("the second Lock of the session did not get the latch within 5s of the first's release")
	}
	if release2 == nil {
		return
	}
	// The second holds a node of its own: another session waits for its release.
	other := make(chan error, 1)
	go func() {
		r, err := b.Lock(ctx, "job/latch")
		if err == nil {
			r()
		}
		other <- err
	}()
	await.True(t, 5*time.Second, "b waits in line behind the second", func() bool {
		names, err := a.Children(ctx, "job/latch")
		return err == nil && len(names) == 2
	})
	select {
	case err := <-other:
		t.Fatalf("b took the latch while the session's second Lock held it (%v)", err)
	default:
	}
	release2()
	select {
	case err := <-other:
		if err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("b: Lock: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("b did not get the latch within 5s of the second's release")
	}
}
