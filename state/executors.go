package state

import (
	"context"
	"fmt"
)

// Executors: /state/executors/{executorId} holds the ExecutorInfo (as the scheduler encodes it)
// of an executor a leader started. Mesos refuses a task for a live executor unless the task
// carries that executor's ExecutorInfo as it was, and an app's config may have changed since
// the executor started: a new leader must send the old one, not one built from the app today.
// The leader writes an executor's node before the ACCEPT that starts it, and removes it once
// Mesos says the executor is gone.

// Executors returns the recorded ExecutorInfos, by executor id.
func (s *Store) Executors(ctx context.Context) (map[string][]byte, error) {
	nodes, err := s.readDir(ctx, executorsDir)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]byte, len(nodes))
	for _, n := range nodes {
		out[n.name] = n.data
	}
	return out, nil
}

// SaveExecutors records ExecutorInfos, by executor id, in one multi.
func (s *Store) SaveExecutors(ctx context.Context, infos map[string][]byte) error {
	if len(infos) == 0 {
		return nil
	}
	return retry(ctx, func() error {
		var ops []any
		for id, data := range infos {
			p := s.path(executorsDir, id)
			n, err := s.get(ctx, p)
			if err != nil {
				return err
			}
			if n.exists {
				ops = append(ops, setOp(p, data, n.version))
			} else {
				ops = append(ops, s.createOp(p, data))
			}
		}
		if err := s.multi(ctx, ops...); err != nil {
			return fmt.Errorf("record %d executors: %w", len(infos), conflictIfExists(err))
		}
		return nil
	})
}

// ForgetExecutors removes the records of executors that are gone, in one multi.
func (s *Store) ForgetExecutors(ctx context.Context, ids ...string) error {
	return retry(ctx, func() error {
		var ops []any
		for _, id := range ids {
			p := s.path(executorsDir, id)
			n, err := s.get(ctx, p)
			if err != nil {
				return err
			}
			if n.exists {
				ops = append(ops, deleteOp(p, n.version))
			}
		}
		if len(ops) == 0 {
			return nil
		}
		if err := s.multi(ctx, ops...); err != nil {
			return fmt.Errorf("forget %d executors: %w", len(ops), err)
		}
		return nil
	})
}
