package state_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/state/statetest"
)

const sessionTimeout = time.Second

func withTimeout(c *state.Config) { c.SessionTimeout = sessionTimeout }

// campaign runs Campaign in the background and returns a channel for its result.
func campaign(ctx context.Context, s *state.Store, addr string) <-chan *state.Leadership {
	ch := make(chan *state.Leadership, 1)
	go func() {
		l, err := s.Campaign(ctx, addr)
		if err != nil {
			close(ch)
			return
		}
		ch <- l
	}()
	return ch
}

func lead(t *testing.T, ctx context.Context, s *state.Store, addr string) *state.Leadership {
	t.Helper()
	l, err := s.Campaign(ctx, addr)
	must(t, err, "Campaign "+addr)
	return l
}

func awaitLeader(t *testing.T, ch <-chan *state.Leadership, within time.Duration, who string) *state.Leadership {
	t.Helper()
	select {
	case l, ok := <-ch:
		if !ok {
			t.Fatalf("%s stopped campaigning", who)
		}
		return l
	case <-time.After(within):
		t.Fatalf("%s did not become leader within %v", who, within)
	}
	return nil
}

func TestSecondCandidateLeadsWithinOneSessionTimeoutOfTheFirstSessionEnding(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	a, b := open(t, env, withTimeout), open(t, env, withTimeout)
	ctx := ctxT(t)
	la := lead(t, ctx, a, "a:8899")
	if addr, err := b.Leader(ctx); err != nil || addr != "a:8899" {
		t.Fatalf("Leader() = %q, %v; want a:8899", addr, err)
	}
	bch := campaign(ctx, b, "b:8899")
	await.True(t, 5*time.Second, "b's candidacy visible", func() bool { return candidates(t, env) == 2 })
	select {
	case <-bch:
		t.Fatal("b became leader while a leads")
	default:
	}
	a.Close() // a's session ends
	lb := awaitLeader(t, bch, sessionTimeout, "b")
	if addr, _ := b.Leader(ctx); addr != "b:8899" {
		t.Fatalf("Leader() = %q after failover; want b:8899", addr)
	}
	await.True(t, 2*sessionTimeout, "a's leadership reported lost", func() bool {
		select {
		case <-la.Lost():
			return true
		default:
			return false
		}
	})
	lb.Resign(ctx)
	if _, err := b.Leader(ctx); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("Leader() after the only leader resigned: %v; want ErrNotFound", err)
	}
}

// A server may give a session a shorter timeout than the one asked for (its
// maxSessionTimeout): the server expires the session after the one it gave, so a leadership
// that counted the one asked for would outlive its session by the difference, a minute here.
func TestALeadershipEndsAfterTheSessionTimeoutTheServerGave(t *testing.T) {
	t.Parallel()
	const given = 2 * time.Second
	srv := statetest.StartDedicatedConfig(t, fmt.Sprintf("maxSessionTimeout=%d", given.Milliseconds()))
	a := open(t, statetest.Env{Servers: []string{srv.Addr}, Namespace: "given"}, func(c *state.Config) { c.SessionTimeout = time.Minute })
	ctx := ctxT(t)
	la := lead(t, ctx, a, "a:1")

	srv.Stop() // the client notices at once: its connection is refused
	select {
	case <-la.Lost():
	case <-time.After(10 * given):
		t.Fatalf("the leadership lasted %v of a server outage; the server gave its session %v", 10*given, given)
	}
	mustIs(t, la.Err(), state.ErrDisconnectedTooLong, "why the leadership ended")
}

func TestDeposedLeaderWhoseSessionExpiredIsFenced(t *testing.T) {
	t.Parallel()
	// Its connections cut, a's client notices at once; its requests dropped (a silent
	// partition), only after two thirds of a session timeout without an answer. a gives up
	// its leadership a session timeout after it noticed; a silent partition may let b lead
	// before that (see Leadership.watch), and a's writes are refused all the same.
	t.Run("connections cut", func(t *testing.T) { deposedLeaderIsFenced(t, (*statetest.Proxy).Cut, 2*sessionTimeout) })
	t.Run("requests dropped", func(t *testing.T) { deposedLeaderIsFenced(t, (*statetest.Proxy).DropRequests, 3*sessionTimeout) })
}

