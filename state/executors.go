package state

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"
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
	return s.deleteAll(ctx, executorsDir, ids, "executors")
}

// Unlisted agents: /state/unlisted/{agentId} holds, as RFC 3339 text, when a leader first found
// the Mesos master listing that agent nowhere while it had executors recorded. Its executors'
// records are forgotten after a while unlisted (a rebooted host comes back under a new agent
// id), and the mark keeps the time across leaders: each new leader would start it over.

// UnlistedAgents returns the marked agents and since when each is unlisted. A mark whose time
// cannot be read is left out (a leader marks it again, from now).
func (s *Store) UnlistedAgents(ctx context.Context) (map[string]time.Time, error) {
	nodes, err := s.readDir(ctx, unlistedDir)
	if err != nil {
		return nil, err
	}
	out := make(map[string]time.Time, len(nodes))
	for _, n := range nodes {
		if at, err := time.Parse(time.RFC3339Nano, string(n.data)); err == nil {
			out[n.name] = at
		}
	}
	return out, nil
}

// MarkUnlisted marks agents unlisted since the times given, in one multi; a mark already there
// keeps its time.
func (s *Store) MarkUnlisted(ctx context.Context, since map[string]time.Time) error {
	if len(since) == 0 {
		return nil
	}
	return retry(ctx, func() error {
		var ops []any
		for _, agent := range slices.Sorted(maps.Keys(since)) {
			p := s.path(unlistedDir, agent)
			n, err := s.get(ctx, p)
			if err != nil {
				return err
			}
			if !n.exists {
				ops = append(ops, s.createOp(p, []byte(since[agent].UTC().Format(time.RFC3339Nano))))
			}
		}
		if len(ops) == 0 {
			return nil
		}
		if err := s.multi(ctx, ops...); err != nil {
			return fmt.Errorf("mark %d agents unlisted: %w", len(ops), conflictIfExists(err))
		}
		return nil
	})
}

// UnmarkUnlisted removes the marks of agents, in one multi.
func (s *Store) UnmarkUnlisted(ctx context.Context, agents ...string) error {
	return s.deleteAll(ctx, unlistedDir, agents, "unlisted agents' marks")
}

// deleteAll deletes the nodes names of dir that exist, in one multi.
func (s *Store) deleteAll(ctx context.Context, dir string, names []string, what string) error {
	return retry(ctx, func() error {
		var ops []any
		for _, name := range names {
			p := s.path(dir, name)
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
			return fmt.Errorf("forget %d %s: %w", len(ops), what, err)
		}
		return nil
	})
}
