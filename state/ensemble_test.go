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
// A request made at the very moment of the kill is not covered: it may fail with
// ErrUnavailable (zk: connection closed, or zk: could not connect to a server when the dead
// member was last in the client's shuffled list), since the Store retries only the requests
// the scheduler makes again after AwaitSession.
func TestAStoreSurvivesTheKillOfItsMember(t *testing.T) {
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
