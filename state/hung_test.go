package state_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// hungServer accepts TCP connections and never answers, as a SIGSTOPped ZooKeeper member
// does (its kernel still accepts).
func hungServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// A member that accepts and never answers costs a client at most its share of the session
// timeout (here 1 s), not go-zookeeper's handshake deadline of 20 s: with two hung members
// listed beside a live one, a 3 s session connects within 10 s whatever the order.
func TestAHungMemberCostsABoundedHandshake(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	servers := []string{hungServer(t), hungServer(t), env.Servers[0]}
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
