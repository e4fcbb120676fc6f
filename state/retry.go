package state

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/ejcloud/ejcloud/taskid"
)

// Retries (issue 19): a TRANSIENT shard that failed by the job's own fault, with attempts left,
// is queued for relaunch like a failed-over shard (its failover node), and its retry node
// /state/retry/{jobName@-@item} says which attempt the relaunch is and when it may go. Both are
// written in the multi that ends the failed task, so a new leader keeps the attempt count and
// the backoff. The node goes when the shard's run ends otherwise (finished, failed for good,
// killed).

// RetryState is a shard's pending retry.
type RetryState struct {
	Attempt   int       `json:"attempt"`   // the attempt the relaunch is (2: the first retry)
	NotBefore time.Time `json:"notBefore"` // when it may be launched
}

// ReasonRetriesExhausted is the ledger's Failed reason of a run whose shard failed on its last
// attempt.
func ReasonRetriesExhausted(attempts int) string {
	if attempts <= 1 {
		return "a shard failed by the job's own fault (no retry)"
	}
	return fmt.Sprintf("a shard failed by the job's own fault on each of its %d attempts", attempts)
}

func parseRetry(data []byte) (RetryState, error) {
	var r RetryState
	err := json.Unmarshal(data, &r)
	return r, err
}

// RetryOf returns a shard's pending retry, if any.
func (s *Store) RetryOf(ctx context.Context, m taskid.Meta) (RetryState, bool, error) {
	p := s.path(retryDir, m.String())
	n, err := s.get(ctx, p)
	if err != nil || !n.exists {
		return RetryState{}, false, err
	}
	r, err := parseRetry(n.data)
	if err != nil {
		return RetryState{}, false, fmt.Errorf("%w: retry %s: %v", ErrCorrupt, p, err)
	}
	return r, true, nil
}

// Retries returns every pending retry, by shard.
func (s *Store) Retries(ctx context.Context) (map[taskid.Meta]RetryState, error) {
	nodes, err := s.readDir(ctx, retryDir)
	if err != nil {
		return nil, err
	}
	out := make(map[taskid.Meta]RetryState, len(nodes))
	for _, n := range nodes {
		m, err := taskid.ParseMeta(n.name)
		if err != nil {
			continue
		}
		r, err := parseRetry(n.data)
		if err != nil {
			s.log.WithField("path", s.path(retryDir, n.name)).Warn("retry node unreadable; the shard is relaunched at once")
			continue
		}
		out[m] = r
	}
	return out, nil
}

// retryOps returns the ops that set a shard's retry node (r not nil) or remove it (r nil).
func (s *Store) retryOps(ctx context.Context, m taskid.Meta, r *RetryState) ([]any, error) {
	p := s.path(retryDir, m.String())
	n, err := s.get(ctx, p)
	if err != nil {
		return nil, err
	}
	if r == nil {
		if n.exists {
			return []any{deleteOp(p, n.version)}, nil
		}
		return nil, nil
	}
	data, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("encode retry %s: %w", m, err)
	}
	if n.exists {
		return []any{setOp(p, data, n.version)}, nil
	}
	return []any{s.createOp(p, data)}, nil
}

// fireFailedOps returns the op that marks, once, the ledger entry of the run task id belongs
// to as failed.
func (s *Store) fireFailedOps(ctx context.Context, id taskid.ID, reason string) ([]any, error) {
	return s.runEndOps(ctx, id, reason, time.Time{})
}

// runEndOps returns the op that records in the fire ledger what became of the run task id
// belongs to: failed for good (failed, once), and, with a non-zero ended, that the run is over
// (its last shard ended, lastShard). The run is the entry of the task's run id (Ledger.RunOf).
func (s *Store) runEndOps(ctx context.Context, id taskid.ID, failed string, ended time.Time) ([]any, error) {
	led, n, err := s.readLedger(ctx, id.JobName)
	if err != nil || !n.exists {
		return nil, err
	}
	i := led.RunOf(id.String())
	if i < 0 {
		return nil, nil
	}
	e := led.Fires[i]
	changed := false
	if failed != "" && e.Failed == "" {
		e.Failed, changed = failed, true
	}
	if !ended.IsZero() && e.Ended.IsZero() {
		e.Ended, changed = ended, true
	}
	if !changed {
		return nil, nil
	}
	led.Fires[i] = e
	data, err := json.Marshal(led)
	if err != nil {
		return nil, fmt.Errorf("encode the fire ledger: %w", err)
	}
	return []any{setOp(s.path(firesDir, id.JobName), data, n.version)}, nil
}

