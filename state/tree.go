package state

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/sirupsen/logrus"
)

// Tree is a ZooKeeper session for a caller with its own layout under the namespace (the
// Elastic-Job-Lite mode, package lite): plain node access, watches and multis, with this
// package's error sentinels. Unlike Connect, Dial creates no scheduler layout: a lite namespace
// holds one node per job and nothing else.
type Tree struct {
	s *Store

	mu sync.Mutex // guards latches and watches
	// latches holds, by latch directory, a token that one Lock of this Tree at a time holds from
	// before it looks for its node until its release (see Lock).
	latches map[string]chan struct{}
	// watches are the watches this Tree set, by node: GetW and ChildrenW of a node whose last
	// watch has not fired give that one again (see live).
	watches map[watchKey]Watch
}

// watchKey names a watch: of a node (its data, or its creation while missing) or of its list
// of children.
type watchKey struct {
	path     string
	children bool
}

// live returns the watch of k this Tree set, unless it has fired (or there is none). The client
// keeps every watch until its node changes (ZooKeeper before 3.6 cannot drop one), and lite's
// loops watch several nodes at each turn though one changed (watchServers every server's node,
// shardIfNecessary three): a new watch on each unchanged node would leave one more behind at
// every turn, for as long as the session lives. One watch serves all who asked: the client
// closes its channel after the event, so every holder wakes.
func (t *Tree) live(k watchKey) Watch {
	t.mu.Lock()
	defer t.mu.Unlock()
	w, ok := t.watches[k]
	if !ok {
		return nil
	}
	select {
	case <-w: // fired: its event taken here, its holders woken by the close
		delete(t.watches, k)
		return nil
	default:
		return w
	}
}

// keep records w as the watch of k.
func (t *Tree) keep(k watchKey, w Watch) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.watches == nil {
		t.watches = map[watchKey]Watch{}
	}
	t.watches[k] = w
}

// Node is one read.
type Node struct {
	Data    []byte
	Version int32
	Exists  bool
	Owner   int64 // the session of an ephemeral node, 0 for a persistent one
	// Children counts the node's children when it was read: a caller that knows which children
	// a node may have need not read those that a count of zero, or of only the ones it knows
	// are there, says are absent.
	Children int32
}

// Watch fires once, when the watched node or its children change or the session ends.
type Watch = <-chan zk.Event

// Dial opens a session on cfg's servers (Namespace is the root; QueueSizeLimit is unused).
func Dial(ctx context.Context, cfg Config) (*Tree, error) {
	if len(cfg.Servers) == 0 {
		return nil, errors.New("state: no ZooKeeper servers configured")
	}
	if cfg.Namespace == "" || strings.Contains(cfg.Namespace, "/") {
		return nil, fmt.Errorf("state: namespace %q must be non-empty and without '/'", cfg.Namespace)
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = logrus.StandardLogger()
	}
	jute, err := cfg.juteMaxBuffer()
	if err != nil {
		return nil, err
	}
	sess := newSession(cfg.Logger)
	conn, _, err := zk.Connect(cfg.Servers, cfg.SessionTimeout,
		zk.WithLogger(zkLogger{cfg.Logger}), zk.WithLogInfo(false),
		zk.WithDialer(boundedDialer(cfg.SessionTimeout, len(cfg.Servers))), sendBuffer(jute),
		zk.WithEventCallback(sess.observe))
	if err != nil {
		return nil, fmt.Errorf("connect to ZooKeeper at %s: %w", strings.Join(cfg.Servers, ","), err)
	}
	s := &Store{shared: &shared{
		conn: conn, servers: cfg.Servers, digest: cfg.Digest, root: "/" + cfg.Namespace, acl: treeACL(),
		timeout: cfg.SessionTimeout, log: cfg.Logger, sess: sess, observe: cfg.ObserveOp, jute: jute,
	}}
	if err := s.connected(ctx); err != nil {
		return nil, err
	}
	return &Tree{s: s}, nil
}

// treeACL is the ACL of the nodes a Tree creates.
func treeACL() []zk.ACL { return zk.WorldACL(zk.PermAll) }

// Offline returns a Tree without a session, on cfg's namespace: its ops can be built and
// measured (Fits, against cfg's JuteMaxBuffer), to check before Dial that the largest
// transactions a caller will send fit in one request, but nothing can be read or written
// through it.
func Offline(cfg Config) (*Tree, error) {
	jute, err := cfg.juteMaxBuffer()
	if err != nil {
		return nil, err
	}
	return &Tree{s: &Store{shared: &shared{root: "/" + cfg.Namespace, acl: treeACL(), jute: jute}}}, nil
}

// Close ends the session; its ephemeral nodes go at once.
func (t *Tree) Close() { t.s.Close() }

