package state

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/sirupsen/logrus"
)

// The leader's model (issue 14): a mirror of the namespace's config and state subtrees (and
// the FrameworkID), loaded once when an instance becomes leader. A Store with a mirror serves
// every read of those paths from memory and validates every multi against it before sending
// it; only once ZooKeeper has taken a multi are its ops applied to the mirror, so the mirror
// is always what ZooKeeper holds after our own writes. Writes are serialized (validate, send,
// apply) so ZooKeeper and the mirror see them in one order. What others change (an operator's
// zkCli) reaches the mirror through watches on the configs and the disable and stop markers;
// a multi that ZooKeeper refuses refreshes the nodes it named, and one whose outcome is unknown
// (the connection broke) marks its nodes suspect: they are read again before the next read.
//
// The queue nodes keep the layout and formats of SPEC §4: the mirror changes how often
// ZooKeeper is read, not what is in it.

// mnode is one mirrored node. In the base layer it is changed in place under mirror.mu; a
// group's layer copies a node before changing it.
type mnode struct {
	data     []byte
	version  int32
	children map[string]struct{}
	parsed   atomic.Pointer[any]      // the config decoded from data, cached (data never changes in place)
	encoded  atomic.Pointer[[]byte]   // the decoded config encoded again (the API's JSON), cached
	sorted   atomic.Pointer[[]string] // children's names in order, cached until they change
}

func (n *mnode) addChild(name string) {
	if n.children == nil {
		n.children = map[string]struct{}{}
	}
	n.children[name] = struct{}{}
	n.sorted.Store(nil)
}

func (n *mnode) removeChild(name string) {
	delete(n.children, name)
	n.sorted.Store(nil)
}

// sortedChildren returns the children's names in order; the caller must not change it.
func (n *mnode) sortedChildren() []string {
	if p := n.sorted.Load(); p != nil {
		return *p
	}
	names := make([]string, 0, len(n.children))
	for k := range n.children {
		names = append(names, k)
	}
	sort.Strings(names)
	n.sorted.Store(&names)
	return names
}

func (n *mnode) clone() *mnode {
	c := &mnode{data: n.data, version: n.version}
	if len(n.children) > 0 {
		c.children = make(map[string]struct{}, len(n.children))
		for k := range n.children {
			c.children[k] = struct{}{}
		}
	}
	if p := n.parsed.Load(); p != nil {
		c.parsed.Store(p)
	}
	if e := n.encoded.Load(); e != nil {
		c.encoded.Store(e)
	}
	return c
}

// layer holds nodes: the base holds them all; a layer above it holds only what it changed.
type layer struct {
	parent *layer
	nodes  map[string]*mnode
	gone   map[string]bool // deleted in this layer (only above the base)
}

func newLayer(parent *layer) *layer {
	return &layer{parent: parent, nodes: map[string]*mnode{}, gone: map[string]bool{}}
}

func (l *layer) lookup(p string) (*mnode, bool) {
	for x := l; x != nil; x = x.parent {
		if x.gone[p] {
			return nil, false
		}
		if n, ok := x.nodes[p]; ok {
			return n, true
		}
	}
	return nil, false
}

// own returns p's node for changing in this layer: in the base the node itself, above it a
// copy kept in this layer.
func (l *layer) own(p string) (*mnode, bool) {
	if n, ok := l.nodes[p]; ok {
		return n, true
	}
	n, ok := l.lookup(p)
	if !ok {
		return nil, false
	}
	if l.parent == nil {
		return n, true
	}
	c := n.clone()
	l.nodes[p] = c
	return c, true
}

func (l *layer) put(p string, n *mnode) {
	l.nodes[p] = n
	delete(l.gone, p)
}

func (l *layer) remove(p string) {
	delete(l.nodes, p)
	if l.parent != nil {
		l.gone[p] = true
	}
}

// merge moves this layer's changes into its parent.
func (l *layer) merge() {
	for p := range l.gone {
		l.parent.remove(p)
	}
	for p, n := range l.nodes {
		l.parent.put(p, n)
	}
}

// mirror is the model itself.
type mirror struct {
	root    string
	writeMu sync.Mutex   // one write at a time: validate, send, apply
	mu      sync.RWMutex // guards base against the readers while a write applies
	base    *layer

	// loading is set while Mirror loads the model: extra sessions for the unwatched reads.
	loading *loadReaders
	armed   chan struct{} // closed once the watches the load left unarmed are armed
	// caught takes Caught's turns to follow; followed is closed when follow has ended.
	caught   chan chan struct{}
	followed chan struct{}

	// receipt resolves the outcome of a multi whose answer was lost (receipt.go); nil on a
	// store that is not a leader's.
	receipt *receipt

	suspectMu sync.Mutex
	// suspect holds the nodes whose last write's outcome is unknown (true: read the node and
	// what is below it again), and their parents (false: read the node and its list of
	// children again).
	suspect    map[string]bool
	hasSuspect atomic.Bool
}