func deposedLeaderIsFenced(t *testing.T, partition func(*statetest.Proxy), givesUpWithin time.Duration) {
	env := statetest.StartZooKeeper(t)
	proxy := statetest.NewProxy(t, env.Servers[0])
	a := open(t, statetest.Env{Servers: []string{proxy.Addr}, Namespace: env.Namespace}, withTimeout)
	b := open(t, env, withTimeout)
	ctx := ctxT(t)

	la := lead(t, ctx, a, "a:1")
	must(t, la.Store().AddReady(ctx, "job", true), "leader's fenced write")
	bch := campaign(ctx, b, "b:1")
	expired := a.SessionExpired()

	partition(proxy) // a is partitioned from ZooKeeper; the server expires its session
	select {
	case <-la.Lost():
	case <-time.After(givesUpWithin):
		t.Fatalf("a partitioned leader did not give up leadership within %v", givesUpWithin)
	}
	if !errors.Is(la.Err(), state.ErrDisconnectedTooLong) {
		t.Fatalf("a's leadership ended with %v; want ErrDisconnectedTooLong", la.Err())
	}
	// The server needs one session timeout to expire a's session, then b leads at once.
	lb := awaitLeader(t, bch, 2*sessionTimeout+time.Second, "b")
	if err := la.Store().AddReady(ctx, "job", true); err == nil {
		t.Fatal("the deposed leader completed a fenced write while partitioned")
	}

	proxy.Restore()
	select {
	case <-expired:
	case <-time.After(10 * time.Second):
		t.Fatal("the session expiry was not surfaced after reconnecting")
	}
	// The client is still opening its new session: until then the write fails as unavailable;
	// once connected it must fail as fenced. No attempt may succeed.
	var err error
	await.True(t, 10*time.Second, "the deposed leader reconnected", func() bool {
		err = la.Store().AddReady(ctx, "job", true)
		if err == nil {
			t.Fatal("the deposed leader completed a fenced write after its session expired")
		}
		return !errors.Is(err, state.ErrUnavailable)
	})
	mustIs(t, err, state.ErrNotLeader, "the deposed leader's fenced write after its session expired")
	must(t, lb.Store().AddReady(ctx, "job", true), "the new leader's fenced write")
	if r, _ := b.ReadyOf(ctx, "job"); r.Count != 2 {
		t.Fatalf("ready count = %d; want 2 (the old leader's write before the partition and the new leader's)", r.Count)
	}

	// a rejoins the election with a new session and leads once b steps down.
	ach := campaign(ctx, a, "a:1")
	lb.Resign(ctx)
	la2 := awaitLeader(t, ach, 5*time.Second, "a, rejoining")
	must(t, la2.Store().AddReady(ctx, "job", true), "the re-elected leader's fenced write")
	mustIs(t, lb.Store().AddReady(ctx, "job", true), state.ErrNotLeader, "a resigned leader's fenced write")
}

