package state

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/go-zookeeper/zk"
)

// A load reads the nodes below a directory in multiReads (ZooKeeper 3.6+) over the load's
// extra sessions: a few hundred requests instead of one a node, which is what the ZooKeeper
// server's CPU spends most on when it answers one getData at a time.

// juteMaxBuffer is ZooKeeper's default jute.maxbuffer: Java clients refuse a larger reply, and
// the load's sessions do too, so a batch that outgrows it fails alone and is read in halves.
const juteMaxBuffer = 0xfffff

// A batch's reply is planned to stay well under juteMaxBuffer; planned on a guess, since a
// node's size is known only once read.
const (
	batchReplyBudget = 256 << 10
	batchMaxOps      = 1000 // bounds the request too: ~60 bytes an op
	// dataGuess is a conservative guess of a node's data (the job configs here are ~400
	// bytes); once a directory's first batch is read, the largest node seen replaces it.
	dataGuess = 2 << 10
	// minDataGuess is the least a node is taken to hold, so that a directory of empty nodes
	// is not read in batches of batchMaxOps when a later node holds more.
	minDataGuess = 128
	// opReplyOverhead is a getData op's reply beyond its data: the op's header (9), the data's
	// length (4) and the stat (68).
	opReplyOverhead = 81
	// batchesInFlight per load session: one in flight while the next is sent.
	batchesInFlight = 2
)

// multiReadOff turns the batched load off, so that BenchmarkMirrorLoad can compare it with
// one getData a node on the same server in the same run.
var multiReadOff atomic.Bool

// loaded is a node a load read.
type loaded struct {
	path    string
	data    []byte
	version int32
	numKids int32 // as the data's stat says
	kids    []string
	exists  bool
}

// probeMultiRead asks each load session whether its server answers multiRead: against an
// ensemble in a rolling upgrade the sessions may be on servers of two versions. A server before
// 3.6 answers UNIMPLEMENTED and closes the connection; such a session is replaced by a fresh
// one, and the whole load reads node by node.
func (s *Store) probeMultiRead(ctx context.Context, r *loadReaders) bool {
	if multiReadOff.Load() {
		return false
	}
	failed := make([]error, len(r.conns))
	concurrently(len(r.conns), len(r.conns), func(i int) error {
		start := s.begin()
		_, failed[i] = r.conns[i].MultiRead(&zk.GetDataOp{Path: s.root})
		s.end("multiRead", start)
		return nil
	})
	ok := true
	kept := r.conns[:0]
	for i, c := range r.conns {
		if failed[i] == nil {
			kept = append(kept, c)
			continue
		}
		if ok {
			s.log.WithError(failed[i]).Info("ZooKeeper did not answer a multiRead (a server before 3.6 does not know it): the load reads one node at a time")
		}
		ok = false
		c.Close()
		if c, err := s.openReader(ctx); err == nil {
			kept = append(kept, c)
		}
	}
	r.conns = kept
	return ok
}

// loadChildren reads dir's children named names (and what is below them) into the base,
// during a load on a server that answers multiRead; refresh calls it instead of reading the
// children one by one. It returns the paths it added.
func (s *Store) loadChildren(ctx context.Context, dir string, names []string) ([]string, error) {
	paths := make([]string, len(names))
	for i, k := range names {
		paths[i] = dir + "/" + k
	}
	return s.loadLevel(ctx, paths)
}

// loadLevel reads the nodes at paths, and then all their children together, level by level:
// the 2,000 running jobs' task nodes of a busy namespace are a few batches, not 2,000.
func (s *Store) loadLevel(ctx context.Context, paths []string) ([]string, error) {
	m := s.mv.m
	r := m.loading
	// The watched directories are listed with their watch on the store's own session.
	var dirs []string
	var nodes []loaded
	for _, p := range paths {
		if _, child := m.watched(p); child {
			dirs = append(dirs, p)
		} else {
			nodes = append(nodes, loaded{path: p})
		}
	}
	fromDirs := make([][]string, len(dirs))
	var dirsErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		dirsErr = concurrently(len(dirs), len(dirs), func(i int) (err error) {
			fromDirs[i], err = s.refresh(ctx, dirs[i], true)
			return err
		})
	}()
	changed, err := s.loadPlain(ctx, r, nodes)
	<-done
	for _, c := range fromDirs {
		changed = append(changed, c...)
	}
	return changed, errors.Join(err, dirsErr)
}