// covered reports whether p is mirrored.
func (m *mirror) covered(p string) bool {
	return strings.HasPrefix(p, m.root+"/config") || strings.HasPrefix(p, m.root+"/state") || p == m.root+"/"+frameworkIDKey
}

// mirrorView is how a Store reaches the mirror: the base, or a group's layer above it.
type mirrorView struct {
	m     *mirror
	group *group // nil: reads and writes go to the base
}

// read runs f on the layer this view reads, holding the base's read lock.
func (v *mirrorView) read(f func(l *layer)) {
	v.m.mu.RLock()
	defer v.m.mu.RUnlock()
	if v.group != nil {
		f(v.group.layer)
		return
	}
	f(v.m.base)
}

func dirOf(p string) (string, string) {
	i := strings.LastIndexByte(p, '/')
	return p[:i], p[i+1:]
}

// apply performs ops on l as ZooKeeper would, all or nothing: on the first op ZooKeeper would
// refuse it returns that op's index and the error ZooKeeper would give, and l is unchanged.
func (m *mirror) apply(l *layer, ops []any) (int, error) {
	t := newLayer(l)
	for i, op := range ops {
		if err := m.apply1(t, op); err != nil {
			return i, err
		}
	}
	t.merge()
	return -1, nil
}

func (m *mirror) apply1(l *layer, op any) error {
	switch o := op.(type) {
	case *zk.CreateRequest:
		if _, ok := l.lookup(o.Path); ok {
			return zk.ErrNodeExists
		}
		dir, name := dirOf(o.Path)
		if m.covered(dir) {
			parent, ok := l.own(dir)
			if !ok {
				return zk.ErrNoNode
			}
			parent.addChild(name)
		}
		l.put(o.Path, &mnode{data: o.Data})
	case *zk.SetDataRequest:
		n, err := versioned(l, o.Path, o.Version)
		if err != nil {
			return err
		}
		c := &mnode{data: o.Data, version: n.version + 1, children: n.children}
		if l.parent != nil && len(n.children) > 0 { // a layer never shares a map it may change
			c.children = n.clone().children
		}
		l.put(o.Path, c)
	case *zk.DeleteRequest:
		n, err := versioned(l, o.Path, o.Version)
		if err != nil {
			return err
		}
		if len(n.children) > 0 {
			return zk.ErrNotEmpty
		}
		dir, name := dirOf(o.Path)
		if parent, ok := l.own(dir); ok {
			parent.removeChild(name)
		}
		l.remove(o.Path)
	case *zk.CheckVersionRequest:
		if _, err := versioned(l, o.Path, o.Version); err != nil {
			return err
		}
	default:
		return fmt.Errorf("state: mirror cannot apply %T", op)
	}
	return nil
}

// versioned returns p's node if it exists at version (-1: at any), or the error ZooKeeper
// would give.
func versioned(l *layer, p string, version int32) (*mnode, error) {
	n, ok := l.lookup(p)
	if !ok {
		return nil, zk.ErrNoNode
	}
	if version != -1 && version != n.version {
		return nil, zk.ErrBadVersion
	}
	return n, nil
}

// markSuspect records nodes whose state after a failed request is unknown.
//
// A node is read again with all that is below it: a failed refresh may have taken the node's
// new list of children and not read all of them, and a failed write may have changed any of
// its nodes. Its parent is read again only as far as the node's own creation or deletion
// shows, in its list of children (and its data and version): the parent of a queue root is
// /state itself, and reading it all again would read every running task, ledger and retry of
// the namespace, one request a node, while every read and write of the leader waits.
func (m *mirror) markSuspect(paths ...string) {
	m.suspectMu.Lock()
	defer m.suspectMu.Unlock()
	if m.suspect == nil {
		m.suspect = map[string]bool{}
	}
	for _, p := range paths {
		if m.covered(p) {
			m.suspect[p] = true
			if dir, _ := dirOf(p); m.covered(dir) && !m.suspect[dir] {
				m.suspect[dir] = false
			}
		}
	}
	m.hasSuspect.Store(len(m.suspect) > 0)
}

// settle reads the suspect nodes again. Until it succeeds, reads fail rather than guess.
func (s *Store) settle(ctx context.Context) error {
	m := s.mv.m
	if !m.hasSuspect.Load() {
		return nil
	}
	m.writeMu.Lock()
	defer m.writeMu.Unlock()
	return s.settleLocked(ctx)
}

