package state

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/ejcloud/ejcloud/taskid"
)

// ReadyEntry is a job's pending whole-job runs, with the node version it was read at (for the
// version checks of RecordLaunch).
type ReadyEntry struct {
	JobName string
	Count   int
	Version int32
}

// RunningEntry is a launched task: the running node of its shard (of its own, for a job whose
// runs overlap).
type RunningEntry struct {
	Meta    taskid.Meta
	TaskID  string
	Version int32
}

// FailoverEntry is a shard waiting to be relaunched, with the id of the task that failed.
type FailoverEntry struct {
	Meta    taskid.Meta
	TaskID  string
	Version int32
	Node    string // the node's name: the shard's (Meta), or the failed task's id for a job whose runs overlap
}

// A queue node is named by its shard, {job}@-@{item} (SPEC §4), so a shard has one running task
// and one failover entry at most. A job with concurrencyPolicy Allow runs a shard again while
// its last run still runs: its nodes are named by the task id instead, so that a shard has one
// per run. nodeName is the name of task id's node.
func nodeName(id taskid.ID, byTask bool) string {
	if byTask {
		return id.String()
	}
	return id.Meta.String()
}

// entryNode is the name of an entry's node (Node, or the shard's for an entry made by hand).
func entryNode(m taskid.Meta, node string) string {
	if node != "" {
		return node
	}
	return m.String()
}

// admit enforces the queue-size limit before a new child is created under a queue root and
// returns an op that makes the check part of the same multi: it bumps the root's version, so
// concurrent adds cannot both pass a check made against the same count.
func (s *Store) admit(ctx context.Context, dir string) (any, error) {
	root := s.path(dir)
	st, err := s.stat(ctx, root)
	if err != nil {
		return nil, err
	}
	if st == nil {
		return nil, &OpError{Op: "stat", Path: root, Err: ErrNotFound}
	}
	if int(st.NumChildren) >= s.queueLimit {
		s.log.WithField("queue", root).WithField("limit", s.queueLimit).
			Warn("queue is full (job-state-queue-size); refusing the add")
		return nil, &OpError{Op: "admit", Path: root, Err: fmt.Errorf("%w: %d entries (job-state-queue-size %d)", ErrQueueFull, st.NumChildren, s.queueLimit)}
	}
	return setOp(root, nil, st.Version), nil
}

// conflictIfExists turns "already exists" into a conflict, for creates that lost a race and
// must be retried as updates.
func conflictIfExists(err error) error {
	if errors.Is(err, ErrExists) {
		return fmt.Errorf("%w: %w", ErrConflict, err)
	}
	return err
}

