package state

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/go-zookeeper/zk"
)

// loadReaderCount is how many extra sessions a load opens. A ZooKeeper server serves one
// connection's requests one at a time (read, process, reply), so a single session caps a
// load at what that loop manages; a load reads every node's data over these, and only arms
// watches on the store's own session. Read one getData a node (a server before 3.6, ~14,000
// reads a second here), 100,000 jobs load in 3.3 s on 2 cores with 6 (3.9 s with 3); in
// multiReads (loadbatch.go) in 0.5 s. Against an ensemble the sessions spread over its
// members, which serve reads in parallel.
const loadReaderCount = 6

// loadReaders are short-lived sessions, with the store's servers and credentials, that a
// load reads unwatched nodes through. They set no watches and hold no ephemeral nodes.
type loadReaders struct {
	conns []*zk.Conn
	next  atomic.Uint64
	// multiRead: the server answers multiRead (3.6+), and the load reads in batches
	// (loadbatch.go); set once, before the load reads anything.
	multiRead bool

	mu      sync.Mutex
	unarmed []armItem // watched nodes read without their watch, to arm after the load
}

// armItem is a watched node read during the load, with the zxid of the node's last change
// that the load saw (its Mzxid).
type armItem struct {
	path  string
	mzxid int64
}

func (r *loadReaders) readUnarmed(p string, mzxid int64) {
	r.mu.Lock()
	r.unarmed = append(r.unarmed, armItem{p, mzxid})
	r.mu.Unlock()
}

func (r *loadReaders) pick() *zk.Conn {
	return r.conns[r.next.Add(1)%uint64(len(r.conns))]
}

func (r *loadReaders) close() {
	for _, c := range r.conns {
		c.Close()
	}
}

// openLoadReaders opens n sessions and syncs each with the ZooKeeper leader, so that a reader
// connected to a lagging follower still sees every write committed before the load began
// (the previous leader's last ones in particular), as the store's own session does.
func (s *Store) openLoadReaders(ctx context.Context, n int) (*loadReaders, error) {
	r := &loadReaders{conns: make([]*zk.Conn, n)}
	err := concurrently(n, n, func(i int) (err error) {
		r.conns[i], err = s.openReader(ctx)
		return err
	})
	if err != nil {
		for _, c := range r.conns {
			if c != nil {
				c.Close()
			}
		}
		return nil, fmt.Errorf("open %d sessions to read the queues: %w", n, err)
	}
	return r, nil
}

func (s *Store) openReader(ctx context.Context) (*zk.Conn, error) {
	sess := newSession(nil) // short-lived: its losses are the load's errors
	conn, _, err := zk.Connect(s.servers, s.timeout, zk.WithLogger(zkLogger{s.log}), zk.WithLogInfo(false), zk.WithDialer(boundedDialer(s.timeout, len(s.servers))),
		zk.WithEventCallback(sess.observe), zk.WithMaxBufferSize(s.jute))
	if err != nil {
		return nil, fmt.Errorf("connect to ZooKeeper at %s: %w", strings.Join(s.servers, ","), err)
	}
	// Bounded: ctx is the mirror's, which lives as long as the leadership.
	wait, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if err := sess.waitConnected(wait); err != nil {
		conn.Close()
		return nil, fmt.Errorf("cannot reach ZooKeeper at %s: %w", strings.Join(s.servers, ","), err)
	}
	if s.digest != "" {
		if err := conn.AddAuth("digest", []byte(s.digest)); err != nil {
			conn.Close()
			return nil, fmt.Errorf("authenticate to ZooKeeper: %w", translate(err))
		}
	}
	start := s.begin()
	_, err = conn.Sync(s.root)
	s.end("sync", start)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		conn.Close()
		return nil, fmt.Errorf("sync %s: %w", s.root, translate(err))
	}
	return conn, nil
}