func TestDeposedLeaderWhoseNodeWasDeletedIsFenced(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	a, b := open(t, env, withTimeout), open(t, env, withTimeout)
	ctx := ctxT(t)
	la := lead(t, ctx, a, "a:1")
	bch := campaign(ctx, b, "b:1")

	raw, _, err := zk.Connect(env.Servers, sessionTimeout, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	must(t, err, "zk.Connect")
	defer raw.Close()
	await.True(t, 10*time.Second, "operator's delete of the election node", func() bool {
		return raw.Delete(la.Path(), -1) == nil
	})

	select {
	case <-la.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("leadership not lost after its election node was deleted")
	}
	if !errors.Is(la.Err(), state.ErrElectionNodeGone) {
		t.Fatalf("leadership ended with %v; want ErrElectionNodeGone", la.Err())
	}
	mustIs(t, la.Store().AddReady(ctx, "job", true), state.ErrNotLeader, "fenced write of the deposed leader")
	lb := awaitLeader(t, bch, 5*time.Second, "b")
	must(t, lb.Store().AddReady(ctx, "job", true), "fenced write of the new leader")
}

// A leader whose election node an operator set, or whose write receipt was deleted, is fenced:
// every write is refused. It must know it is no longer the leader, so that it campaigns again
// (and leads on a fresh fence) instead of leading on, stuck, with every write refused.
func TestALeaderRefusedByItsFenceLosesTheLeadership(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	raw, _, err := zk.Connect(env.Servers, sessionTimeout, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	must(t, err, "zk.Connect")
	defer raw.Close()
	lost := func(t *testing.T, l *state.Leadership, want error) {
		t.Helper()
		select {
		case <-l.Lost():
		case <-time.After(5 * time.Second):
			t.Fatal("leadership not lost")
		}
		if !errors.Is(l.Err(), want) {
			t.Fatalf("leadership ended with %v; want %v", l.Err(), want)
		}
	}
	t.Run("election node set", func(t *testing.T) {
		a := open(t, env, withTimeout)
		ctx := ctxT(t)
		l := lead(t, ctx, a, "a:1")
		await.True(t, 10*time.Second, "operator's set of the election node", func() bool {
			_, err := raw.Set(l.Path(), []byte("someone:1"), -1)
			return err == nil
		})
		lost(t, l, state.ErrElectionNodeChanged)
		mustIs(t, l.Store().AddReady(ctx, "job", true), state.ErrNotLeader, "fenced write")
		again := lead(t, ctx, a, "a:1") // the same session's node, on a fresh fence
		must(t, again.Store().AddReady(ctx, "job", true), "write after campaigning again")
		again.Resign(ctx)
	})
	t.Run("write receipt deleted", func(t *testing.T) {
		a := open(t, env, withTimeout)
		ctx := ctxT(t)
		l := lead(t, ctx, a, "a:2")
		m, err := l.Store().Mirror(ctx, nil)
		must(t, err, "Mirror")
		must(t, m.AddReady(ctx, "job2", true), "write through the model")
		children, _, err := raw.Children("/" + env.Namespace + "/ha")
		must(t, err, "list /ha")
		deleted := 0
		for _, c := range children {
			if len(c) > 8 && c[:8] == "receipt-" {
				must(t, raw.Delete("/"+env.Namespace+"/ha/"+c, -1), "delete "+c)
				deleted++
			}
		}
		if deleted != 1 {
			t.Fatalf("%d write receipts under /ha (%v); want 1", deleted, children)
		}
		mustIs(t, m.AddReady(ctx, "job2", true), state.ErrNotLeader, "write without its receipt")
		lost(t, l, state.ErrNotLeader)
		l.Resign(ctx)
	})
}

func TestCampaignStopsWithItsContext(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	a, b := open(t, env, withTimeout), open(t, env, withTimeout)
	ctx := ctxT(t)
	la := lead(t, ctx, a, "a:1")
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := b.Campaign(cctx, "b:1"); done <- err }()
	await.True(t, 5*time.Second, "b's candidacy visible", func() bool {
		return candidates(t, env) == 2
	})
	cancel()
	select {
	case err := <-done:
		mustIs(t, err, context.Canceled, "Campaign after cancel")
	case <-time.After(5 * time.Second):
		t.Fatal("Campaign did not return after its context was cancelled")
	}
	await.True(t, 5*time.Second, "b's election node removed", func() bool { return candidates(t, env) == 1 })
	la.Resign(ctx)
}

func candidates(t *testing.T, env statetest.Env) int {
	raw, _, err := zk.Connect(env.Servers, sessionTimeout, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	must(t, err, "zk.Connect")
	defer raw.Close()
	names, _, err := raw.Children("/" + env.Namespace + "/ha/election")
	if err != nil {
		return -1
	}
	return len(names)
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}

// Confirm is a check of the leadership by the quorum: it holds while the election node is
// ours, and says ErrNotLeader the moment the node is gone — even before the Leadership's own
// watch has noticed, which is what keeps a leader from acting on Mesos on a stale word.
func TestConfirmChecksTheElectionNodeWithTheQuorum(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	a := open(t, env, withTimeout)
	ctx := ctxT(t)
	la := lead(t, ctx, a, "a:1")
	must(t, la.Confirm(ctx), "Confirm of a live leadership")

	raw, _, err := zk.Connect(env.Servers, sessionTimeout, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	must(t, err, "zk.Connect")
	defer raw.Close()
	await.True(t, 10*time.Second, "operator's delete of the election node", func() bool {
		return raw.Delete(la.Path(), -1) == nil
	})
	mustIs(t, la.Confirm(ctx), state.ErrNotLeader, "Confirm right after the node was deleted")
	<-la.Lost()
	mustIs(t, la.Confirm(ctx), state.ErrNotLeader, "Confirm once the leadership ended")
}

// A candidate whose create's answer was lost may find, after it created another node, that
// the first was made too (it reached the quorum after the look for it): a node of its own
// session before its own. It must not wait on it — it would for ever, and once that node is
// the lowest nobody would lead. Here the lost create is played by a node of b's session made
// just before b's create.
func TestACandidateDoesNotWaitOnItsOwnEarlierNode(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	a, b := open(t, env, withTimeout), open(t, env, withTimeout)
	ctx := ctxT(t)
	la := lead(t, ctx, a, "a:8899")
	var made atomic.Bool
	restore := state.SetBeforeElectionCreate(func() {
		if made.CompareAndSwap(false, true) {
			must(t, b.CreateElectionNode("b:8899"), "b's earlier node")
		}
	})
	defer restore()
	bch := campaign(ctx, b, "b:8899")
	await.True(t, 5*time.Second, "b waits behind a", func() bool { return made.Load() && candidates(t, env) >= 2 })
	la.Resign(ctx)
	awaitLeader(t, bch, 5*time.Second, "b")
	if addr, err := b.Leader(ctx); err != nil || addr != "b:8899" {
		t.Fatalf("Leader() = %q, %v; want b:8899", addr, err)
	}
}

// A server may give a session a longer timeout than the one asked for (its minSessionTimeout):
// a connection down for longer than the one asked for, and shorter than the one given, is
// waited out, the session and its leadership living on, not reported unavailable.
func TestAwaitSessionWaitsForTheSessionTimeoutTheServerGave(t *testing.T) {
	t.Parallel()
	srv := statetest.StartDedicatedConfig(t, "minSessionTimeout=8000")
	proxy := statetest.NewProxy(t, srv.Addr)
	a := open(t, statetest.Env{Servers: []string{proxy.Addr}, Namespace: "given"}, func(c *state.Config) { c.SessionTimeout = 2 * time.Second })
	ctx := ctxT(t)
	la := lead(t, ctx, a, "a:1")

	proxy.Cut()
	await.True(t, 10*time.Second, "the client noticed the cut", func() bool { connected, _ := a.SessionState(); return !connected })
	waited := make(chan error, 1)
	go func() { waited <- a.AwaitSession(ctx) }()
	cut := time.NewTimer(4 * time.Second) // twice the timeout asked for, half the one given
	select {
	case err := <-waited:
		t.Fatalf("AwaitSession during a cut shorter than the session's timeout: %v; want it to wait", err)
	case <-cut.C:
	}
	proxy.Restore()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("AwaitSession after the connection came back: %v; want nil", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("AwaitSession did not return within 20 s of the connection coming back")
	}
	select {
	case <-la.Lost():
		t.Fatalf("the leadership ended (%v) while its session lived", la.Err())
	default:
	}
}