// Path returns the absolute path of a path relative to the namespace.
func (t *Tree) Path(rel string) string { return t.abs(rel) }

// SessionID identifies the current session (it changes after an expiry).
func (t *Tree) SessionID() int64 { return t.s.conn.SessionID() }

// SessionExpired returns a channel closed the next time the session expires.
func (t *Tree) SessionExpired() <-chan struct{} { return t.s.sess.nextExpiry() }

// Connected says whether the session is usable now, and returns a channel closed at the next
// change of the connection's state.
func (t *Tree) Connected() (bool, <-chan struct{}) {
	ok, _, _, changed := t.s.sess.snapshot()
	return ok, changed
}

// LastHeard returns when the server last surely heard from this session (the send time of the
// newest request or ping it answered) and the session timeout it negotiated: it expires the
// session no sooner than that time plus the timeout, whatever the client has noticed of a
// broken connection. Both are zero before the first session.
func (t *Tree) LastHeard() (time.Time, time.Duration) { return t.s.conn.LastHeard() }

// RoundTrips counts the ZooKeeper requests this Tree has made (a GetMany of n nodes makes n).
func (t *Tree) RoundTrips() uint64 { return t.s.RoundTrips() }

// Get reads a node; a missing node is Node{Exists: false} and no error.
func (t *Tree) Get(ctx context.Context, rel string) (Node, error) {
	n, err := t.s.get(ctx, t.abs(rel))
	return treeNode(n), err
}

func treeNode(n node) Node {
	out := Node{Data: n.data, Version: n.version, Exists: n.exists}
	if n.stat != nil {
		out.Owner, out.Children = n.stat.EphemeralOwner, n.stat.NumChildren
	}
	return out
}

// getManyInFlight bounds a GetMany's reads in flight, as the Store's getMany does: enough to
// keep the connection full, few enough that a GetMany of thousands of nodes does not start
// thousands of goroutines at once.
const getManyInFlight = 64

// GetMany reads many nodes at once, in the order of rels; a missing node is Node{Exists:
// false}. The reads are sent together and pipelined over the session's one connection (a
// go-zookeeper Conn takes concurrent requests), so n reads cost about one round trip of
// latency instead of n; they are still n requests. Each node is read at its own moment, in no
// set order: the results are no snapshot of one instant, not even the order in which rels
// lists them, so whatever a caller decides on them its transaction must check again, as after
// Get. The first error ends it: it is returned, and the reads not yet sent are dropped.
func (t *Tree) GetMany(ctx context.Context, rels []string) ([]Node, error) {
	out := make([]Node, len(rels))
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var once sync.Once
	var first error
	concurrently(len(rels), getManyInFlight, func(i int) error {
		n, err := t.s.get(ctx, t.abs(rels[i]))
		if err != nil {
			// The reads after the first failure fail fast on the cancelled context: their errors
			// would only repeat it, and a failure is most often the connection's, which
			// fails them all.
			once.Do(func() { first = err; cancel() })
			return nil
		}
		out[i] = treeNode(n)
		return nil
	})
	if first != nil {
		return nil, first
	}
	return out, nil
}

// GetW reads a node and watches it (its creation when it is missing). While an earlier watch
// of the node has not fired, that one is given, and the node is only read.
func (t *Tree) GetW(ctx context.Context, rel string) (Node, Watch, error) {
	p := t.abs(rel)
	k := watchKey{path: p}
	if w := t.live(k); w != nil {
		// Any change since that watch was set fires it, this read's included.
		n, err := t.Get(ctx, rel)
		if err != nil {
			return Node{}, nil, err
		}
		return n, w, nil
	}
	var n Node
	var w Watch
	err := t.s.untilSessionFails(ctx, func() error {
		t.s.roundTrips.Add(1)
		data, st, ch, err := t.s.conn.GetW(p)
		if errors.Is(err, zk.ErrNoNode) {
			var ok bool
			ok, st, ch, err = t.s.conn.ExistsW(p)
			if err == nil && ok { // created between the two requests: read it again
				return fmt.Errorf("%w: raced a create", ErrUnavailable)
			}
			n, w = Node{}, ch
			return translateConn(err)
		}
		if err != nil {
			return translateConn(err)
		}
		n, w = Node{Data: data, Version: st.Version, Exists: true, Owner: st.EphemeralOwner, Children: st.NumChildren}, ch
		return nil
	})
	if err != nil {
		return Node{}, nil, fmt.Errorf("watch %s: %w", p, translate(err))
	}
	t.keep(k, w)
	return n, w, nil
}

// Children lists a node's children, sorted; a missing node has none.
func (t *Tree) Children(ctx context.Context, rel string) ([]string, error) {
	return t.s.children(ctx, t.abs(rel))
}