func (s *Store) settleLocked(ctx context.Context) error {
	m := s.mv.m
	if !m.hasSuspect.Load() {
		return nil
	}
	m.suspectMu.Lock()
	paths := make([]string, 0, len(m.suspect))
	deep := make(map[string]bool, len(m.suspect))
	for p, d := range m.suspect {
		paths = append(paths, p)
		deep[p] = d
	}
	m.suspectMu.Unlock()
	sort.Strings(paths) // parents first
	for _, p := range paths {
		_, err := s.refresh(ctx, p, deep[p])
		for err != nil {
			// A refresh that failed part way may have taken p's new list of children and not
			// read them all, which a shallow read again would take for known: from now on p
			// is read again deep.
			deep[p] = true
			if !errors.Is(err, ErrUnavailable) {
				break
			}
			// A broken connection is not a failed read while the session lives: wait for
			// the client to reconnect, then read again.
			if werr := s.AwaitSession(ctx); werr != nil {
				break
			}
			_, err = s.refresh(ctx, p, true)
		}
		if err != nil {
			m.suspectMu.Lock()
			m.suspect[p] = true
			m.suspectMu.Unlock()
			return fmt.Errorf("read again what a failed write may have changed: %w", err)
		}
		m.suspectMu.Lock()
		delete(m.suspect, p)
		m.hasSuspect.Store(len(m.suspect) > 0)
		m.suspectMu.Unlock()
	}
	return nil
}

func opPaths(ops []any) []string {
	out := make([]string, 0, len(ops))
	for _, op := range ops {
		_, p := describe(op)
		out = append(out, p)
	}
	return out
}

// mirroredMulti is multi on a Store with a mirror. In a group it only records the ops (see
// Group); otherwise it validates them against the mirror, sends them and applies them.
func (s *Store) mirroredMulti(ctx context.Context, ops []any) error {
	v := s.mv
	if v.group != nil {
		// The group's layer reads through to the base, which a watch may be changing.
		v.m.mu.RLock()
		i, err := v.m.apply(v.group.layer, ops)
		v.m.mu.RUnlock()
		if err != nil {
			return refused(ops[i], err)
		}
		v.group.ops = append(v.group.ops, ops...)
		for _, op := range ops {
			v.group.bytes += opBytes(op)
		}
		return nil
	}
	v.m.writeMu.Lock()
	defer v.m.writeMu.Unlock()
	if err := s.settleLocked(ctx); err != nil {
		return err
	}
	return s.sendMirrored(ctx, ops)
}

// sendMirrored validates ops against the base, sends them as one multi and applies them; the
// caller holds writeMu. A refusal — the mirror's or ZooKeeper's — reads the refused node (and
// its parent) again, so that a retry builds on what ZooKeeper holds.
func (s *Store) sendMirrored(ctx context.Context, ops []any) error {
	m := s.mv.m
	if i, err := m.apply(newLayer(m.base), ops); err != nil {
		// The mirror says ZooKeeper would refuse it. The mirror could be behind a change by
		// someone else that no watch covers: read the node again and let the caller retry.
		op, p := describe(ops[i])
		if _, rerr := s.refreshWithParent(ctx, p); rerr != nil {
			return fmt.Errorf("%s %s: %w", op, p, rerr)
		}
		return refused(ops[i], err)
	}
	var seq uint64
	sent := ops
	if m.receipt != nil {
		var stamp any
		stamp, seq = m.receipt.next()
		sent = append([]any{stamp}, ops...)
	}
	err := s.sendMulti(ctx, sent)
	var opErr *OpError
	switch {
	case err == nil:
		m.committed(ops)
		return nil
	case errors.As(err, &opErr) && m.receipt != nil && opErr.Path == m.receipt.path:
		err = fmt.Errorf("%w: the write receipt: %w", ErrNotLeader, err)
		s.fence.fenceRefused(err)
		return err
	case errors.As(err, &opErr):
		// The mirror said ZooKeeper would take it: the mirror was behind (a change by
		// someone else that no watch covers). Read the node again, and say "changed
		// concurrently" too, so that read-modify-write loops build again on what is there.
		if _, rerr := s.refreshWithParent(ctx, opErr.Path); rerr != nil {
			m.markSuspect(opErr.Path)
		}
		return fmt.Errorf("%w: %w", ErrConflict, err)
	case errors.Is(err, ErrNotLeader), errors.Is(err, ErrTooLarge): // ErrTooLarge: not sent
		return err
	case m.receipt != nil && errors.Is(err, ErrUnavailable) && ctx.Err() == nil:
		// No answer, the connection broke: the receipt tells whether ZooKeeper applied the
		// multi.
		ok, rerr := s.applied(ctx, m.receipt, seq)
		switch {
		case rerr != nil:
			m.markSuspect(opPaths(ops)...)
			return fmt.Errorf("%w; its outcome is unknown: %w", err, rerr)
		case ok:
			m.committed(ops)
			return nil
		}
		// Not applied, and nothing was sent after it (we hold writeMu, which watches take
		// too): send it again. Each round needs the connection to break again, and ends when
		// the session does.
		return s.sendMirrored(ctx, ops)
	default: // no answer: the multi may or may not have been applied
		m.markSuspect(opPaths(ops)...)
		return err
	}
}

