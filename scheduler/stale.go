package scheduler

import (
	"context"
	"time"

	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"
	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/taskid"
)

// Silent tasks. A task is only as alive as its last word: an executor that cannot reach its
// agent, or an agent that lost an update, leaves a task "running" here for ever, its job
// never firing again. Reconciliation does not help when the master itself still believes the
// task runs, so the leader keeps, for every task it holds as running, when its agent last
// said something about it (not the master's reconciliation answers), and warns — once per
// task, and in the ejcloud_tasks_stale gauge — about tasks silent for longer than
// --stale-task-threshold. A stale task is also reconciled at once, which settles the tasks
// whose agent is gone. DAEMON tasks are exempt: they run for ever and report only sampled
// heartbeats.

// staleTasks is owned by the event loop. Its zero value is ready to use.
type staleTasks struct {
	heard  map[string]time.Time // task id → last update from its agent or executor (or launch)
	warned map[string]bool      // task id → reported as stale since it last spoke
	exempt map[string]bool      // task id → DAEMON: never stale
}

// heardOf records news of a task; master-sourced answers are not news from the task.
func (s *staleTasks) heardOf(tid string, fromMaster bool, now time.Time) {
	if s.heard == nil {
		s.heard, s.warned, s.exempt = map[string]time.Time{}, map[string]bool{}, map[string]bool{}
	}
	if _, known := s.heard[tid]; known && fromMaster {
		return
	}
	s.heard[tid] = now
	delete(s.warned, tid)
}

func (s *staleTasks) ended(tid string) {
	delete(s.heard, tid)
	delete(s.warned, tid)
	delete(s.exempt, tid)
}

// sync makes the tracked set the running queue: tasks the leader found there (after a
// takeover, say) start their clock now, tasks no longer there are forgotten.
func (s *staleTasks) sync(running []string, now time.Time) {
	in := make(map[string]bool, len(running))
	for _, tid := range running {
		in[tid] = true
		if _, ok := s.heard[tid]; !ok {
			s.heardOf(tid, false, now)
		}
	}
	for tid := range s.heard {
		if !in[tid] {
			s.ended(tid)
		}
	}
}

// due returns the tasks silent for longer than threshold that have not been reported yet.
func (s *staleTasks) due(threshold time.Duration, now time.Time) []string {
	var out []string
	for tid, at := range s.heard {
		if !s.warned[tid] && !s.exempt[tid] && now.Sub(at) > threshold {
			out = append(out, tid)
		}
	}
	return out
}

// count is the number of tasks reported as stale and still silent.
func (s *staleTasks) count() int {
	return len(s.warned)
}

// checkStale warns about newly silent tasks, reconciles them, and updates the gauge.
func (ld *leader) checkStale(ctx context.Context) {
	threshold := ld.cfg.StaleTaskThreshold
	if threshold <= 0 {
		return
	}
	now := time.Now()
	reconcile := map[string]string{}
	for _, tid := range ld.stale.due(threshold, now) {
		id, err := taskid.Parse(tid)
		if err != nil {
			ld.stale.exempt[tid] = true
			continue
		}
		job, gone, err := ld.job(ctx, ld.store, id.JobName)
		if err != nil {
			continue // decide on the next tick
		}
		if !gone && job.JobExecutionType == config.Daemon {
			ld.stale.exempt[tid] = true
			continue
		}
		ld.stale.warned[tid] = true
		ld.log.WithFields(logrus.Fields{"task": tid, "silent_for": now.Sub(ld.stale.heard[tid]).Round(time.Second),
			"threshold": threshold}).Warn("no status update from this running task's agent for longer than the threshold; reconciling it")
		reconcile[tid] = id.AgentID
	}
	if len(reconcile) > 0 {
		ld.call(ctx, calls.Reconcile(calls.ReconcileTasks(reconcile)))
	}
	ld.staleCount.Store(int64(ld.stale.count()))
}
