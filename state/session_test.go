package state_test

import (
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
	srv := statetest.StartDedicated(t)
	log := logrus.New()
	log.SetOutput(discard{})
	hook := logtest.NewLocal(log)
	s := openPlain(t, statetest.Env{Servers: []string{srv.Addr}, Namespace: "sessions"}, func(c *state.Config) {
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
	srv.Pause() // shorter than the session: the connection goes and comes back
	await.True(t, 10*time.Second, "the loss is logged", said(logrus.WarnLevel, "ZooKeeper connection lost"))
	if connected, _ := s.SessionState(); connected {
		t.Fatal("SessionState says connected while the connection is lost")
	}
	srv.Resume()
	await.True(t, 10*time.Second, "the return is logged", said(logrus.InfoLevel, "ZooKeeper connection back"))
	srv.Pause() // longer than the session: it expires
	await.True(t, 10*time.Second, "the second loss", func() bool { c, _ := s.SessionState(); return !c })
	time.Sleep(3 * time.Second) // the session's timeout passes with the server paused: that is the fault
	srv.Resume()
	await.True(t, 20*time.Second, "the expiry is logged", said(logrus.WarnLevel, "ZooKeeper session expired"))
	await.True(t, 20*time.Second, "the expiry is counted", func() bool { _, n := s.SessionState(); return n == 1 })
	before := len(hook.AllEntries())
	s.Close()
	if after := len(hook.AllEntries()); after != before {
		t.Fatalf("Close logged %v", hook.AllEntries()[before:])
	}
}