// committed applies to the base ops that ZooKeeper took; the caller holds writeMu, and
// validated them under it, so the apply cannot fail — if it did, the nodes are read again.
func (m *mirror) committed(ops []any) {
	m.mu.Lock()
	_, err := m.apply(m.base, ops)
	m.mu.Unlock()
	if err != nil {
		m.markSuspect(opPaths(ops)...)
	}
}

func (s *Store) refreshWithParent(ctx context.Context, p string) ([]string, error) {
	changed, err := s.refresh(ctx, p, true)
	if err != nil {
		return nil, err
	}
	if dir, _ := dirOf(p); s.mv.m.covered(dir) {
		more, err := s.refresh(ctx, dir, false)
		return append(changed, more...), err
	}
	return changed, nil
}

// refresh reads p from ZooKeeper into the base (the caller holds writeMu) and returns the
// paths whose presence or data changed. deep reads p's existing children again too; otherwise
// only children that appeared are read (watches tell of changes to the others).
func (s *Store) refresh(ctx context.Context, p string, deep bool) ([]string, error) {
	m := s.mv.m
	if !m.covered(p) {
		return nil, nil
	}
	data, version, kids, exists, err := s.readNode(ctx, p)
	if err != nil {
		return nil, err
	}
	var changed []string
	m.mu.Lock()
	old, had := m.base.lookup(p)
	if !exists {
		if had {
			changed = m.removeSubtree(p)
		}
		m.mu.Unlock()
		return changed, nil
	}
	n := &mnode{data: data, version: version}
	if had && old.version == version && string(old.data) == string(data) {
		n = old
	} else {
		changed = append(changed, p)
	}
	if !had {
		if dir, name := dirOf(p); m.covered(dir) {
			if parent, ok := m.base.lookup(dir); ok {
				parent.addChild(name)
			}
		}
	}
	var gone, fresh, keep []string
	want := map[string]struct{}{}
	for _, k := range kids {
		want[k] = struct{}{}
	}
	if had {
		for k := range old.children {
			if _, ok := want[k]; !ok {
				gone = append(gone, k)
			}
		}
	}
	for _, k := range kids {
		if _, ok := old.childrenSet()[k]; had && ok {
			keep = append(keep, k)
		} else {
			fresh = append(fresh, k)
		}
	}
	n.children = nil
	if len(want) > 0 {
		n.children = want
	}
	n.sorted.Store(nil)
	m.base.put(p, n)
	for _, k := range gone {
		changed = append(changed, m.removeSubtree(p+"/"+k)...)
	}
	m.mu.Unlock()
	more := fresh
	if deep {
		more = append(more, keep...)
	}
	if r := m.loading; r != nil && r.multiRead && len(more) > 0 {
		more, err := s.loadChildren(ctx, p, more)
		return append(changed, more...), err
	}
	results := make([][]string, len(more))
	err = concurrently(len(more), 64, func(i int) (err error) {
		results[i], err = s.refresh(ctx, p+"/"+more[i], deep)
		return err
	})
	for _, r := range results {
		changed = append(changed, r...)
	}
	return changed, err
}

func (n *mnode) childrenSet() map[string]struct{} {
	if n == nil {
		return nil
	}
	return n.children
}

// removeSubtree drops p and what is below it from the base (the caller holds mu) and returns
// the removed paths.
func (m *mirror) removeSubtree(p string) []string {
	n, ok := m.base.lookup(p)
	if !ok {
		return nil
	}
	out := []string{p}
	for k := range n.children {
		out = append(out, m.removeSubtree(p+"/"+k)...)
	}
	m.base.remove(p)
	if dir, name := dirOf(p); m.covered(dir) {
		if parent, ok := m.base.lookup(dir); ok {
			parent.removeChild(name)
		}
	}
	return out
}

