package state

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
)

// Lock takes the mutual-exclusion latch under dir (the ZooKeeper lock recipe, as Curator's
// LeaderLatch that Elastic-Job-Lite uses for leader/election/latch and leader/failover/latch):
// an ephemeral sequential node, held when it has the lowest sequence, each waiter watching
// only its predecessor. The node name carries the session id, so that a create whose answer
// was lost is found again rather than left to block everyone. It returns the release function;
// a session lost while holding the latch releases it too.
//
// The goroutines of one Tree take a latch one at a time, from before the look for a node until
// the release: the nodes of a session are told apart by the session alone, so two Locks of one
// session at once would both count its earliest node as theirs, both hold the latch, and the
// first release would let other sessions in while the second is still inside.
func (t *Tree) Lock(ctx context.Context, dir string) (release func(), err error) {
	token := t.latchToken(dir)
	select {
	case token <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("take latch %s: %w", dir, ctx.Err())
	}
	held, err := t.lock(ctx, dir)
	if err != nil {
		<-token
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			held()
			<-token // only once the node is gone (or its session)
		})
	}, nil
}

// latchToken returns the token of dir's latch (see Lock).
func (t *Tree) latchToken(dir string) chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.latches == nil {
		t.latches = map[string]chan struct{}{}
	}
	p := t.abs(dir)
	c, ok := t.latches[p]
	if !ok {
		c = make(chan struct{}, 1)
		t.latches[p] = c
	}
	return c
}

// lock is Lock without the exclusion of the Tree's own goroutines, which it needs: it takes
// any node of the session for its own.
func (t *Tree) lock(ctx context.Context, dir string) (release func(), err error) {
	if err := t.Ensure(ctx, dir); err != nil {
		return nil, err
	}
	s := t.s
	prefix := fmt.Sprintf("%x-lock-", s.conn.SessionID())
	var me string
	defer func() {
		if err != nil && me != "" {
			s.conn.Delete(me, -1)
		}
	}()
	lost := false // a create's answer was lost: it may have made a node
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if lost {
			// The node may not have reached the server the session is connected to now.
			if err := s.sync(ctx, s.path(dir)); err != nil {
				return nil, fmt.Errorf("take latch %s: %w", dir, err)
			}
			lost = false
		}
		names, err := t.Children(ctx, dir)
		if err != nil {
			return nil, err
		}
		sort.Slice(names, func(i, j int) bool { return seq(names[i]) < seq(names[j]) })
		// The earliest node of this session is the one it holds (no other Lock of this Tree is
		// inside: a node of the session is this call's, made by a create whose answer was lost,
		// or one whose release failed); any later one (a lost create applied after the look
		// for it) goes: waiting on its own node, the latch would wait for ever, and so would
		// everyone after it.
		var own []string
		for _, n := range names {
			if strings.HasPrefix(n, prefix) {
				own = append(own, n)
			}
		}
		if len(own) > 0 {
			me = s.path(dir, own[0])
			for _, n := range own[1:] {
				s.roundTrips.Add(1)
				s.conn.Delete(s.path(dir, n), -1) // a failure leaves it to the next look
				names = slices.DeleteFunc(names, func(x string) bool { return x == n })
			}
		}
		if me == "" {
			if h := beforeLatchCreate.Load(); h != nil {
				(*h)(dir, prefix)
			}
			s.roundTrips.Add(1)
			p, err := s.conn.Create(s.path(dir, prefix), nil, zk.FlagEphemeral|zk.FlagSequence, s.acl)
			if err != nil {
				if errors.Is(translate(err), ErrUnavailable) {
					if werr := s.AwaitSession(ctx); werr != nil {
						return nil, fmt.Errorf("take latch %s: %w", dir, werr)
					}
					lost = true
					continue
				}
				return nil, fmt.Errorf("take latch %s: %w", dir, translate(err))
			}
			me = p
			continue // the look again finds a node of this session made meanwhile
		}
		idx := indexOf(names, base(me))
		switch {
		case idx < 0:
			return nil, fmt.Errorf("take latch %s: %w: the latch node is gone", dir, ErrSessionExpired)
		case idx == 0:
			held := me
			return func() { s.releaseLatch(held) }, nil
		}
		s.roundTrips.Add(1)
		exists, _, watch, err := s.conn.ExistsW(s.path(dir, names[idx-1]))
		if err != nil {
			if werr := s.AwaitSession(ctx); werr != nil {
				return nil, fmt.Errorf("take latch %s: %w", dir, werr)
			}
			continue
		}
		if exists {
			select {
			case <-watch:
			case <-ctx.Done():
			}
		}
	}
}

// releaseLatch deletes a held latch node, again after a connection loss: the session outlives
// a short one, and with it the node, which would hold the latch for every other instance for
// as long as this process lives. A session that expires takes the node with it.
func (s *Store) releaseLatch(p string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		s.roundTrips.Add(1)
		err := translate(s.conn.Delete(p, -1))
		if !errors.Is(err, ErrUnavailable) || errors.Is(err, ErrNotFound) {
			if err != nil && !errors.Is(err, ErrNotFound) {
				s.log.WithError(err).WithField("path", p).Warn("cannot release a latch; it goes with the session")
			}
			return
		}
		if s.AwaitSession(ctx) != nil {
			return
		}
	}
}

// beforeLatchCreate, when set (by a test), runs just before Lock creates its node under dir,
// named with prefix.
var beforeLatchCreate atomic.Pointer[func(dir, prefix string)]

// seq is a sequential node's sequence number: its last ten digits.
func seq(name string) int64 {
	if len(name) < 10 {
		return -1
	}
	n, _ := strconv.ParseInt(name[len(name)-10:], 10, 64)
	return n
}

func sortStrings(s []string) { sort.Strings(s) }
