package scheduler

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"
	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/api"
	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/scheduler/plan"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/taskid"
)

// backoffResetAfter: a task that ran this long before it failed proves that the shard can
// run; its failure counts as the first again.
const backoffResetAfter = time.Minute

// relaunches remembers, per shard, its infrastructure failures in a row: they decide when its
// failover entry may be relaunched (1 s doubling up to 5 min by default) and, for fetch
// failures, when its job must stop. It lives in the leader's memory only: a new leader
// relaunches a waiting shard at once and backs off afresh from the next failure, which costs
// one launch per shard per leader change. The event loop writes; the API and /metrics read.
type relaunches struct {
	min, max time.Duration

	mu     sync.Mutex // guards shards
	shards map[taskid.Meta]*shardFailures
}

type shardFailures struct {
	failures int           // infrastructure failures in a row
	fetches  int           // of those, the last ones that could not fetch the executor
	last     string        // the last failure, for the API
	delay    time.Duration // the current backoff
	retryAt  time.Time     // when its failover entry may go; zero when none waits
	woken    bool          // the leader was woken for retryAt

	// The task that reported RUNNING last, and since when: a long run resets the count.
	runningTask  string
	runningSince time.Time
}

func newRelaunches(min, max time.Duration) *relaunches {
	return &relaunches{min: min, max: max, shards: map[taskid.Meta]*shardFailures{}}
}

// backoffDelay is the wait before the relaunch that follows the n-th failure in a row:
// min·2^(n-1), at most max.
func backoffDelay(min, max time.Duration, n int) time.Duration {
	d := min
	for i := 1; i < n && d < max; i++ {
		d *= 2
	}
	return clampDuration(d, min, max)
}

func clampDuration(d, lo, hi time.Duration) time.Duration {
	return max(lo, min(d, hi))
}

// running notes that a task of the shard runs: its executor was fetched. Only shards that
// failed before are tracked.
func (r *relaunches) running(m taskid.Meta, task string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.shards[m]
	if s == nil {
		return
	}
	s.fetches = 0
	if s.runningTask != task {
		s.runningTask, s.runningSince = task, now
	}
}

// stops reports whether failure f of the shard must stop its job instead of relaunching it.
func (r *relaunches) stops(m taskid.Meta, f failure) bool {
	switch f.class {
	case unhealable:
		return true
	case fetchFailed:
		r.mu.Lock()
		defer r.mu.Unlock()
		n := 1
		if s := r.shards[m]; s != nil {
			n += s.fetches
		}
		return n >= fetchFailuresToStop
	}
	return false
}

// failed counts an infrastructure failure of task; with queued, the shard's failover entry
// waits for the backoff. It returns the failures in a row and the backoff.
func (r *relaunches) failed(m taskid.Meta, task string, f failure, queued bool, now time.Time) (int, time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.shards[m]
	if s == nil {
		s = &shardFailures{}
		r.shards[m] = s
	}
	if s.runningTask == task && now.Sub(s.runningSince) >= backoffResetAfter {
		s.failures, s.fetches = 0, 0
	}
	s.runningTask = ""
	s.failures++
	if f.class == fetchFailed {
		s.fetches++
	} else {
		s.fetches = 0
	}
	s.last = f.detail
	s.delay = backoffDelay(r.min, r.max, s.failures)
	s.retryAt, s.woken = time.Time{}, false
	if queued {
		s.retryAt = now.Add(s.delay)
	}
	return s.failures, s.delay
}

// ran forgets the shard: its task ran to its end (finished, or failed by the job's own
// fault), or it was killed, or its job stopped.
func (r *relaunches) ran(m taskid.Meta) {
	r.mu.Lock()
	delete(r.shards, m)
	r.mu.Unlock()
}

// forgetJob forgets every shard of a job: an operator acted on it, so its next relaunch goes
// at once.
func (r *relaunches) forgetJob(job string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for m := range r.shards {
		if m.JobName == job {
			delete(r.shards, m)
		}
	}
}