// loadPlain reads nodes (none a watched directory) in batches of getData, lists those that
// have children, puts them in the base, and loads their children.
func (s *Store) loadPlain(ctx context.Context, r *loadReaders, nodes []loaded) ([]string, error) {
	if len(nodes) == 0 {
		return nil, nil
	}
	m := s.mv.m
	// The first batch, sized on the guess and read alone, tells the size of these nodes: the
	// largest seen sizes the rest (and grows if a later batch holds a larger one).
	var maxData atomic.Int64
	first := batchSize(len(nodes), dataGuess)
	if err := s.readData(ctx, r, nodes[:first], &maxData); err != nil {
		return nil, err
	}
	if rest := nodes[first:]; len(rest) > 0 {
		size := batchSize(len(rest), max(maxData.Load(), minDataGuess))
		batches := (len(rest) + size - 1) / size
		err := concurrently(batches, batchesInFlight*len(r.conns), func(i int) error {
			return s.readData(ctx, r, rest[i*size:min((i+1)*size, len(rest))], &maxData)
		})
		if err != nil {
			return nil, err
		}
	}
	var inner []int
	for i := range nodes {
		if nodes[i].exists && nodes[i].numKids > 0 {
			inner = append(inner, i)
		}
	}
	if err := s.readKids(ctx, r, nodes, inner); err != nil {
		return nil, err
	}
	changed := make([]string, 0, len(nodes))
	var next []string
	m.mu.Lock()
	for _, n := range nodes {
		if !n.exists {
			// Gone since its parent was listed.
			dir, name := dirOf(n.path)
			if parent, ok := m.base.lookup(dir); ok {
				parent.removeChild(name)
			}
			continue
		}
		mn := &mnode{data: n.data, version: n.version}
		if len(n.kids) > 0 {
			mn.children = make(map[string]struct{}, len(n.kids))
			for _, k := range n.kids {
				mn.children[k] = struct{}{}
				next = append(next, n.path+"/"+k)
			}
		}
		m.base.put(n.path, mn)
		changed = append(changed, n.path)
	}
	m.mu.Unlock()
	if len(next) == 0 {
		return changed, nil
	}
	more, err := s.loadLevel(ctx, next)
	return append(changed, more...), err
}

// batchSize is how many nodes of about dataSize bytes a batch reads to stay within the budget,
// spread evenly over the batches that count nodes need.
func batchSize(count int, dataSize int64) int {
	per := max(1, min(batchMaxOps, int(batchReplyBudget/(2*dataSize+opReplyOverhead))))
	batches := (count + per - 1) / per
	return max(1, (count+batches-1)/max(1, batches))
}

