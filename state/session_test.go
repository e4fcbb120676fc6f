package state_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// A lost connection, its return and an expired session are logged and counted: nothing said
// that ZooKeeper was unreachable until a leadership ended, and a standby cut off for hours
// looked healthy. A Close says nothing.
func TestTheSessionsLossesAreLoggedAndCounted(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	proxy := statetest.NewProxy(t, env.Servers[0]) // cuts this client off; the server runs on
	log := logrus.New()
	log.SetOutput(discard{})
	hook := logtest.NewLocal(log)
	s := openPlain(t, statetest.Env{Servers: []string{proxy.Addr}, Namespace: env.Namespace}, func(c *state.Config) {
		c.Logger, c.SessionTimeout = log, 2*time.Second
	})
	said := func(level logrus.Level, msg string) func() bool {
		return func() bool {
			for _, e := range hook.AllEntries() {
				if e.Level == level && strings.HasPrefix(e.Message, msg) {
					return true
				}
			}
			return false
		}
	}
	if connected, expiries := s.SessionState(); !connected || expiries != 0 || len(hook.AllEntries()) != 0 {
		t.Fatalf("at start: connected %v, %d expiries, logged %d lines; want connected, none, none", connected, expiries, len(hook.AllEntries()))
	}
	proxy.Cut() // shorter than the session: the connection goes and comes back
	await.True(t, 10*time.Second, "the loss is logged", said(logrus.WarnLevel, "ZooKeeper connection lost"))
	if connected, _ := s.SessionState(); connected {
		t.Fatal("SessionState says connected while the connection is lost")
	}
	proxy.Restore()
	await.True(t, 10*time.Second, "the return is logged", said(logrus.InfoLevel, "ZooKeeper connection back"))
	// Longer than the session: cut off until the server has expired it — its election node,
	// ephemeral, is gone — and only then back. (A paused server raced the client's reconnect
	// against its own expiry, and the session could live on.)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Campaign(ctx, "me"); err != nil {
		t.Fatal(err)
	}
	proxy.Cut()
	await.True(t, 20*time.Second, "the server expired the session", func() bool {
		_, err := statetest.LeaderSession(env.Servers, env.Namespace)
		return err != nil && strings.Contains(err.Error(), "no candidate")
	})
	proxy.Restore()
	await.True(t, 20*time.Second, "the expiry is logged", said(logrus.WarnLevel, "ZooKeeper session expired"))
	await.True(t, 20*time.Second, "the expiry is counted", func() bool { _, n := s.SessionState(); return n == 1 })
	before := len(hook.AllEntries())
	s.Close()
	if after := len(hook.AllEntries()); after != before {
		t.Fatalf("Close logged %v", hook.AllEntries()[before:])
	}
}
