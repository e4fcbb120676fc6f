package state_test

import (
	"context"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// A member that accepts and never answers costs a client at most its share of the session
// timeout (here 1 s), not go-zookeeper's handshake deadline of 20 s: with two hung members
// listed beside a live one, a 3 s session connects within 10 s whatever the order.
func TestAHungMemberCostsABoundedHandshake(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	servers := []string{statetest.HungServer(t), statetest.HungServer(t), env.Servers[0]}
	for attempt := range 3 { // the client shuffles the list: try a few orders
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		start := time.Now()
		s, err := state.Connect(ctx, state.Config{Servers: servers, Namespace: env.Namespace, SessionTimeout: 3 * time.Second, Logger: newLogger().Logger})
		cancel()
		if err != nil {
			t.Fatalf("attempt %d: no session within 10 s with a live member listed: %v", attempt, err)
		}
		t.Logf("attempt %d: connected in %v", attempt, time.Since(start).Round(10*time.Millisecond))
		s.Close()
	}
}