// readData reads the data of nodes in one multiRead, or in halves when the
// reply would exceed juteMaxBuffer.
func (s *Store) readData(ctx context.Context, r *loadReaders, nodes []loaded, maxData *atomic.Int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ops := make([]any, len(nodes))
	for i := range nodes {
		ops[i] = &zk.GetDataOp{Path: nodes[i].path}
	}
	start := s.begin()
	res, err := r.pick().MultiRead(ops...)
	s.end("multiRead", start)
	if errors.Is(err, zk.ErrResponseTooLarge) {
		if len(nodes) == 1 {
			// One node near the limit: the store's own session takes any size.
			return s.readOne(&nodes[0], r)
		}
		half := len(nodes) / 2
		if err := s.readData(ctx, r, nodes[:half], maxData); err != nil {
			return err
		}
		return s.readData(ctx, r, nodes[half:], maxData)
	}
	if err != nil {
		return fmt.Errorf("read %d nodes from %s on: %w", len(nodes), nodes[0].path, translate(err))
	}
	for i, res := range res {
		n := &nodes[i]
		if errors.Is(res.Error, zk.ErrNoNode) {
			continue
		}
		if res.Error != nil {
			return fmt.Errorf("read %s: %w", n.path, translate(res.Error))
		}
		n.data, n.version, n.exists = res.Data, res.Stat.Version, true
		if len(n.data) == 0 {
			n.data = nil // as Get returns an empty node's data
		}
		n.numKids = res.Stat.NumChildren
		for size := int64(len(res.Data)); size > maxData.Load(); {
			if old := maxData.Load(); size <= old || maxData.CompareAndSwap(old, size) {
				break
			}
		}
		if data, _ := s.mv.m.watched(n.path); data {
			// Read without its watch: armed after the load, which reads it again if it
			// changed since this version.
			r.readUnarmed(n.path, res.Stat.Mzxid)
		}
	}
	return nil
}

// readOne reads one node's data over the store's own session, whose replies are not limited.
func (s *Store) readOne(n *loaded, r *loadReaders) error {
	p := n.path
	start := s.begin()
	data, st, err := s.conn.Get(p)
	s.end("get", start)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", p, translate(err))
	}
	n.data, n.version, n.numKids, n.exists = data, st.Version, st.NumChildren, true
	if watch, _ := s.mv.m.watched(p); watch {
		r.readUnarmed(p, st.Mzxid)
	}
	return nil
}

// readKids lists the children of nodes[i] for each i in which, in batches of getChildren sized
// by the counts their stats gave, and in halves when a reply still outgrows juteMaxBuffer. A
// node gone since its data was read is marked gone.
func (s *Store) readKids(ctx context.Context, r *loadReaders, nodes []loaded, which []int) error {
	// A child's name costs its length and 4 bytes in the reply; the names here (job names,
	// task ids) stay well under 200 bytes. A few more children may have come since the stat.
	const perKid = 200
	for len(which) > 0 {
		budget, n := batchReplyBudget, 0
		for n < len(which) && n < batchMaxOps {
			cost := perKid * (int(nodes[which[n]].numKids) + 8)
			if n > 0 && cost > budget {
				break
			}
			budget -= cost
			n++
		}
		if err := s.listKids(ctx, r, nodes, which[:n]); err != nil {
			return err
		}
		which = which[n:]
	}
	return nil
}

func (s *Store) listKids(ctx context.Context, r *loadReaders, nodes []loaded, which []int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	ops := make([]any, len(which))
	for j, i := range which {
		ops[j] = &zk.GetChildrenOp{Path: nodes[i].path}
	}
	start := s.begin()
	res, err := r.pick().MultiRead(ops...)
	s.end("multiRead", start)
	if errors.Is(err, zk.ErrResponseTooLarge) {
		if len(which) == 1 {
			// One directory of very many children: the store's own session takes any size.
			start := s.begin()
			kids, _, err := s.conn.Children(nodes[which[0]].path)
			s.end("children", start)
			res = []zk.MultiReadResponse{{Children: kids, Error: err}}
		} else {
			half := len(which) / 2
			if err := s.listKids(ctx, r, nodes, which[:half]); err != nil {
				return err
			}
			return s.listKids(ctx, r, nodes, which[half:])
		}
	} else if err != nil {
		return fmt.Errorf("list %d nodes from %s on: %w", len(ops), nodes[which[0]].path, translate(err))
	}
	for j, res := range res {
		node := &nodes[which[j]]
		switch {
		case errors.Is(res.Error, zk.ErrNoNode):
			node.exists, node.kids = false, nil
		case res.Error != nil:
			return fmt.Errorf("list %s: %w", node.path, translate(res.Error))
		default:
			node.kids = res.Children
		}
	}
	return nil
}