// readNode reads a node and the names of its children from ZooKeeper, arming the watches the
// mirror keeps (see watched).
func (s *Store) readNode(ctx context.Context, p string) (data []byte, version int32, kids []string, exists bool, err error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, nil, false, err
	}
	dataWatch, childWatch := s.mv.m.watched(p)
	// A watch belongs to the session that set it, so watched reads go over the store's own
	// connection. During a load every node's data is read over the load's extra sessions
	// too, the config nodes' without their watch: those are armed after the load (arm), or
	// one connection's ~14,000 reads a second would make 100,000 jobs take 7 s.
	conn := s.conn
	var st *zk.Stat
	r := s.mv.m.loading
	if r != nil && !childWatch {
		conn = r.pick()
		if dataWatch {
			dataWatch = false
			defer func() {
				if exists && err == nil {
					r.readUnarmed(p, st.Mzxid)
				}
			}()
		}
	}
	start := s.begin()
	if childWatch {
		// The watched directories are layout nodes without data: one list, whose stat has
		// the version (the queue roots' version is what admit checks).
		kids, st, _, err = s.conn.ChildrenW(p)
		s.end("children", start)
		if errors.Is(err, zk.ErrNoNode) {
			return nil, 0, nil, false, nil
		}
		if err != nil {
			return nil, 0, nil, false, fmt.Errorf("list %s: %w", p, translate(err))
		}
		return nil, st.Version, kids, true, nil
	}
	if dataWatch {
		data, st, _, err = conn.GetW(p)
	} else {
		data, st, err = conn.Get(p)
		if errors.Is(err, zk.ErrResponseTooLarge) { // a load session's limit; ours has none
			data, st, err = s.conn.Get(p)
		}
	}
	s.end("get", start)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, 0, nil, false, nil
	}
	if err != nil {
		return nil, 0, nil, false, fmt.Errorf("read %s: %w", p, translate(err))
	}
	if st.NumChildren > 0 {
		start := s.begin()
		kids, _, err = conn.Children(p)
		if errors.Is(err, zk.ErrResponseTooLarge) {
			kids, _, err = s.conn.Children(p)
		}
		s.end("children", start)
		if errors.Is(err, zk.ErrNoNode) {
			return nil, 0, nil, false, nil
		}
		if err != nil {
			return nil, 0, nil, false, fmt.Errorf("list %s: %w", p, translate(err))
		}
	}
	return data, st.Version, kids, true, nil
}

// watched says which watches the mirror keeps on p: the data of each app and job config, and
// the membership of the config directories, of the disable and stop markers, and of the ready
// and failover queues (work a tool queued). The rest of the queues is written by the leader
// alone and is not watched.
func (m *mirror) watched(p string) (data, children bool) {
	dir, _ := dirOf(p)
	switch {
	case dir == m.root+"/"+appsDir || dir == m.root+"/"+jobsDir:
		return true, false
	case p == m.root+"/"+appsDir || p == m.root+"/"+jobsDir || p == m.root+"/"+disableAppDir ||
		p == m.root+"/"+disableJobDir || p == m.root+"/"+stoppedDir ||
		p == m.root+"/"+readyDir || p == m.root+"/"+failoverDir:
		return false, true
	}
	return false, false
}

// mirrorRead runs f on the view's layer under the base's read lock, once the nodes a failed
// write left suspect have been read again: a read never answers from a guess.
func (s *Store) mirrorRead(ctx context.Context, f func(l *layer)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := s.settle(ctx); err != nil {
		return err
	}
	s.mv.read(f)
	return nil
}

// mirroredNode returns p from the view as a node, with its mirrored node for caching.
func (s *Store) mirroredNode(ctx context.Context, p string) (node, *mnode, error) {
	var out node
	var mn *mnode
	err := s.mirrorRead(ctx, func(l *layer) {
		if n, ok := l.lookup(p); ok {
			// Copied under the lock: the base changes a node's children in place.
			out = node{data: n.data, version: n.version, exists: true,
				stat: &zk.Stat{Version: n.version, NumChildren: int32(len(n.children))}}
			mn = n
		}
	})
	return out, mn, err
}

func (s *Store) mirroredChildren(ctx context.Context, p string) ([]string, error) {
	var names []string
	err := s.mirrorRead(ctx, func(l *layer) {
		if n, ok := l.lookup(p); ok {
			names = append([]string(nil), n.sortedChildren()...)
		}
	})
	return names, err
}

// mirroredAnyChild is anyChild from the mirror: the names in the map's order, unsorted.
func (s *Store) mirroredAnyChild(ctx context.Context, p string, match func(name string) bool) (bool, error) {
	found := false
	err := s.mirrorRead(ctx, func(l *layer) {
		if n, ok := l.lookup(p); ok {
			for name := range n.children {
				if match(name) {
					found = true
					return
				}
			}
		}
	})
	return found, err
}

