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