// ChildrenW lists a node's children, sorted, and watches the list. The node must exist. While
// an earlier watch of the list has not fired, that one is given, and the list is only read.
func (t *Tree) ChildrenW(ctx context.Context, rel string) ([]string, Watch, error) {
	p := t.abs(rel)
	k := watchKey{path: p, children: true}
	if w := t.live(k); w != nil {
		names, err := t.Children(ctx, rel)
		if err != nil {
			return nil, nil, err
		}
		return names, w, nil
	}
	var names []string
	var w Watch
	err := t.s.untilSessionFails(ctx, func() (err error) {
		t.s.roundTrips.Add(1)
		names, _, w, err = t.s.conn.ChildrenW(p)
		return translateConn(err)
	})
	if err != nil {
		return nil, nil, fmt.Errorf("watch children of %s: %w", p, translate(err))
	}
	t.keep(k, w)
	sortStrings(names)
	return names, w, nil
}

// Ensure creates a persistent node and its missing parents, empty; existing nodes are kept.
func (t *Tree) Ensure(ctx context.Context, rel string) error {
	if err := t.s.ensure(ctx, t.s.root); err != nil {
		return fmt.Errorf("create %s: %w", t.s.root, err)
	}
	parts := strings.Split(rel, "/")
	for i := range parts {
		if err := t.s.ensure(ctx, t.s.path(parts[:i+1]...)); err != nil {
			return fmt.Errorf("create %s: %w", t.s.path(parts[:i+1]...), err)
		}
	}
	return nil
}

// Op is one operation of a Multi.
type Op struct{ reqs []any }

// Create makes a node; it fails with ErrExists when the node is there.
func (t *Tree) Create(rel string, data []byte, ephemeral bool) Op {
	r := t.s.createOp(t.abs(rel), data)
	if ephemeral {
		r.Flags = zk.FlagEphemeral
	}
	return Op{[]any{r}}
}

// Set writes a node's data at version (-1: any).
func (t *Tree) Set(rel string, data []byte, version int32) Op {
	return Op{[]any{setOp(t.abs(rel), data, version)}}
}

// Delete removes a node at version (-1: any); it fails with ErrNotFound when it is missing.
func (t *Tree) Delete(rel string, version int32) Op {
	return Op{[]any{deleteOp(t.abs(rel), version)}}
}

// Check requires a node to exist at version (-1: any version).
func (t *Tree) Check(rel string, version int32) Op {
	return Op{[]any{checkOp(t.abs(rel), version)}}
}

// Absent requires a node not to exist (absentOps). The parent must exist.
func (t *Tree) Absent(rel string) Op { return Op{t.s.absentOps(t.abs(rel))} }

// absentOps require node p not to exist: ZooKeeper has no such check, so they create the node
// and delete it again within the transaction, which fails with ErrExists (an *OpError of the
// create, on p) when the node is there.
func (s *Store) absentOps(p string) []any { return []any{s.createOp(p, nil), deleteOp(p, -1)} }

// Multi runs ops as one transaction: all or nothing. A failed op is an *OpError wrapping its
// sentinel (ErrExists, ErrNotFound, ErrConflict).
func (t *Tree) Multi(ctx context.Context, ops ...Op) error {
	var reqs []any
	for _, o := range ops {
		reqs = append(reqs, o.reqs...)
	}
	return t.s.multi(ctx, reqs...)
}

// Fits says whether ops fit in one Multi: nil, or an error wrapping ErrTooLarge. ZooKeeper takes
// at most jute.maxbuffer in one request, so a caller whose transactions grow with its data (a
// shard count, say) measures the largest it will send before it takes the data on: a Multi
// that does not fit fails, and fails again every time it is sent.
func (t *Tree) Fits(ops ...Op) error {
	var reqs []any
	for _, o := range ops {
		reqs = append(reqs, o.reqs...)
	}
	return t.s.fits(reqs)
}

// Do runs one op on its own (a Multi of one).
func (t *Tree) Do(ctx context.Context, op Op) error { return t.Multi(ctx, op) }

// AwaitSession waits while the connection is down and the session may still live: nil once
// connected, ErrUnavailable once it has been down for a whole session timeout or the session
// expired (see Store.AwaitSession).
func (t *Tree) AwaitSession(ctx context.Context) error { return t.s.AwaitSession(ctx) }

// Sync makes the server this session is connected to catch up with the quorum's leader: a read
// after it sees every write committed before it, this session's own write whose answer was
// lost with a connection to another server included. Read back such a write only after it.
func (t *Tree) Sync(ctx context.Context) error { return t.s.sync(ctx, t.s.root) }

// abs is the absolute path of a path relative to the namespace; "" is the namespace itself.
func (t *Tree) abs(rel string) string {
	if rel == "" {
		return t.s.root
	}
	return t.s.path(rel)
}