// due reports whether the shard's failover entry may be relaunched now.
func (r *relaunches) due(m taskid.Meta, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.shards[m]
	return s == nil || s.retryAt.IsZero() || !now.Before(s.retryAt)
}

// retryAt is when the shard's failover entry may go; zero when it need not wait.
func (r *relaunches) retryAt(m taskid.Meta) time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.shards[m]; s != nil {
		return s.retryAt
	}
	return time.Time{}
}

// wake reports, once per backoff, that a backoff ran out: the leader must REVIVE, or its
// last DECLINEs' filters (or a SUPPRESS) would hold the relaunch back.
func (r *relaunches) wake(now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	woke := false
	for _, s := range r.shards {
		if !s.retryAt.IsZero() && !s.woken && !now.Before(s.retryAt) {
			s.woken, woke = true, true
		}
	}
	return woke
}

// waiting lists the shards whose relaunch waits for its backoff, of one job or of all ("").
func (r *relaunches) waiting(job string, now time.Time) []api.ShardBackoff {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []api.ShardBackoff
	for m, s := range r.shards {
		if (job != "" && m.JobName != job) || s.retryAt.IsZero() || !now.Before(s.retryAt) {
			continue
		}
		out = append(out, api.ShardBackoff{JobName: m.JobName, ShardingItem: m.Item, Failures: s.failures,
			DelaySeconds: s.delay.Seconds(), RetryAt: s.retryAt, LastFailure: s.last})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].JobName != out[j].JobName {
			return out[i].JobName < out[j].JobName
		}
		return out[i].ShardingItem < out[j].ShardingItem
	})
	return out
}

// shardEnded is the fire ledger's Failed reason of a run one of whose shards ended in state
// without a relaunch.
func shardEnded(id taskid.ID, state mesos.TaskState) string {
	return fmt.Sprintf("shard %d ended %s and was not relaunched", id.Item, state)
}

