package state

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/go-zookeeper/zk"
)

// LoadSessions is how many extra sessions a load opens.
const LoadSessions = loadReaderCount

// SetMultiReadLoad turns the load's multiReads on or off (on by default) and returns a func
// that restores the setting.
func SetMultiReadLoad(on bool) (restore func()) {
	was := multiReadOff.Swap(!on)
	return func() { multiReadOff.Store(was) }
}

// SetLoadedHook runs f after each load, before the config nodes' watches are armed, until the
// returned func is called.
func SetLoadedHook(f func()) (restore func()) {
	loadedHook.Store(&f)
	return func() { loadedHook.Store(nil) }
}

// SetDependsCheckedHook runs f after each dependsOn check that passed, before its write, until
// the returned func is called.
func SetDependsCheckedHook(f func()) (restore func()) {
	dependsCheckedHook.Store(&f)
	return func() { dependsCheckedHook.Store(nil) }
}

// ModelDump renders every node of a mirrored Store's model: path, version, data and children.
func (s *Store) ModelDump() string {
	m := s.mv.m
	m.mu.RLock()
	defer m.mu.RUnlock()
	var lines []string
	for p, n := range m.base.nodes {
		lines = append(lines, fmt.Sprintf("%s v%d %q %v", p, n.version, n.data, n.sortedChildren()))
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// ReadyVersion reads a job's ready node as the Store does (from the model on a mirrored
// Store): its version, and whether it exists.
func (s *Store) ReadyVersion(ctx context.Context, job string) (int32, bool, error) {
	n, err := s.get(ctx, s.path(readyDir, job))
	return n.version, n.exists, err
}

// SetReadyAt writes a job's ready count if its node still has version: the write of a
// read-modify-write.
func (s *Store) SetReadyAt(ctx context.Context, job string, count int, version int32) error {
	return s.multi(ctx, setOp(s.path(readyDir, job), []byte(strconv.Itoa(count)), version))
}

// MaxMultiBytes is the largest multi a Store sends.
func (s *Store) MaxMultiBytes() int { return s.maxMulti() }

// CreateAll creates a ready entry named prefix000000, prefix000001… for each of datas in one
// multi, as any write of the Store is sent.
func (s *Store) CreateAll(ctx context.Context, prefix string, datas [][]byte) error {
	return s.multi(ctx, s.createAllOps(prefix, datas)...)
}

// CreateAllBytes is how large CreateAll's multi is, by multiBytes (without the fence's check
// and the model's receipt, which the Store adds).
func (s *Store) CreateAllBytes(prefix string, datas [][]byte) int {
	return multiBytes(s.createAllOps(prefix, datas))
}

func (s *Store) createAllOps(prefix string, datas [][]byte) []any {
	ops := make([]any, len(datas))
	for i, d := range datas {
		ops[i] = s.createOp(s.path(readyDir, fmt.Sprintf("%s%06d", prefix, i)), d)
	}
	return ops
}

// DeleteJobAfter is DeleteJob with between called after each attempt's reads and before its
// multi, so that a test can change what was read.
func (s *Store) DeleteJobAfter(ctx context.Context, name string, between func()) error {
	return s.deleteJob(ctx, name, between)
}

// SetBeforeElectionCreate runs f just before a candidate creates its election node, until the
// returned func is called.
func SetBeforeElectionCreate(f func()) (restore func()) {
	beforeElectionCreate.Store(&f)
	return func() { beforeElectionCreate.Store(nil) }
}

// CreateElectionNode creates an election node of s's session, as a Campaign's create does.
func (s *Store) CreateElectionNode(address string) error {
	_, err := s.conn.Create(s.path(electionDir, electionPrefix), []byte(address), zk.FlagEphemeral|zk.FlagSequence, s.acl)
	return err
}

// SetBeforeLatchCreate runs f(dir, prefix) just before Lock creates its node, until the
// returned func is called.
func SetBeforeLatchCreate(f func(dir, prefix string)) (restore func()) {
	beforeLatchCreate.Store(&f)
	return func() { beforeLatchCreate.Store(nil) }
}

// CreateLatchNode creates a latch node under dir named with prefix, of t's session, as Lock's
// create does.
func (t *Tree) CreateLatchNode(dir, prefix string) error {
	_, err := t.s.conn.Create(t.s.path(dir, prefix), nil, zk.FlagEphemeral|zk.FlagSequence, t.s.acl)
	return err
}

// SetFollowBuffer sets how many watch events wait for a mirror's follow (for mirrors made from
// now on) and returns a func that restores it.
func SetFollowBuffer(n int) (restore func()) {
	was := followBuffer
	followBuffer = n
	return func() { followBuffer = was }
}

// ClientWatches counts the watches the Tree's client holds.
func (t *Tree) ClientWatches() int { return t.s.conn.Watchers() }
