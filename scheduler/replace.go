package scheduler

import (
	"context"
	"errors"
	"sort"
	"sync"

	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/taskid"
)

// ReasonReplaced is the ledger's Failed reason of a run a newer fire replaced.
const ReasonReplaced = "replaced by a newer fire (concurrencyPolicy Replace)"

// replace gives up a Replace job's current run once a new fire of it is queued (issue 19): its
// running shards are killed — SIGTERM, then SIGKILL after the grace — and its shards waiting for
// a relaunch are dropped. The new run starts once the killed shards are gone: a ready run waits
// for the job to have no running task (SPEC §5.4), so "after the old shards are gone" holds by
// the offer cycle's own rule. It runs on the event loop. It returns false when it could not
// decide (a read or the leadership's confirmation failed), so that the caller asks again: a
// request dropped there would leave the new run waiting behind the old one, as under Forbid.
func (ld *leader) replace(ctx context.Context, job string) (decided bool) {
	j, err := ld.store.Job(ctx, job)
	if errors.Is(err, state.ErrNotFound) {
		return true
	}
	if err != nil {
		ld.log.WithField("job", job).WithError(err).Warn("cannot read a job to replace; asking again")
		return false
	}
	if j.ConcurrencyPolicy != config.Replace {
		return true
	}
	log := ld.log.WithField("job", job)
	// The fire is queued before the loop gets here, and an offer cycle may have launched it
	// in between: its ready entry is gone then. A ready run launches only once the job has
	// nothing running or waiting for a relaunch (SPEC §5.4), so what runs now is the fire's
	// own run, and there is nothing older to replace.
	ready, err := ld.store.ReadyOf(ctx, job)
	if err != nil {
		log.WithError(err).Warn("cannot read the ready entry of a job to replace; asking again")
		return false
	}
	if ready.Count == 0 {
		return true
	}
	running, err := ld.store.RunningOf(ctx, job)
	if err != nil {
		log.WithError(err).Warn("cannot read the running tasks of a job to replace; asking again")
		return false
	}
	dropped, err := ld.store.DropWaiting(ctx, job, ReasonReplaced)
	if err != nil {
		log.WithError(err).Warn("cannot drop the waiting shards of a job to replace")
	}
	if len(running) == 0 {
		if dropped > 0 {
			log.WithField("dropped", dropped).Info("replaced the waiting shards of the job's last run")
		}
		return true
	}
	// No fenced write stands between this decision and Mesos: a leader misled by a stale
	// server must not kill the real leader's tasks.
	if err := ld.confirmed(ctx); err != nil {
		log.WithError(err).Warn("leadership not confirmed; not replacing the running run yet")
		return false
	}
	var ids []taskid.ID
	for _, r := range running {
		if id, err := taskid.Parse(r.TaskID); err == nil {
			ids = append(ids, id)
		}
	}
	if len(ids) > 0 {
		if err := ld.store.FailRun(ctx, ids[0], ReasonReplaced); err != nil {
			log.WithError(err).Warn("cannot mark the replaced run in the fire ledger")
		}
	}
	for _, id := range ids {
		ld.kill(ctx, id.String(), id.AgentID)
	}
	log.WithFields(logrus.Fields{"killed": len(ids), "dropped": dropped}).Info("a new fire replaces the running run: its shards are killed, the new run starts once they are gone")
	return true
}

// replaceQueued replaces the runs of the jobs queued for it. A job whose replacement could not
// be decided stays queued: the loop's tick asks again, until the new run's ready entry is gone
// (the old run ended, or the job was deleted) or the replacement is done.
func (ld *leader) replaceQueued(ctx context.Context) {
	for _, job := range ld.replacing.take() {
		if !ld.replace(ctx, job) {
			ld.replacing.add(job)
		}
	}
}

// resumeReplacements queues, when the leader subscribes, the replacement of every Replace job
// whose queued run was fired after the run it still has launched: a leader that ended between
// such a fire and its replacement left it undone, and the new run would wait behind the old
// one as under Forbid. A run queued before the old one launched waits, as it would have.
func (ld *leader) resumeReplacements(ctx context.Context) {
	ready, err := ld.store.Ready(ctx)
	if err != nil {
		ld.log.WithError(err).Warn("cannot read the ready queue for replacements left undone")
		return
	}
	var failovers []state.FailoverEntry // read once, if some job needs them
	readFailovers := false
	for _, r := range ready {
		j, err := ld.store.Job(ctx, r.JobName)
		if err != nil || j.ConcurrencyPolicy != config.Replace {
			continue
		}
		led, ok, err := ld.store.FireLedger(ctx, r.JobName)
		if err != nil || !ok {
			continue
		}
		next := led.NextRun(r.Count)
		if next < 0 {
			continue
		}
		// The old run: that of a task still running, else of a shard waiting for a relaunch.
		var task string
		if running, err := ld.store.RunningOf(ctx, r.JobName); err == nil && len(running) > 0 {
			task = running[0].TaskID
		} else if err == nil {
			if !readFailovers {
				if failovers, err = ld.store.Failovers(ctx); err != nil {
					continue
				}
				readFailovers = true
			}
			for _, f := range failovers {
				if f.Meta.JobName == r.JobName {
					task = f.TaskID
					break
				}
			}
		}
		if old := led.RunOf(task); task != "" && old >= 0 && led.Fires[next].Slot.After(led.Fires[old].Launched) {
			ld.log.WithField("job", r.JobName).Info("a replacement left undone by the last leader: the run fired after the running one replaces it")
			ld.replacing.add(r.JobName)
			ld.poke()
		}
	}
}

// jobSet is a set of job names that one goroutine adds to and another takes.
type jobSet struct {
	mu   sync.Mutex // guards jobs
	jobs map[string]bool
}

func (s *jobSet) add(job string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.jobs == nil {
		s.jobs = map[string]bool{}
	}
	s.jobs[job] = true
}

// take empties the set and returns what it held, sorted.
func (s *jobSet) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.jobs))
	for j := range s.jobs {
		out = append(out, j)
	}
	clear(s.jobs)
	sort.Strings(out)
	return out
}