// AddReady records one fire of a job (SPEC §5.3): with misfire the pending count grows by one
// (created at 1), without it the count becomes 1. Updates are version-checked and retried, so
// concurrent fires never lose a count. A new entry is refused with ErrQueueFull when the ready
// root already has job-state-queue-size children.
func (s *Store) AddReady(ctx context.Context, job string, misfire bool) error {
	p := s.path(readyDir, job)
	err := retry(ctx, func() error {
		err := s.addReady(ctx, p, misfire)
		// A leader's model resolves a multi whose answer was lost itself (receipt.go), so
		// there this loop never runs. Elsewhere: without misfire a fire sets the count to 1,
		// so after a broken connection, whatever the lost multi did, doing it again on what
		// ZooKeeper now holds applies it exactly once. With misfire the count grows by one,
		// and a lost multi that did apply cannot be told apart: that error is returned.
		for !misfire && errors.Is(err, ErrUnavailable) && s.AwaitSession(ctx) == nil {
			err = s.addReady(ctx, p, misfire)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("add job %q to ready queue: %w", job, err)
	}
	return nil
}

func (s *Store) addReady(ctx context.Context, p string, misfire bool) error {
	n, err := s.get(ctx, p)
	if err != nil {
		return err
	}
	if !n.exists {
		admit, err := s.admit(ctx, readyDir)
		if err != nil {
			return err
		}
		return conflictIfExists(s.multi(ctx, admit, s.createOp(p, []byte("1"))))
	}
	count := s.parseCount(p, n.data)
	next := 1
	if misfire {
		next = count + 1
	}
	if next == count {
		return nil
	}
	return s.multi(ctx, setOp(p, []byte(strconv.Itoa(next)), n.version))
}

// parseCount reads a ready count. Garbage counts as one pending run, so that a damaged node
// neither blocks the queue nor loses the run.
func (s *Store) parseCount(p string, data []byte) int {
	n, err := strconv.Atoi(string(data))
	if err != nil || n < 1 {
		s.log.WithField("path", p).WithField("value", string(data)).Warn("ready count is not a positive integer; counting it as 1")
		return 1
	}
	return n
}

// Ready returns every ready entry, sorted by job name.
func (s *Store) Ready(ctx context.Context) ([]ReadyEntry, error) {
	nodes, err := s.readDir(ctx, readyDir)
	if err != nil {
		return nil, err
	}
	out := make([]ReadyEntry, len(nodes))
	for i, n := range nodes {
		out[i] = ReadyEntry{JobName: n.name, Count: s.parseCount(s.path(readyDir, n.name), n.data), Version: n.version}
	}
	return out, nil
}

// ReadyOf returns a job's ready entry; Count is 0 when it has none.
func (s *Store) ReadyOf(ctx context.Context, job string) (ReadyEntry, error) {
	p := s.path(readyDir, job)
	n, err := s.get(ctx, p)
	if err != nil || !n.exists {
		return ReadyEntry{JobName: job}, err
	}
	return ReadyEntry{JobName: job, Count: s.parseCount(p, n.data), Version: n.version}, nil
}

// RemoveStaleReady drops the pending runs of a deleted job, if the job is still deleted: a
// job registered again under the name may have been fired since.
func (s *Store) RemoveStaleReady(ctx context.Context, job string) error {
	if err := s.removeStale(ctx, job, s.path(readyDir, job)); err != nil {
		return fmt.Errorf("remove job %q from ready queue: %w", job, err)
	}
	return nil
}

// removeStale deletes a queue node of a deleted job in a multi that fails if the job's config
// exists again (absentOps; a version check would not do: a node created again starts again at
// version 0).
func (s *Store) removeStale(ctx context.Context, job, p string) error {
	cfg := s.path(jobsDir, job)
	err := s.multi(ctx, append(s.absentOps(cfg), deleteOp(p, -1))...)
	var op *OpError
	switch {
	case err == nil, errors.Is(err, ErrNotFound):
		return nil
	case errors.As(err, &op) && op.Path == cfg && errors.Is(err, ErrExists):
		return nil // the job is back: its entry is its own
	}
	return err
}

// RemoveReady drops a job's pending runs.
func (s *Store) RemoveReady(ctx context.Context, job string) error {
	err := s.multi(ctx, deleteOp(s.path(readyDir, job), -1))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("remove job %q from ready queue: %w", job, err)
	}
	return nil
}

// Running returns every running task, by job name then item.
func (s *Store) Running(ctx context.Context) ([]RunningEntry, error) {
	entries, err := s.readQueue(ctx, runningDir)
	out := make([]RunningEntry, len(entries))
	for i, e := range entries {
		out[i] = RunningEntry{Meta: e.Meta, TaskID: e.TaskID, Version: e.Version}
	}
	return out, err
}

// RunningOf returns a job's running tasks.
func (s *Store) RunningOf(ctx context.Context, job string) ([]RunningEntry, error) {
	entries, err := s.readJobQueue(ctx, runningDir, job)
	out := make([]RunningEntry, len(entries))
	for i, e := range entries {
		out[i] = RunningEntry{Meta: e.Meta, TaskID: e.TaskID, Version: e.Version}
	}
	return out, err
}

// IsRunning reports whether task id is in the running queue: one or two node reads, whatever
// the job's size.
func (s *Store) IsRunning(ctx context.Context, id taskid.ID) (bool, error) {
	p, _, err := s.runningNode(ctx, id)
	return p != "", err
}

// runningNode returns the running node that holds task id: its shard's, or, for a run of a job
// whose runs overlap, its own.
func (s *Store) runningNode(ctx context.Context, id taskid.ID) (string, node, error) {
	want := id.String()
	for _, byTask := range []bool{false, true} {
		p := s.path(runningDir, id.JobName, nodeName(id, byTask))
		n, err := s.get(ctx, p)
		if err != nil {
			return "", node{}, err
		}
		if n.exists && string(n.data) == want {
			return p, n, nil
		}
	}
	return "", node{}, nil
}

// Failovers returns every failover entry, by job name then item.
func (s *Store) Failovers(ctx context.Context) ([]FailoverEntry, error) {
	entries, err := s.readQueue(ctx, failoverDir)
	out := make([]FailoverEntry, len(entries))
	for i, e := range entries {
		out[i] = FailoverEntry(e)
	}
	return out, err
}

// queueEntry is the shape shared by the running and failover queues.
type queueEntry struct {
	Meta    taskid.Meta
	TaskID  string
	Version int32
	Node    string
}

// readQueue reads a two-level queue (root/job/job@-@item → task id).
func (s *Store) readQueue(ctx context.Context, dir string) ([]queueEntry, error) {
	jobs, err := s.children(ctx, s.path(dir))
	if err != nil {
		return nil, err
	}
	per := make([][]queueEntry, len(jobs))
	read := func(i int) (err error) {
		per[i], err = s.readJobQueue(ctx, dir, jobs[i])
		return err
	}
	if s.mv != nil {
		// The model answers from memory: goroutines would only cost (the offer cycle reads the
		// running queue every cycle).
		for i := range jobs {
			if err = read(i); err != nil {
				break
			}
		}
	} else {
		// The jobs are read concurrently, so a queue of many jobs costs a few round trips of
		// latency, not two per job (each job's read is itself a list plus a getMany).
		err = concurrently(len(jobs), 16, read)
	}
	if err != nil {
		return nil, err
	}
	var out []queueEntry
	for _, entries := range per {
		out = append(out, entries...)
	}
	return out, nil
}

func (s *Store) readJobQueue(ctx context.Context, dir, job string) ([]queueEntry, error) {
	parent := s.path(dir, job)
	nodes, err := s.readChildren(ctx, parent)
	if err != nil {
		return nil, err
	}
	if len(nodes) > 0 {
		s.parents.Store(parent, struct{}{})
	}
	out := make([]queueEntry, 0, len(nodes))
	for _, n := range nodes {
		meta, err := taskid.ParseMeta(n.name)
		if err != nil {
			// A run of a job whose runs overlap: the node is named by its task id.
			var id taskid.ID
			id, err = taskid.Parse(n.name)
			meta = id.Meta
		}
		if err != nil || meta.JobName != job {
			s.log.WithField("path", parent+"/"+n.name).Warn("queue node name is neither {job}@-@{item} nor a task id of the job; ignoring it")
			continue
		}
		out = append(out, queueEntry{Meta: meta, TaskID: string(n.data), Version: n.version, Node: n.name})
	}
	return out, nil
}

// AddFailover queues a shard for relaunch, unless it is queued already (then it returns
// false). A job new to the failover queue is refused with ErrQueueFull when the failover root
// already has job-state-queue-size children.
func (s *Store) AddFailover(ctx context.Context, id taskid.ID) (bool, error) {
	var added bool
	err := retry(ctx, func() error {
		ops, queued, err := s.failoverOps(ctx, id, false)
		if err != nil || queued {
			return err
		}
		if err := s.multi(ctx, ops...); err != nil {
			return conflictIfExists(err)
		}
		added = true
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("add task %s to failover queue: %w", id, err)
	}
	return added, nil
}

// failoverOps returns the ops that queue id's shard for failover, or queued = true if it is
// queued already. byTask names the node by the task (a run of a job whose runs overlap): each
// run's failed shard is then its own entry.
func (s *Store) failoverOps(ctx context.Context, id taskid.ID, byTask bool) (ops []any, queued bool, err error) {
	parent := s.path(failoverDir, id.JobName)
	item := parent + "/" + nodeName(id, byTask)
	st, err := s.stat(ctx, parent)
	if err != nil {
		return nil, false, err
	}
	if st == nil {
		admit, err := s.admit(ctx, failoverDir)
		if err != nil {
			return nil, false, err
		}
		ops = append(ops, admit, s.createOp(parent, nil))
	} else if existing, err := s.stat(ctx, item); err != nil || existing != nil {
		return nil, existing != nil, err
	}
	return append(ops, s.createOp(item, []byte(id.String()))), false, nil
}

// RemoveStaleFailover drops a failover entry of a deleted job, if the job is still deleted:
// a job registered again under the name may have failed anew.
func (s *Store) RemoveStaleFailover(ctx context.Context, f FailoverEntry) error {
	parent := s.path(failoverDir, f.Meta.JobName)
	if err := s.removeStale(ctx, f.Meta.JobName, parent+"/"+entryNode(f.Meta, f.Node)); err != nil {
		return fmt.Errorf("remove %s from failover queue: %w", f.Meta, err)
	}
	s.bestEffortDelete(ctx, parent)
	return nil
}

// HasPendingWork reports whether the ready or failover queue has any entry: two reads,
// however long the queues.
func (s *Store) HasPendingWork(ctx context.Context) (bool, error) {
	for _, dir := range []string{readyDir, failoverDir} {
		st, err := s.stat(ctx, s.path(dir))
		if err != nil {
			return false, err
		}
		if st != nil && st.NumChildren > 0 {
			return true, nil
		}
	}
	return false, nil
}

// Depths counts the entries of the queues: pending runs (summed counts), running tasks and
// failover entries, reading only node stats.
func (s *Store) Depths(ctx context.Context) (ready, running, failover int, err error) {
	entries, err := s.Ready(ctx)
	if err != nil {
		return 0, 0, 0, err
	}
	for _, e := range entries {
		ready += e.Count
	}
	count := func(dir string) (int, error) {
		jobs, err := s.children(ctx, s.path(dir))
		if err != nil {
			return 0, err
		}
		n := 0
		for _, j := range jobs {
			st, err := s.stat(ctx, s.path(dir, j))
			if err != nil {
				return 0, err
			}
			if st != nil {
				n += int(st.NumChildren)
			}
		}
		return n, nil
	}
	if running, err = count(runningDir); err != nil {
		return 0, 0, 0, err
	}
	failover, err = count(failoverDir)
	return ready, running, failover, err
}
