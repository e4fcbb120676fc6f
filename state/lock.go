package state

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
)

// Lock takes the mutual-exclusion latch under dir (the ZooKeeper lock recipe, as Curator's
// LeaderLatch that Elastic-Job-Lite uses for leader/election/latch and leader/failover/latch):
// an ephemeral sequential node, held when it has the lowest sequence, each waiter watching
// only its predecessor. The node name carries the session id, so that a create whose answer
// was lost is found again rather than left to block everyone. It returns the release function;
// a session lost while holding the latch releases it too.
func (t *Tree) Lock(ctx context.Context, dir string) (release func(), err error) {
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
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		names, err := t.Children(ctx, dir)
		if err != nil {
			return nil, err
		}
		sort.Slice(names, func(i, j int) bool { return seq(names[i]) < seq(names[j]) })
		if me == "" {
			for _, n := range names {
				if strings.HasPrefix(n, prefix) {
					me = s.path(dir, n)
				}
			}
		}
		if me == "" {
			s.roundTrips.Add(1)
			p, err := s.conn.Create(s.path(dir, prefix), nil, zk.FlagEphemeral|zk.FlagSequence, s.acl)
			if err != nil {
				if errors.Is(translate(err), ErrUnavailable) {
					if werr := s.AwaitSession(ctx); werr != nil {
						return nil, fmt.Errorf("take latch %s: %w", dir, werr)
					}
					continue
				}
				return nil, fmt.Errorf("take latch %s: %w", dir, translate(err))
			}
			me = p
			continue
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

// seq is a sequential node's sequence number: its last ten digits.
func seq(name string) int64 {
	if len(name) < 10 {
		return -1
	}
	n, _ := strconv.ParseInt(name[len(name)-10:], 10, 64)
	return n
}

func sortStrings(s []string) { sort.Strings(s) }