// mirroredReadChildren is readChildren from the mirror, in one pass under one lock.
func (s *Store) mirroredReadChildren(ctx context.Context, p string) ([]namedNode, error) {
	var out []namedNode
	err := s.mirrorRead(ctx, func(l *layer) {
		n, ok := l.lookup(p)
		if !ok {
			return
		}
		names := n.sortedChildren()
		out = make([]namedNode, 0, len(names))
		for _, name := range names {
			if c, ok := l.lookup(p + "/" + name); ok {
				out = append(out, namedNode{name: name, node: node{data: c.data, version: c.version, exists: true, mn: c}})
			}
		}
	})
	return out, err
}

// cachedParse decodes a config node's data once per version of the node.
func cachedParse[T any](m *mnode, kind, name string, data []byte, parse func([]byte) (T, error)) (T, error) {
	if m != nil {
		if p := m.parsed.Load(); p != nil {
			if v, ok := (*p).(T); ok {
				return v, nil
			}
		}
	}
	v, err := parseConfig(kind, name, data, parse)
	if err == nil && m != nil {
		var a any = v
		m.parsed.Store(&a)
	}
	return v, err
}

// group collects the writes of several operations into one multi (group commit).
type group struct {
	layer *layer
	ops   []any
	bytes int // the ops' share of multiBytes
}

// Group returns a view of s, which must have a mirror, whose writes are not sent but
// collected: each operation sees the effects of those before it, and Commit writes them all
// in one multi. Use a group from one goroutine.
func (s *Store) Group() *Store {
	if s.mv == nil {
		panic("state: Group needs a mirrored Store")
	}
	return &Store{shared: s.shared, fence: s.fence, mv: &mirrorView{m: s.mv.m, group: &group{layer: newLayer(s.mv.m.base)}}}
}

// Ops is how many ops the group has collected.
func (s *Store) Ops() int { return len(s.mv.group.ops) }

// Bytes is about how large the group's multi is so far (multiBytes).
func (s *Store) Bytes() int { return multiBytes(nil) + s.mv.group.bytes }

// Commit writes what the group collected as one multi. On any error nothing of it is written
// (or, when the connection broke, its outcome is unknown and its nodes are read again before
// the next read); the operations may then be done again one by one.
func (s *Store) Commit(ctx context.Context) error {
	g := s.mv.group
	if len(g.ops) == 0 {
		return nil
	}
	m := s.mv.m
	m.writeMu.Lock()
	defer m.writeMu.Unlock()
	if err := s.settleLocked(ctx); err != nil {
		return err
	}
	if err := s.sendMirrored(ctx, g.ops); err != nil {
		return fmt.Errorf("group of %d ops: %w", len(g.ops), err)
	}
	return nil
}

// Mirror loads the mirror and returns a view of s that uses it (see the top of this file).
// onChange, if set, is told of every config or marker that changed by a watch; it must not
// block. The mirror lives, and its watches are followed, until ctx ends. On a fenced store the
// model's writes end those of any earlier model of the same election node (newReceipt): one
// model a term, loaded again only if its load failed.
func (s *Store) Mirror(ctx context.Context, onChange func(Change)) (*Store, error) {
	m := &mirror{root: s.root, base: newLayer(nil), armed: make(chan struct{}), caught: make(chan chan struct{}), followed: make(chan struct{})}
	v := &Store{shared: s.shared, fence: s.fence, mv: &mirrorView{m: m}}
	// The roots exist (ensureLayout); the FrameworkID may not.
	m.base.put(s.root+"/config", &mnode{})
	m.base.put(s.root+"/state", &mnode{})
	if s.fence != nil {
		r, err := s.newReceipt(ctx)
		if err != nil {
			return nil, fmt.Errorf("load the leader's model: %w", err)
		}
		m.receipt = r
		go func() {
			<-ctx.Done()
			s.dropReceipt(r)
		}()
	}
	m.writeMu.Lock()
	events := make(chan string, followBuffer)
	overflow := &dropped{wake: make(chan struct{}, 1)}
	wf := &watchFunc{f: func(ev zk.Event) {
		if !m.covered(ev.Path) {
			return
		}
		select {
		case events <- ev.Path:
		default:
			overflow.note() // handled by follow reading every watched directory again
		}
	}}
	s.watchers.Store(wf)
	if r, err := s.openLoadReaders(ctx, loadReaderCount); err != nil {
		// Slower, not wrong: every read then goes over the store's own session.
		s.log.WithError(err).Warn("load the leader's model over one session")
	} else if r.multiRead = s.probeMultiRead(ctx, r); len(r.conns) > 0 {
		m.loading = r
		defer r.close()
	}
	// The subtrees are disjoint: the config's watched reads on our session overlap the
	// state's unwatched ones on the extra sessions.
	roots := []string{s.root + "/config", s.root + "/state", s.root + "/" + frameworkIDKey}
	err := concurrently(len(roots), len(roots), func(i int) error {
		_, err := v.refresh(ctx, roots[i], true)
		return err
	})
	var armNow []armItem
	if m.loading != nil {
		armNow = m.loading.unarmed
	}
	m.loading = nil
	m.writeMu.Unlock()
	if err != nil {
		s.watchers.CompareAndSwap(wf, nil)
		return nil, fmt.Errorf("load the leader's model: %w", err)
	}
	if h := loadedHook.Load(); h != nil {
		(*h)()
	}
	go func() {
		defer close(m.followed)
		v.follow(ctx, wf, events, overflow, onChange)
	}()
	go func() {
		defer close(m.armed)
		v.arm(ctx, armNow, events)
	}()
	return v, nil
}

