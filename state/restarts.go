package state

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	"github.com/ejcloud/ejcloud/taskid"
)

// Restarts: /state/restarts/{job} lists, a task id a line, the tasks of the job that were
// running when an update that changes what a task is made of (config.Job.RestartsTasks) was
// written; it is written in the update's multi. Those tasks run the old config and must be
// killed. The leader that wrote the update kills them at once, but its kills can be lost: it
// may lose the leadership first, or a task's agent may be unreachable, and Mesos forgets a
// kill for a task it cannot reach. The list outlives both, so whichever leader hears such a
// task running kills it, as it kills a task of a disabled or deleted job.

// restartOps returns the ops that make the job's restart list its running tasks as read now:
// the list goes when none runs. Read from the model, not checked in the multi: a launch of the
// old config written after this read and before the update is among the tasks the caller's
// kills read once the update is written; one written after the update is refused, its config
// version checked (Launch.Configs).
func (s *Store) restartOps(ctx context.Context, job string) ([]any, error) {
	running, err := s.RunningOf(ctx, job)
	if err != nil {
		return nil, err
	}
	p := s.path(restartsDir, job)
	n, err := s.get(ctx, p)
	if err != nil {
		return nil, err
	}
	if len(running) == 0 {
		if n.exists {
			return []any{deleteOp(p, n.version)}, nil
		}
		return nil, nil
	}
	ids := make([]string, len(running))
	for i, r := range running {
		ids[i] = r.TaskID
	}
	data := []byte(strings.Join(ids, "\n"))
	if n.exists {
		return []any{setOp(p, data, n.version)}, nil
	}
	return []any{s.createOp(p, data)}, nil
}

// Restarted reports whether task id runs a config that a later update of its job replaced:
// its job's restart list names it. One node read (of the model, for a leader).
func (s *Store) Restarted(ctx context.Context, id taskid.ID) (bool, error) {
	n, err := s.get(ctx, s.path(restartsDir, id.JobName))
	if err != nil || !n.exists {
		return false, err
	}
	return listed(n.data, id.String()), nil
}

func listed(list []byte, id string) bool {
	for len(list) > 0 {
		line, rest, _ := bytes.Cut(list, []byte("\n"))
		if string(line) == id {
			return true
		}
		list = rest
	}
	return false
}

// PruneRestarts removes the restart lists none of whose tasks is in the running queue any
// more: their kills are done. A list of a task still running stays whole.
func (s *Store) PruneRestarts(ctx context.Context) error {
	nodes, err := s.readDir(ctx, restartsDir)
	if err != nil {
		return err
	}
	var ops []any
	for _, n := range nodes {
		running, err := s.RunningOf(ctx, n.name)
		if err != nil {
			return err
		}
		if !anyListed(n.data, running) {
			ops = append(ops, deleteOp(s.path(restartsDir, n.name), n.version))
		}
	}
	if len(ops) == 0 {
		return nil
	}
	if err := s.multi(ctx, ops...); err != nil {
		return fmt.Errorf("prune %d restart lists: %w", len(ops), err)
	}
	return nil
}

func anyListed(list []byte, running []RunningEntry) bool {
	for _, r := range running {
		if listed(list, r.TaskID) {
			return true
		}
	}
	return false
}
