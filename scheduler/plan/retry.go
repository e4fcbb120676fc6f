package plan

import (
	"time"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/scheduler/schedule"
)

// RetryFacts is what the leader knows of a shard whose task failed by the job's own fault (the
// executor's job-failure marker).
type RetryFacts struct {
	Job      config.Job
	JobGone  bool
	Disabled bool // the job or its app is disabled, or the job is stopped
	Attempt  int  // the attempt that failed: 1 for a fire's first run of the shard
}

// RetryDecision is what becomes of such a shard (issue 19).
type RetryDecision struct {
	Retry bool          // relaunch the shard, alone, as attempt Next after Delay
	Next  int           // the attempt the relaunch is
	Delay time.Duration // the job's backoff for it
	// Failed: the fire's run failed for good (no attempt left, or no retry wanted): mark it so
	// in the fire ledger, with Attempts runs of the shard made.
	Failed   bool
	Attempts int
}

// DecideRetry decides a business failure: with attempts left, and the job neither gone nor
// disabled, only that shard runs again after the job's backoff (backoff · 2^(retry−1), at most
// maxBackoff); otherwise the fire has failed.
func DecideRetry(f RetryFacts) RetryDecision {
	attempt := max(f.Attempt, 1)
	if f.JobGone {
		return RetryDecision{}
	}
	if attempt < f.Job.Attempts() && !f.Disabled {
		r := f.Job.Retry
		return RetryDecision{Retry: true, Next: attempt + 1, Delay: schedule.Backoff(attempt+1, r.BackoffDuration(), r.MaxBackoffDuration())}
	}
	return RetryDecision{Failed: true, Attempts: attempt}
}