// endTask records the end of a task (SPEC §5.7) and what it means for its shard's relaunches.
// failed says the task ended by an infrastructure failure of an existing job. A failure that
// retrying cannot heal ends the task and stops the job in one multi, and is logged as an
// error once; any other failure is logged as a warning and backs the shard's failover relaunch
// off; a task that ran to its end resets the shard.
//
// The write goes through store (a group); the returned func does the rest once it is in
// ZooKeeper.
//
// retry is a business failure's decision (issue 19): a retry queues the shard again, alone,
// with its attempt and backoff; a run that failed for good is marked so in the fire ledger.
func (ld *leader) endTask(ctx context.Context, store *state.Store, id taskid.ID, st mesos.TaskStatus, follow state.FollowUp, failed bool, retry plan.RetryDecision, log logrus.FieldLogger) (func(), state.Ended, error) {
	now := time.Now()
	var o state.EndOptions
	if retry.Retry {
		follow = state.Failover
		o.Retry = &state.RetryState{Attempt: retry.Next, NotBefore: now.Add(retry.Delay).UTC()}
	}
	if retry.Failed {
		o.FireFailed = state.ReasonRetriesExhausted(retry.Attempts)
	}
	if o.FireFailed == "" && follow == state.NoFollowUp && st.GetState() != mesos.TASK_FINISHED {
		// The shard will not run again for this run, and did not succeed: its run failed, and
		// jobs that depend on it (dependsOn) must not take it for a success.
		o.FireFailed = shardEnded(id, st.GetState())
	}
	var f failure
	var stop *state.Stop
	if failed {
		f = classify(st)
		restarted := false
		if f.class != retryable {
			// A task of a config an update has replaced since (its restart list names it)
			// says nothing of the config now: its failure, arriving after the update cleared
			// the stop, must not stop the job again.
			var err error
			if restarted, err = store.Restarted(ctx, id); err != nil {
				return func() {}, state.Ended{}, err
			}
		}
		if !restarted && ld.relaunch.stops(id.Meta, f) {
			stop = &state.Stop{Reason: f.reason, Message: st.GetMessage(), TaskID: id.String(), State: st.GetState().String(), Since: now.UTC()}
			if st.Reason != nil {
				stop.StatusReason = st.Reason.String()
			}
			follow = state.NoFollowUp
		}
	}
	var ended state.Ended
	var err error
	if stop != nil {
		ended, err = store.EndTaskAndStop(ctx, id, *stop)
	} else {
		ended, err = store.EndTaskWith(ctx, id, follow, o)
	}
	if err != nil || !ended.Removed {
		return func() {}, ended, err // a duplicate or stale update counts no failure
	}
	return func() {
		switch {
		case stop != nil:
			ld.relaunch.ran(id.Meta)
			if ended.Stopped {
				ld.inst.metrics.stops.WithLabelValues(f.reason).Inc()
				log.WithFields(logrus.Fields{"job": id.JobName, "failure": f.reason}).Error(
					"job stopped: this failure cannot heal by relaunching; no shard of the job is launched until an operator updates, enables or triggers it (or updates or enables its app)")
			} else {
				log.WithField("failure", f.reason).Warn("task of a stopped job failed")
			}
		case failed:
			n, delay := ld.relaunch.failed(id.Meta, id.String(), f, follow == state.Failover, now)
			log := log.WithFields(logrus.Fields{"failure": f.reason, "failures_in_a_row": n})
			if follow == state.Failover {
				// Woken when the backoff runs out, not at the next second's tick: a relaunch
				// after a 1 s backoff would otherwise wait up to 2 s.
				time.AfterFunc(delay, ld.backoffRanOut)
				ld.inst.metrics.backoffs.Inc()
				log.WithField("backoff", delay).Warn("task failed; its shard is relaunched after the backoff")
			} else {
				log.Warn("task failed; its shard is not relaunched (no failover, or the job or app is disabled)")
			}
		case ended.Retried:
			ld.relaunch.ran(id.Meta)
			time.AfterFunc(retry.Delay, ld.poke) // the retry may go: REVIVE for it
			log.WithFields(logrus.Fields{"attempt": retry.Next, "backoff": retry.Delay}).Warn("shard failed by the job's own fault; it is retried after the backoff")
		case retry.Retry:
			ld.relaunch.ran(id.Meta)
			log.Warn("shard failed by the job's own fault; its retry could not be queued (the failover queue is full)")
		default:
			ld.relaunch.ran(id.Meta)
		}
	}, ended, nil
}

// backoffRanOut tells the event loop, from a timer, that a shard's backoff ran out.
func (ld *leader) backoffRanOut() {
	select {
	case ld.due <- struct{}{}:
	default:
	}
}

// wakeForWork REVIVEs when there is work to launch now: a backoff that ran out, or, while
// suppressed, work that someone else queued (the API, a tool). Work that is queued but may not
// go (backed off, stopped, disabled) does not REVIVE, or the leader would REVIVE and SUPPRESS
// again every second.
func (ld *leader) wakeForWork(ctx context.Context) {
	if ld.relaunch.wake(time.Now()) {
		ld.poke()
		return
	}
	if !ld.suppressed {
		return
	}
	pending, err := ld.store.HasPendingWork(ctx)
	if err != nil {
		ld.log.WithError(err).Warn("cannot check the queues for pending work")
		return
	}
	if !pending {
		// Nothing is queued: no shard waits, nor is left unplaced, whatever the last cycle saw.
		ld.mu.Lock()
		ld.waiting, ld.unplaced = newWaits(), map[string]map[string]int{}
		ld.mu.Unlock()
		return
	}
	if w, err := ld.eligible(ctx); err == nil && len(w.Groups) == 0 {
		return
	}
	ld.revive(ctx, time.Now())
}

// revive sends REVIVE: offers again, and every refusal filter cleared.
func (ld *leader) revive(ctx context.Context, now time.Time) {
	ld.call(ctx, calls.Revive())
	ld.suppressed = false
	ld.lastRevive = now
}

// reviveEvery is how often the leader REVIVEs while the last cycle left shards unplaced.
const reviveEvery = 2 * refuseSeconds * time.Second

