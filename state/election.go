package state

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// Leadership errors: why a Leadership ended.
var (
	ErrResigned            = errors.New("state: leadership resigned")
	ErrElectionNodeGone    = errors.New("state: election node deleted")
	ErrElectionNodeChanged = errors.New("state: election node changed by someone else")
	ErrDisconnectedTooLong = errors.New("state: disconnected from ZooKeeper for longer than the session timeout")
)

const electionPrefix = "n_"

// Leadership is this instance's term as leader. It ends when the election node goes (deleted,
// or its session expired), when the connection has been down for a session timeout (the
// server may already have expired the session, and a new leader may be acting), or on Resign.
// Whatever ended it, writes through Store fail from then on with ErrNotLeader, because each
// of them checks the election node.
type Leadership struct {
	store  *Store
	path   string
	cancel context.CancelFunc
	done   chan struct{} // closed when the watcher goroutine has returned

	mu   sync.Mutex // guards err
	err  error
	lost chan struct{}
}

// Store returns the fenced view through which the leader must make every write.
func (l *Leadership) Store() *Store { return l.store }

// Path returns the election node.
func (l *Leadership) Path() string { return l.path }

// Lost returns a channel closed when the leadership has ended; stop all leader work then.
func (l *Leadership) Lost() <-chan struct{} { return l.lost }

// Err says why the leadership ended, or nil while it lasts.
func (l *Leadership) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

func (l *Leadership) end(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.err = err
		close(l.lost)
	}
}

// Confirm checks with the quorum that the election node still exists at the leadership's
// version: a server cut off from the quorum may still show an expired node, and a leader must
// not act on Mesos (subscribe, kill) on its word. The check is a multi of one version check,
// which ZooKeeper orders and commits like any write, so only a server that can reach a quorum
// answers it. A sync and a read would not do: a deposed quorum leader that has not yet noticed
// answers a sync itself, from its stale state. It returns ErrNotLeader when the node is gone or
// changed, and ZooKeeper's error when it cannot answer.
func (l *Leadership) Confirm(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := l.Err(); err != nil {
		return fmt.Errorf("%w: %w", ErrNotLeader, err)
	}
	s := l.store
	if s.fence == nil {
		return fmt.Errorf("%w: no election node", ErrNotLeader)
	}
	start := s.begin()
	res, err := s.conn.Multi(&zk.CheckVersionRequest{Path: l.path, Version: s.fence.Version})
	s.end("multi", start)
	if err == nil {
		return nil
	}
	if len(res) == 1 && res[0].Error != nil {
		err := fmt.Errorf("%w: election node %s is gone or changed: %w", ErrNotLeader, l.path, res[0].Error)
		l.end(err)
		return err
	}
	return fmt.Errorf("confirm the election node %s: %w", l.path, translate(err))
}

// Resign ends the leadership and deletes the election node, so that the next candidate leads
// at once.
func (l *Leadership) Resign(ctx context.Context) {
	l.end(ErrResigned)
	l.cancel()
	<-l.done
	if err := ctx.Err(); err == nil {
		start := l.store.begin()
		l.store.conn.Delete(l.path, -1) // gone already is fine
		l.store.end("delete", start)
	}
}

// Campaign joins the election under /ha/election with an ephemeral sequential node holding
// address (the instance's advertised REST address), and returns once this instance leads:
// when its node has the lowest sequence number. It watches only its predecessor, so a change
// wakes one candidate, not all. A session lost while waiting costs the node; Campaign then
// creates a new one. If ctx ends first, the node is deleted and ctx's error returned.
func (s *Store) Campaign(ctx context.Context, address string) (*Leadership, error) {
	var me string
	for {
		if err := ctx.Err(); err != nil {
			s.withdraw(me)
			return nil, err
		}
		connected, _, expiries, changed := s.sess.snapshot()
		if !connected {
			select {
			case <-changed:
				continue
			case <-ctx.Done():
				continue
			}
		}
		var version int32
		var err error
		me, version, err = s.electionNode(ctx, me, address)
		if err != nil {
			if !errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrSessionExpired) {
				return nil, fmt.Errorf("join election: %w", err)
			}
			s.waitChange(ctx, changed)
			continue
		}
		candidates, err := s.candidates(ctx)
		if err != nil {
			s.waitChange(ctx, changed)
			continue
		}
		idx := indexOf(candidates, base(me))
		switch {
		case idx < 0: // our node vanished: the session expired since we created it
			me = ""
			continue
		case idx == 0:
			return s.lead(me, version, expiries), nil
		}
		pred := s.path(electionDir, candidates[idx-1])
		start := s.begin()
		exists, st, watch, err := s.conn.ExistsW(pred)
		s.end("exists", start)
		if err != nil {
			s.waitChange(ctx, changed)
			continue
		}
		if !exists {
			continue
		}
		if st.EphemeralOwner == s.conn.SessionID() {
			// Our own node, from a create whose answer was lost and that the look for it did
			// not see: waiting on it would wait for ever, and once it is the lowest nobody
			// would lead. The earlier node is kept, this one goes.
			s.withdraw(me)
			me = pred
			continue
		}
		select {
		case <-watch:
		case <-ctx.Done():
		}
	}
}

// waitChange waits briefly for a session change, so that retries after a connection error do
// not spin.
func (s *Store) waitChange(ctx context.Context, changed <-chan struct{}) {
	select {
	case <-changed:
	case <-ctx.Done():
	case <-time.After(100 * time.Millisecond):
	}
}

// withdraw deletes a candidate's node when it stops campaigning.
func (s *Store) withdraw(me string) {
	if me != "" {
		start := s.begin()
		s.conn.Delete(me, -1)
		s.end("delete", start)
	}
}