// loadedHook, when set (by a test), runs after a load and before the watches the load left
// unarmed are armed: the window in which someone else's change must not be missed.
var loadedHook atomic.Pointer[func()]

// Watched is closed once every config node's watch is armed (or the mirror's ctx ended): from
// then on others' changes reach the model within moments.
func (s *Store) Watched() <-chan struct{} { return s.mv.m.armed }

// arm sets the watches of the config nodes the load read without them. A node that changed
// since the load read it (or went) is reported as if its watch had fired, so nothing changed
// by someone else between the load and the watch is missed; after that the watch tells. The
// report makes follow read the node itself again (its data, not only its directory's list).
//
// A watch that cannot be set (the connection lost just after a takeover, as when ZooKeeper
// restarts) is tried again, at growing intervals, until it is set or ctx ends: a config left
// unwatched would take others' changes to it only at the next takeover, days later. The
// comparison with the load's zxid covers the changes made meanwhile.
func (s *Store) arm(ctx context.Context, items []armItem, events chan<- string) {
	if len(items) == 0 {
		return
	}
	start, total := time.Now(), len(items)
	wait := armRetryMin
	for round := 1; ; round++ {
		failed := make([]error, len(items))
		concurrently(len(items), 64, func(i int) error {
			failed[i] = s.armOne(ctx, items[i], events)
			return nil
		})
		if ctx.Err() != nil {
			return
		}
		left := items[:0:0]
		var first error
		for i, err := range failed {
			if err != nil {
				left = append(left, items[i])
				first = cmp.Or(first, err)
			}
		}
		log := s.log.WithFields(logrus.Fields{"watches": total, "took": time.Since(start).Round(time.Millisecond)})
		if len(left) == 0 {
			if round > 1 {
				log.Info("config nodes watched")
			} else {
				log.Debug("config nodes watched")
			}
			return
		}
		if round == 1 {
			// Said once, then again when they are armed.
			log.WithError(first).WithField("unwatched", len(left)).Warn("could not watch every config node; trying again (changes others make to them are seen once watched)")
		}
		items = left
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return
		}
		wait = min(2*wait, armRetryMax)
	}
}

// armRetryMin and armRetryMax bound the wait between two attempts to arm the config watches.
const (
	armRetryMin = 100 * time.Millisecond
	armRetryMax = 10 * time.Second
)

// armOne sets one config node's watch and reports the node if it changed since the load.
func (s *Store) armOne(ctx context.Context, it armItem, events chan<- string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	start := s.begin()
	_, st, _, err := s.conn.GetW(it.path)
	s.end("get", start)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("watch %s: %w", it.path, translate(err))
	}
	// The zxid of the node's last change, not its version: a config deleted and created
	// again (an operator registering a job anew) starts again at version 0, which a
	// never-updated config had when the load read it, while its Mzxid is new.
	if err != nil || st.Mzxid != it.mzxid {
		select {
		case events <- it.path:
		case <-ctx.Done():
		}
	}
	return nil
}

// Change is a config or marker that someone changed, found by a watch.
type Change struct {
	Kind string // "app", "job", "disable-app", "disable-job", "stopped", "ready" or "failover"
	Name string
}

type watchFunc struct{ f func(zk.Event) }

// dropped tells follow that watch events were dropped. It wakes follow too: the dropped
// events may be the last for a while, and nothing else would send it round again.
type dropped struct {
	lost atomic.Bool
	wake chan struct{} // capacity 1
}