// reviveForUnplaced REVIVEs every reviveEvery while the last offer cycle left shards unplaced.
// Each declined offer filters its agent for refuseSeconds, from its own cycle: agents freed at
// different moments come back in different OFFERS events, each alone, and stay out of phase
// for as long as nothing REVIVEs (new work does). A run whose shards need several of them
// together (a READY run places all or none) would see them one at a time for good. A REVIVE
// clears every filter, and the next allocation offers the agents together.
func (ld *leader) reviveForUnplaced(ctx context.Context, now time.Time) {
	if ld.suppressed || now.Sub(ld.lastRevive) < reviveEvery {
		return
	}
	ld.mu.Lock()
	left := len(ld.unplaced) > 0
	ld.mu.Unlock()
	if left {
		ld.log.Debug("shards were left unplaced: reviving, so that every agent is offered again at once")
		ld.revive(ctx, now)
	}
}

// clearStop lifts a job's stop mark and forgets its shards' backoff: an operator acted on the
// job (or its app), and expects its next launch to go at once.
func (ld *leader) clearStop(ctx context.Context, job, by string) error {
	cleared, err := ld.store.ClearStop(ctx, job)
	if err != nil {
		return err
	}
	ld.stopCleared(job, by, cleared)
	return nil
}

// stopCleared is the leader's side of a cleared stop mark (cleared false: there was none).
func (ld *leader) stopCleared(job, by string, cleared bool) {
	ld.relaunch.forgetJob(job)
	if cleared {
		ld.log.WithFields(logrus.Fields{"job": job, "by": by}).Info("job's stop cleared; its shards are launched again")
	}
	ld.poke()
}

// Failure answers GET /api/job/{jobName}/failure: the job's stop mark and its shards waiting
// for their backoff.
func (s *instance) Failure(ctx context.Context, job string) (api.JobFailure, error) {
	out := api.JobFailure{JobName: job, Backoff: []api.ShardBackoff{}}
	ld, err := s.leaderState()
	if err != nil {
		return out, err
	}
	stop, ok, err := ld.store.Stopped(ctx, job)
	if err != nil {
		return out, err
	}
	if ok {
		out.Stopped, out.Stop = true, &stop
	}
	now := time.Now()
	if w := ld.relaunch.waiting(job, now); w != nil {
		out.Backoff = w
	}
	// Shards waiting for a retry's backoff (issue 19) wait here too, with their attempt.
	retries, err := ld.store.Retries(ctx)
	if err != nil {
		return out, err
	}
	for m, r := range retries {
		if m.JobName == job && now.Before(r.NotBefore) {
			out.Backoff = append(out.Backoff, api.ShardBackoff{JobName: job, ShardingItem: m.Item, Failures: r.Attempt - 1,
				DelaySeconds: r.NotBefore.Sub(now).Seconds(), RetryAt: r.NotBefore,
				LastFailure: fmt.Sprintf("the job's own failure; retry attempt %d", r.Attempt)})
		}
	}
	return out, nil
}

// AppUpdated clears the stop marks of the app's jobs: a new appURL or executor is how an
// operator fixes an executor that cannot be fetched or lacks a jobClass.
func (s *instance) AppUpdated(ctx context.Context, app string) error {
	ld, err := s.leaderState()
	if err != nil {
		return err
	}
	return ld.clearStopsOf(ctx, app, "app update")
}

func (ld *leader) clearStopsOf(ctx context.Context, app, by string) error {
	jobs, err := ld.jobsOf(ctx, app)
	if err != nil {
		return err
	}
	for _, j := range jobs {
		if err := ld.clearStop(ctx, j, by); err != nil {
			return err
		}
	}
	return nil
}

// fireGate is the producer's view of the state: the cron fires of a stopped job are skipped
// like a disabled job's, so that they do not pile up in the ready queue while it cannot run.
type fireGate struct{ *state.Store }

func (g fireGate) JobOrAppDisabled(ctx context.Context, j config.Job) (bool, error) {
	if off, err := g.Store.JobOrAppDisabled(ctx, j); err != nil || off {
		return off, err
	}
	_, stopped, err := g.Store.Stopped(ctx, j.JobName)
	return stopped, err
}
