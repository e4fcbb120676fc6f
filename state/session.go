package state

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/sirupsen/logrus"
)

// session follows the connection's session state from go-zookeeper's event callback, which,
// unlike its event channel, never drops an event.
type session struct {
	mu        sync.Mutex // guards the fields below
	state     zk.State
	since     time.Time     // when state last changed between having and not having a session
	changed   chan struct{} // closed and replaced at every state change
	expired   chan struct{} // closed and replaced at every expiry
	expiries  int
	connected bool
	ever      bool // the session has been usable once: a later loss is worth a log line

	// log, if set, is told of the connection's losses, returns and the session's expiries:
	// without it nothing said that ZooKeeper was unreachable until a leadership ended, and a
	// standby cut off for hours looked healthy. closing silences it for a Close.
	log     logrus.FieldLogger
	closing atomic.Bool
}

func newSession(log logrus.FieldLogger) *session {
	return &session{changed: make(chan struct{}), expired: make(chan struct{}), since: time.Now(), log: log}
}

// observe is the zk event callback; it must not block.
func (s *session) observe(ev zk.Event) {
	if ev.Type != zk.EventSession {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.state = ev.State
	has := ev.State == zk.StateHasSession
	if has != s.connected {
		s.tell(has, time.Since(s.since), ev.Server)
		s.connected = has
		s.since = time.Now()
		s.ever = s.ever || has
	}
	if ev.State == zk.StateExpired {
		s.expiries++
		if s.log != nil && !s.closing.Load() {
			s.log.Warn("ZooKeeper session expired: its ephemeral nodes (a leader's election node) are gone; a new session is being opened")
		}
		close(s.expired)
		s.expired = make(chan struct{})
	}
	close(s.changed)
	s.changed = make(chan struct{})
}

// tell logs a change between having and not having a usable session, after the first.
func (s *session) tell(has bool, was time.Duration, server string) {
	if s.log == nil || !s.ever || s.closing.Load() {
		return
	}
	if has {
		s.log.WithFields(logrus.Fields{"server": server, "down_for": was.Round(time.Millisecond)}).Info("ZooKeeper connection back")
		return
	}
	s.log.WithFields(logrus.Fields{"server": server, "up_for": was.Round(time.Second)}).Warn("ZooKeeper connection lost; reconnecting (the session lives on for up to its timeout)")
}

// snapshot returns whether the session is usable, since when, the number of expiries so far
// and a channel closed at the next change.
func (s *session) snapshot() (connected bool, since time.Time, expiries int, changed <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.connected, s.since, s.expiries, s.changed
}

func (s *session) nextExpiry() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.expired
}

func (s *session) waitConnected(ctx context.Context) error {
	for {
		ok, _, _, changed := s.snapshot()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// AwaitSession waits while the connection is down and the session may still live: it returns
// nil once connected, and ErrUnavailable once the connection has been down for a whole session
// timeout (the server may have expired the session by then) or when the session expired. The
// timeout is the one the server gave (its minSessionTimeout may make it longer than the one
// asked for): giving up sooner reported a write the server had applied as of unknown outcome
// while the session, and the leadership, lived on, and the caller's retry applied it twice.
// Requests that failed for a broken connection can then be made again on the same session.
func (s *Store) AwaitSession(ctx context.Context) error {
	_, _, expiries, _ := s.sess.snapshot()
	for {
		connected, since, n, changed := s.sess.snapshot()
		switch {
		case n != expiries:
			return fmt.Errorf("%w: the session expired", ErrUnavailable)
		case connected:
			return nil
		}
		left := s.negotiatedTimeout() - time.Since(since)
		if left <= 0 {
			return fmt.Errorf("%w: disconnected for longer than the session timeout", ErrUnavailable)
		}
		select {
		case <-changed:
		case <-time.After(left):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// maxAttempts bounds untilSessionFails where the client reconnects at once every time (a
// session moved under it, a store being closed): waiting for the session bounds the rest.
const maxAttempts = 10

// untilSessionFails runs f until it succeeds or fails for another reason than a broken
// connection, waiting for the client to reconnect between attempts: a request fails for want
// of a connection only when the session does.
func (s *Store) untilSessionFails(ctx context.Context, f func() error) error {
	for attempt := 1; ; attempt++ {
		err := f()
		if err == nil || !errors.Is(err, ErrUnavailable) || errors.Is(err, zk.ErrClosing) || attempt == maxAttempts {
			return err
		}
		if werr := s.AwaitSession(ctx); werr != nil {
			return fmt.Errorf("%w (%w)", err, werr)
		}
		if ctx.Err() != nil {
			return err
		}
	}
}