// DropWaiting removes a job's shards that wait for a relaunch (failover entries and retries),
// in one multi: the run they belong to is given up (a Replace). The same multi marks that run
// failed with reason in the fire ledger, and ended if none of the job's tasks runs: nothing
// else would end it, and jobs that depend on it would wait for it.
func (s *Store) DropWaiting(ctx context.Context, job, reason string) (int, error) {
	return s.dropWaiting(ctx, job, reason, func(int) bool { return true })
}

// DropBeyond removes, like DropWaiting, the waiting shards of a job at or beyond total: an update
// lowered its shardingTotalCount, and those shards no longer exist (SPEC §1). Their run fails,
// and ends when nothing else of the job runs or waits: jobs that depend on it would wait for it.
func (s *Store) DropBeyond(ctx context.Context, job string, total int) (int, error) {
	reason := fmt.Sprintf("its shards from %d on were removed by an update of shardingTotalCount", total)
	return s.dropWaiting(ctx, job, reason, func(item int) bool { return item >= total })
}

func (s *Store) dropWaiting(ctx context.Context, job, reason string, drop func(item int) bool) (int, error) {
	var dropped int
	err := retry(ctx, func() error {
		dropped = 0
		var ops []any
		entries, err := s.readJobQueue(ctx, failoverDir, job)
		if err != nil {
			return err
		}
		var first string // the failed task of a dropped entry: its run is given up
		left := 0
		for _, e := range entries {
			if !drop(e.Meta.Item) {
				left++
				continue
			}
			ops = append(ops, deleteOp(s.path(failoverDir, job, entryNode(e.Meta, e.Node)), e.Version))
			if dropped++; first == "" {
				first = e.TaskID
			}
		}
		if dropped > 0 {
			end, err := s.givenUpOps(ctx, job, first, reason, left == 0)
			if err != nil {
				return err
			}
			ops = append(ops, end...)
		}
		retries, err := s.readDir(ctx, retryDir)
		if err != nil {
			return err
		}
		for _, n := range retries {
			if m, err := taskid.ParseMeta(n.name); err == nil && m.JobName == job && drop(m.Item) {
				ops = append(ops, deleteOp(s.path(retryDir, n.name), n.version))
			}
		}
		if len(ops) == 0 {
			return nil
		}
		return s.multi(ctx, ops...)
	})
	if err != nil {
		return 0, fmt.Errorf("drop the waiting shards of job %q: %w", job, err)
	}
	s.bestEffortDelete(ctx, s.path(failoverDir, job))
	return dropped, nil
}

// givenUpOps returns the op that marks the run of a dropped failover entry, whose failed task
// is failed, failed, and ended when the job has no running task and none waits.
func (s *Store) givenUpOps(ctx context.Context, job string, failed string, reason string, noneWaits bool) ([]any, error) {
	id, err := taskid.Parse(failed)
	if err != nil {
		return nil, nil // an entry of another version's making: its run is not in the ledger
	}
	running, err := s.RunningOf(ctx, job)
	if err != nil {
		return nil, err
	}
	var ended time.Time
	if len(running) == 0 && noneWaits {
		ended = time.Now().UTC()
	}
	return s.runEndOps(ctx, id, reason, ended)
}

// FailRun marks, once, the fire ledger entry of the run task belongs to as failed.
func (s *Store) FailRun(ctx context.Context, id taskid.ID, reason string) error {
	err := retry(ctx, func() error {
		ops, err := s.fireFailedOps(ctx, id, reason)
		if err != nil {
			return err
		}
		return s.multi(ctx, ops...)
	})
	if err != nil {
		return fmt.Errorf("mark the run of %s failed: %w", id, err)
	}
	return nil
}