func (d *dropped) note() {
	d.lost.Store(true)
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// followBuffer is how many watch events wait for follow; beyond it they are dropped, and
// follow reads every watched directory again, deep.
var followBuffer = 4096

// followCoalesce is how long follow waits after a watch fires for more to fire, so that a
// burst is read once; well within the second in which others' changes must be seen.
const followCoalesce = 20 * time.Millisecond

// follow reads again what the watches report, until ctx ends. It then stops wf, its mirror's
// watcher, from being told of events, unless a later mirror of the Store (the next term's) has
// put its own in place already: that one must go on being told.
func (s *Store) follow(ctx context.Context, wf *watchFunc, events <-chan string, overflow *dropped, onChange func(Change)) {
	defer s.watchers.CompareAndSwap(wf, nil)
	m := s.mv.m
	dirs := []string{appsDir, jobsDir, disableAppDir, disableJobDir, stoppedDir, readyDir, failoverDir}
	for {
		var batch []string
		var caught []chan struct{} // Caught's turns: told once this batch is applied
		select {
		case <-ctx.Done():
			return
		case p := <-events:
			batch = append(batch, p)
		case <-overflow.wake:
		case c := <-m.caught:
			caught = append(caught, c)
		}
		// A burst of changes (every fire of a busy minute creates a ready node) fires the
		// directory watches one after another: take them together, at a small delay.
		select {
		case <-time.After(followCoalesce):
		case <-ctx.Done():
			return
		}
	more:
		for {
			select {
			case p := <-events:
				batch = append(batch, p)
			case c := <-m.caught:
				caught = append(caught, c)
			default:
				break more
			}
		}
		// Events were lost: a lost change of a child's data (another's update of a job) is
		// seen only by reading every child again, which also watches it again (a watch
		// fires once, and only a read sets it anew).
		var deep []string
		if overflow.lost.Swap(false) {
			for _, d := range dirs {
				deep = append(deep, s.path(d))
			}
			batch = append(batch, deep...)
		}
		m.writeMu.Lock()
		var changed []string
		for _, p := range dedupe(batch) {
			c, err := s.refresh(ctx, p, slices.Contains(deep, p))
			if err != nil {
				m.markSuspect(p)
				continue
			}
			changed = append(changed, c...)
		}
		m.writeMu.Unlock()
		if onChange != nil {
			for _, p := range changed {
				if c, ok := m.changeOf(p); ok {
					onChange(c)
				}
			}
		}
		for _, c := range caught {
			close(c)
		}
	}
}

// errNotFollowing is Caught's answer once the model's term has ended.
var errNotFollowing = errors.New("caught up: the model no longer follows ZooKeeper (its term ended)")

// Caught returns once the model has applied every change that ZooKeeper had applied when it
// was called, others' included, which reach the model by watches: then what the model says
// is what a read of ZooKeeper would have said at the call, or later. It makes one request,
// a sync on the model's session: ZooKeeper sends a session's watch events before the answer
// to any later request of that session, so the answer comes after every event owed, each
// handed to follow by then; Caught then waits for follow to apply them. (After a lost
// connection the sync is sent again, on the new one: the same holds there.)
func (s *Store) Caught(ctx context.Context) error {
	if s.mv == nil {
		return errors.New("caught up: not a model (Mirror)")
	}
	m := s.mv.m
	if err := s.sync(ctx, s.root); err != nil {
		return fmt.Errorf("caught up: %w", err)
	}
	done := make(chan struct{})
	select {
	case m.caught <- done:
	case <-m.followed:
		return errNotFollowing
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-m.followed:
		return errNotFollowing
	case <-ctx.Done():
		return ctx.Err()
	}
}

func dedupe(ps []string) []string {
	sort.Strings(ps)
	out := ps[:0]
	for i, p := range ps {
		if i == 0 || p != ps[i-1] {
			out = append(out, p)
		}
	}
	return out
}

func (m *mirror) changeOf(p string) (Change, bool) {
	dir, name := dirOf(p)
	for kind, d := range map[string]string{"app": appsDir, "job": jobsDir, "disable-app": disableAppDir, "disable-job": disableJobDir,
		"stopped": stoppedDir, "ready": readyDir, "failover": failoverDir} {
		if dir == m.root+"/"+d {
			return Change{Kind: kind, Name: name}, true
		}
	}
	return Change{}, false
}

// cachedJSON encodes a config node's decoded config once per version of the node.
func cachedJSON[T any](m *mnode, kind, name string, data []byte, parse func([]byte) (T, error)) (json.RawMessage, error) {
	if m != nil {
		if e := m.encoded.Load(); e != nil {
			return *e, nil
		}
	}
	v, err := cachedParse(m, kind, name, data, parse)
	if err != nil {
		return nil, err
	}
	e, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %s %q: %w", kind, name, err)
	}
	if m != nil {
		m.encoded.Store(&e)
	}
	return e, nil
}