// electionNode returns this session's election node, creating it if the session has none.
// A create whose answer was lost may still have made the node, so before creating one it looks
// for a node owned by this session.
func (s *Store) electionNode(ctx context.Context, known, address string) (string, int32, error) {
	sessionID := s.conn.SessionID()
	if known != "" {
		st, err := s.stat(ctx, known)
		if err != nil {
			return "", 0, err
		}
		if st != nil && st.EphemeralOwner == sessionID {
			return known, st.Version, nil
		}
	}
	// A create whose answer was lost may not have reached this server yet (the client
	// reconnected to another): after a sync it has, if the quorum made it.
	if err := s.sync(ctx, s.path(electionDir)); err != nil {
		return "", 0, err
	}
	names, err := s.candidates(ctx)
	if err != nil {
		return "", 0, err
	}
	for _, n := range names {
		st, err := s.stat(ctx, s.path(electionDir, n))
		if err != nil {
			return "", 0, err
		}
		if st != nil && st.EphemeralOwner == sessionID {
			return s.path(electionDir, n), st.Version, nil
		}
	}
	if h := beforeElectionCreate.Load(); h != nil {
		(*h)()
	}
	start := s.begin()
	p, err := s.conn.Create(s.path(electionDir, electionPrefix), []byte(address), zk.FlagEphemeral|zk.FlagSequence, s.acl)
	s.end("create", start)
	if err != nil {
		return "", 0, fmt.Errorf("create election node: %w", translate(err))
	}
	return p, 0, nil
}

// candidates lists the election nodes in sequence order.
func (s *Store) candidates(ctx context.Context) ([]string, error) {
	names, err := s.children(ctx, s.path(electionDir))
	if err != nil {
		return nil, err
	}
	out := names[:0]
	for _, n := range names {
		if strings.HasPrefix(n, electionPrefix) {
			out = append(out, n) // the sequence is zero-padded, so sorted names are in order
		}
	}
	return out, nil
}

func indexOf(names []string, name string) int {
	for i, n := range names {
		if n == name {
			return i
		}
	}
	return -1
}

// Leader returns the advertised address of the current leader, or ErrNotFound when there is
// none.
func (s *Store) Leader(ctx context.Context) (string, error) {
	for {
		names, err := s.candidates(ctx)
		if err != nil {
			return "", err
		}
		if len(names) == 0 {
			return "", fmt.Errorf("leader: %w", ErrNotFound)
		}
		n, err := s.get(ctx, s.path(electionDir, names[0]))
		if err != nil {
			return "", err
		}
		if n.exists {
			return string(n.data), nil
		}
		// The leader left between the listing and the read; look again.
	}
}

func (s *Store) lead(path string, version int32, expiries int) *Leadership {
	ctx, cancel := context.WithCancel(context.Background())
	l := &Leadership{
		path:   path,
		cancel: cancel,
		done:   make(chan struct{}),
		lost:   make(chan struct{}),
	}
	l.store = s.Fenced(Fence{Path: path, Version: version, refused: l.end})
	go l.watch(ctx, expiries)
	return l
}

// watch ends the leadership when its node or session goes: the session expired, or the
// connection down for a whole session timeout — the one the server negotiated (its
// min/maxSessionTimeout may make it other than the one asked for), counted from when the
// client noticed. It owns no state but the watch.
//
// Counted so, a leader cut off silently (packets dropped, no reset) may still lead when its
// successor does: the client notices only after two thirds of a timeout without an answer,
// while the server expires the session a timeout after the last packet it received. Every
// write of the old leader is refused by then (its election node is gone: the fence), and so is
// every act on Mesos that the leader confirms first or writes ahead (a launch, a kill, an
// acknowledgement). Counting from the last packet answered instead would close that overlap,
// but end the leadership of every leader connected to a hung quorum leader, whose session
// lives on: the new quorum leader starts the sessions' clocks again, and the client, trying
// the hung member among the others, reconnects after more than a timeout of silence
// (TestEnsembleQuorumLeaderHangs).
func (l *Leadership) watch(ctx context.Context, expiries int) {
	defer close(l.done)
	s := l.store
	var watch <-chan zk.Event
	for {
		connected, since, n, changed := s.sess.snapshot()
		if n != expiries {
			l.end(ErrSessionExpired)
			return
		}
		if !connected {
			left := s.negotiatedTimeout() - time.Since(since)
			if left <= 0 {
				l.end(ErrDisconnectedTooLong)
				return
			}
			select {
			case <-changed:
			case <-time.After(left):
			case <-ctx.Done():
				return
			}
			continue
		}
		if watch == nil {
			start := s.begin()
			exists, st, w, err := s.conn.ExistsW(l.path)
			s.end("exists", start)
			switch {
			case err != nil:
				s.waitChange(ctx, changed)
				continue
			case !exists:
				l.end(ErrElectionNodeGone)
				return
			case st.Version != l.store.fence.Version:
				// Set by someone (an operator): every fenced write is refused from now on.
				l.end(ErrElectionNodeChanged)
				return
			}
			watch = w
		}
		select {
		case <-watch: // deleted, or the watch ended with the session: look again
			watch = nil
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

// negotiatedTimeout is the session timeout the server gave s's session, or, before it has
// given one, the one asked for.
func (s *Store) negotiatedTimeout() time.Duration {
	if _, t := s.conn.LastHeard(); t > 0 {
		return t
	}
	return s.timeout
}

// beforeElectionCreate, when set (by a test), runs just before a candidate creates its node.
var beforeElectionCreate atomic.Pointer[func()]
