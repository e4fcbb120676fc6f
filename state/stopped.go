package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// Stop is why a job's shards are no longer launched: a failure that retrying cannot heal (an
// unknown jobClass, a task Mesos refuses as invalid, an executor that cannot be fetched). It
// is kept at /state/stopped/{jobName} until an operator acts on the job (update, enable,
// trigger, or an update or enable of its app), so that it survives a leader change.
type Stop struct {
	Reason       string    `json:"reason"`                 // the failure class, e.g. "unknown jobClass"
	Message      string    `json:"message"`                // the message of the status update
	TaskID       string    `json:"taskId"`                 // the task whose end stopped the job
	State        string    `json:"state"`                  // its state, e.g. TASK_ERROR
	StatusReason string    `json:"statusReason,omitempty"` // Mesos's reason, e.g. REASON_TASK_INVALID
	Since        time.Time `json:"since"`
}

// stopOps returns the op that writes a job's stop mark, or none when the job is stopped
// already: the first unhealable failure is the one the operator needs to see.
func (s *Store) stopOps(ctx context.Context, job string, stop Stop) ([]any, error) {
	p := s.path(stoppedDir, job)
	st, err := s.stat(ctx, p)
	if err != nil || st != nil {
		return nil, err
	}
	data, err := json.Marshal(stop)
	if err != nil {
		return nil, fmt.Errorf("encode the stop mark of %q: %w", job, err)
	}
	return []any{s.createOp(p, data)}, nil
}

// Stopped returns a job's stop mark; ok is false when the job is not stopped.
func (s *Store) Stopped(ctx context.Context, job string) (stop Stop, ok bool, err error) {
	p := s.path(stoppedDir, job)
	n, err := s.get(ctx, p)
	if err != nil || !n.exists {
		return stop, false, err
	}
	if err := json.Unmarshal(n.data, &stop); err != nil {
		// A damaged mark still stops the job: the operator clears it like any other.
		s.log.WithField("path", p).WithError(err).Warn("stop mark is not valid JSON")
		stop = Stop{Reason: "unreadable stop mark", Message: string(n.data)}
	}
	return stop, true, nil
}

// StoppedJobs returns the names of the stopped jobs (one read, however many).
func (s *Store) StoppedJobs(ctx context.Context) (map[string]bool, error) {
	names, err := s.children(ctx, s.path(stoppedDir))
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(names))
	for _, n := range names {
		out[n] = true
	}
	return out, nil
}

// ClearStop removes a job's stop mark; cleared is false when there was none.
func (s *Store) ClearStop(ctx context.Context, job string) (cleared bool, err error) {
	err = s.multi(ctx, deleteOp(s.path(stoppedDir, job), -1))
	switch {
	case errors.Is(err, ErrNotFound):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("clear the stop mark of %q: %w", job, err)
	}
	return true, nil
}
