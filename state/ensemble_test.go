package state_test

import (
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// A Store given all three members of an ensemble survives the death of the member it is
// connected to: its session moves to another member within the session timeout, without
// expiring, and reads and writes go on (what was written before is there).
//
// A read made at the very moment of the kill is made again once the client has reconnected; a
// write outside a leader's model may still fail with ErrUnavailable, for its outcome is unknown.
func TestAStoreSurvivesTheKillOfItsMember(t *testing.T) {
	t.Parallel()
	const timeout = 3 * time.Second
	e := statetest.StartEnsemble(t, 3)
	s := open(t, statetest.Env{Servers: e.Servers(), Namespace: "ensemble"}, func(c *state.Config) { c.SessionTimeout = timeout })
	ctx := ctxT(t)
	expired := s.SessionExpired()
	must(t, s.CreateApp(ctx, testApp("before")), "CreateApp before the kill")
	victim := e.Index(s.Server())
	if victim < 0 {
		t.Fatalf("the store is connected to %q, not a member of %v", s.Server(), e.Servers())
	}
	wasLeader := victim == e.Leader()
	e.Member(victim).Stop()
	killed := time.Now()

	await.True(t, timeout, "the client moves off the killed member", func() bool { return e.Index(s.Server()) != victim })
	must(t, s.AwaitSession(ctx), "AwaitSession after the kill")
	must(t, s.CreateApp(ctx, testApp("after")), "CreateApp after the kill")
	apps, err := s.Apps(ctx)
	must(t, err, "Apps after the kill")
	if len(apps) != 2 {
		t.Fatalf("after the kill the store reads %d apps; want 2", len(apps))
	}
	t.Logf("member %d (quorum leader: %v) killed; a write and a read done %v later, through member %d",
		victim, wasLeader, time.Since(killed).Round(time.Millisecond), e.Index(s.Server()))
	select {
	case <-expired:
		t.Fatal("the session expired")
	default:
	}
}

// A leader whose only reachable server is cut off from the quorum cannot confirm its leadership
// there, although that server still shows its election node: the quorum has expired its
// session and elected another, whose confirmation holds. (The member is isolated silently, as
// a network partition does, so it goes on serving its clients from its stale state until its
// own timeout, 10 s here.)
func TestAServerCutOffFromTheQuorumConfirmsNoLeadership(t *testing.T) {
	t.Parallel()
	tm := statetest.Timing{Tick: 500 * time.Millisecond, InitLimit: 20, SyncLimit: 20}
	e := statetest.StartPartitionableEnsemble(t, 3, tm)
	ctx := ctxT(t)
	x := (e.Leader() + 1) % 3 // a follower
	var others []string
	for i, addr := range e.Servers() {
		if i != x {
			others = append(others, addr)
		}
	}
	ns := "stale"
	b := openPlain(t, statetest.Env{Servers: []string{e.Servers()[x]}, Namespace: ns}, func(c *state.Config) { c.SessionTimeout = 1500 * time.Millisecond })
	a := openPlain(t, statetest.Env{Servers: others, Namespace: ns}, func(c *state.Config) { c.SessionTimeout = 5 * time.Second })
	lb := lead(t, ctx, b, "b:1")
	must(t, lb.Confirm(ctx), "the first leader's Confirm before the partition")
	aLeads := campaign(ctx, a, "a:1")

	e.Isolate(x)
	t.Logf("member %d isolated from its peers; the first leader's session is served by it alone", x)
	la := awaitLeader(t, aLeads, 20*time.Second, "the second candidate, once the quorum expired the first's session")
	must(t, la.Confirm(ctx), "the new leader's Confirm")
	if addr, err := b.Leader(ctx); err != nil || addr != "b:1" {
		t.Fatalf("through the isolated member the leader is %q (%v); want the stale answer b:1 — the test needs a stale server", addr, err)
	}
	err := lb.Confirm(ctx)
	if err == nil {
		t.Fatal("the deposed leader confirmed its leadership through a server cut off from the quorum")
	}
	t.Logf("the deposed leader's Confirm: %v", err)
}
