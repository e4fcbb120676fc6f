package state_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// A leader's fire with misfire ("ready count + 1") is in flight when the connection breaks:
// whether ZooKeeper applied it (the reply was lost) or never saw it (the request was lost), the
// fire returns no error once the client has reconnected, and the count grew by exactly one.
// Without the write receipt the first case cannot be told from the second: the fire fails, and
// a blind retry would count it twice.
func TestALeadersWriteWhoseAnswerIsLostIsAppliedOnce(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		lose func(*statetest.Proxy)
	}{
		{"reply lost", (*statetest.Proxy).DropReplies},
		{"request lost", (*statetest.Proxy).DropRequests},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env := statetest.StartZooKeeper(t)
			proxy := statetest.NewProxy(t, env.Servers[0])
			ctx := ctxT(t)
			other := openPlain(t, env)
			s := openPlain(t, statetest.Env{Servers: []string{proxy.Addr}, Namespace: env.Namespace},
				func(c *state.Config) { c.SessionTimeout = 20 * time.Second })
			l := lead(t, ctx, s, "a:8899")
			mctx, cancel := context.WithCancel(ctx)
			t.Cleanup(cancel)
			leader, err := l.Store().Mirror(mctx, nil)
			must(t, err, "Mirror")
			must(t, leader.AddReady(ctx, "job", true), "first fire")

			sent := leader.Multis()
			tc.lose(proxy)
			done := make(chan error, 1)
			go func() { done <- leader.AddReady(ctx, "job", true) }()
			await.True(t, 10*time.Second, "the second fire sent", func() bool { return leader.Multis() > sent })
			if tc.name == "reply lost" {
				await.True(t, 10*time.Second, "ZooKeeper applied the second fire", func() bool { return readyCount(t, other) == 2 })
			}
			proxy.Cut()
			await.True(t, 10*time.Second, "the leader's client saw the connection break", func() bool {
				return leader.AwaitSession(cancelledCtx()) != nil
			})
			proxy.Restore()
			select {
			case err := <-done:
				must(t, err, "the second fire, once reconnected")
			case <-time.After(30 * time.Second):
				t.Fatal("the second fire did not return after the connection came back")
			}
			if n := readyCount(t, other); n != 2 {
				t.Fatalf("ZooKeeper's ready count is %d; want 2: each fire counted exactly once", n)
			}
			r, err := leader.Ready(ctx)
			must(t, err, "the model's ready queue")
			if fmt.Sprint(r) != fmt.Sprint([]state.ReadyEntry{{JobName: "job", Count: 2, Version: 1}}) {
				t.Fatalf("the model's ready queue is %+v; want job × 2, as ZooKeeper", r)
			}
		})
	}
}

func readyCount(t *testing.T, s *state.Store) int {
	t.Helper()
	r, err := s.Ready(context.Background())
	must(t, err, "read the ready queue")
	if len(r) != 1 {
		return 0
	}
	return r[0].Count
}

func cancelledCtx() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

// ZooKeeper stays down for longer than the session timeout: the term ends, but the session
// survives the restart, and the instance is elected again with the very election node it still
// holds, while the old term's model has not yet let go of its write receipt. The new term's
// first fire is lost on its way to the server. Its receipt must not answer with the old term's
// number: the fire is sent again and is in ZooKeeper as in the model, rather than reported
// written while ZooKeeper never got it. And the old term's model, whose fence still passes
// (same node, same version), can no longer write behind the new model's back.
func TestALeaderElectedAgainWithTheSameNodeDoesNotTakeTheOldTermsReceiptForItsOwn(t *testing.T) {
	t.Parallel()
	srv := statetest.StartDedicated(t)
	env := statetest.Env{Servers: []string{srv.Addr}, Namespace: "reelected"}
	proxy := statetest.NewProxy(t, srv.Addr)
	ctx := ctxT(t)
	s := openPlain(t, statetest.Env{Servers: []string{proxy.Addr}, Namespace: env.Namespace},
		func(c *state.Config) { c.SessionTimeout = 4 * time.Second })

	first := lead(t, ctx, s, "a:8899")
	mctx1, cancel1 := context.WithCancel(ctx)
	t.Cleanup(cancel1) // the old term's model lives on into the next term
	old, err := first.Store().Mirror(mctx1, nil)
	must(t, err, "the first term's model")
	must(t, old.AddReady(ctx, "a", true), "the first term's fire")

	srv.Stop()
	select {
	case <-first.Lost():
		mustIs(t, first.Err(), state.ErrDisconnectedTooLong, "why the first term ended")
	case <-time.After(30 * time.Second):
		t.Fatal("the first term did not end while ZooKeeper was down")
	}
	if err := srv.Start(); err != nil {
		t.Fatalf("restart ZooKeeper: %v", err)
	}
	await.True(t, 20*time.Second, "the client is back", func() bool { c, _ := s.SessionState(); return c })
	if _, expiries := s.SessionState(); expiries != 0 {
		t.Fatalf("the session expired across the restart; the test needs it to survive")
	}
	second := lead(t, ctx, s, "a:8899")
	if second.Path() != first.Path() {
		t.Fatalf("the second term leads with %s; the test needs the first term's %s", second.Path(), first.Path())
	}
	mctx2, cancel2 := context.WithCancel(ctx)
	t.Cleanup(cancel2)
	leader, err := second.Store().Mirror(mctx2, nil)
	must(t, err, "the second term's model")

	sent := leader.Multis()
	proxy.DropRequests()
	done := make(chan error, 1)
	go func() { done <- leader.AddReady(ctx, "b", true) }()
	await.True(t, 10*time.Second, "the second term's first fire sent", func() bool { return leader.Multis() > sent })
	proxy.Cut()
	await.True(t, 10*time.Second, "the client saw the connection break", func() bool {
		return leader.AwaitSession(cancelledCtx()) != nil
	})
	proxy.Restore()
	select {
	case err := <-done:
		must(t, err, "the second term's first fire, once reconnected")
	case <-time.After(30 * time.Second):
		t.Fatal("the second term's first fire did not return after the connection came back")
	}
	direct := openPlain(t, env)
	inZK, err := direct.ReadyOf(ctx, "b")
	must(t, err, "ReadyOf in ZooKeeper")
	inModel, err := leader.ReadyOf(ctx, "b")
	must(t, err, "ReadyOf in the model")
	if inZK.Count != 1 || inModel.Count != 1 {
		t.Fatalf("after one fire ZooKeeper counts %d and the model %d; want 1 in both", inZK.Count, inModel.Count)
	}

	mustIs(t, old.AddReady(ctx, "c", true), state.ErrNotLeader, "a write of the old term's model")
	if r, err := direct.ReadyOf(ctx, "c"); err != nil || r.Count != 0 {
		t.Fatalf("ZooKeeper counts %d for the old model's refused write (%v); want 0", r.Count, err)
	}
}
