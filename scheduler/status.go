package scheduler

import (
	"context"
	"errors"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"
	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/taskdata"
	"github.com/ejcloud/ejcloud/taskid"
)

// update records a status update (SPEC §5.7) and only then acknowledges it. An update that
// could not be recorded is not acknowledged, so Mesos sends it again.
func (ld *leader) update(ctx context.Context, st mesos.TaskStatus) {
	if seen := ld.cfg.updateSeen; seen != nil {
		seen(st)
	}
	if err := ld.record(ctx, st); err != nil {
		ld.log.WithError(err).WithField("task", st.TaskID.Value).Warn("status update not recorded; not acknowledging it")
		return
	}
	ld.inst.metrics.add(func(m *metrics) { m.updates[st.GetState().String()]++ })
	if len(st.UUID) > 0 && st.AgentID != nil {
		ld.call(ctx, calls.Acknowledge(st.AgentID.Value, st.TaskID.Value, st.UUID))
	}
}

func (ld *leader) record(ctx context.Context, st mesos.TaskStatus) error {
	tid := st.TaskID.Value
	s := st.GetState()
	log := ld.log.WithFields(logrus.Fields{"task": tid, "state": s.String()})
	if st.Reason != nil { // an absent reason would print as the enum's zero, REASON_COMMAND_EXECUTOR_FAILED
		log = log.WithField("reason", st.Reason.String())
	}
	if st.GetMessage() != "" {
		log = log.WithField("message", st.GetMessage())
	}
	id, err := taskid.Parse(tid)
	if err != nil {
		log.Warn("status update for a task that is not ejcloud's; ignoring it")
		return nil
	}
	ld.stale.heardOf(tid, st.GetSource() == mesos.SOURCE_MASTER, time.Now())
	switch s {
	case mesos.TASK_STAGING, mesos.TASK_STARTING, mesos.TASK_KILLING:
		delete(ld.unreachable, tid) // its agent speaks of it: it is reachable again
		log.Debug("task state")
		return nil
	case mesos.TASK_UNREACHABLE:
		if _, seen := ld.unreachable[tid]; !seen {
			ld.unreachable[tid] = time.Now()
			log.Warn("task unreachable; it counts as running until the unreachable timeout")
		}
		return nil
	}
	delete(ld.unreachable, tid)
	follow := state.NoFollowUp
	failed := false // an infrastructure failure of an existing job
	jobFailed := false
	if s == mesos.TASK_FAILED {
		d, _ := taskdata.DecodeStatus(st.Data)
		jobFailed = d.JobFailed
	}
	// FINISHED and job failures end the task whatever the job says: no need to read it.
	if s != mesos.TASK_FINISHED && !jobFailed {
		job, jobGone, err := ld.job(ctx, id.JobName)
		if err != nil {
			return err
		}
		switch s {
		case mesos.TASK_RUNNING:
			return ld.running(ctx, id, jobGone, st, log)
		case mesos.TASK_KILLED:
			if !jobGone && job.JobExecutionType == config.Daemon && !ld.disabled(ctx, job) {
				follow = state.Rerun
			}
		default: // FAILED, ERROR, LOST, DROPPED, GONE, GONE_BY_OPERATOR, UNKNOWN: an infrastructure failure
			follow = ld.failoverFollowUp(ctx, job, jobGone)
			failed = !jobGone
		}
	}
	ended, err := ld.endTask(ctx, id, st, follow, failed, log)
	if err != nil {
		return err
	}
	ld.stale.ended(tid)
	if ended.Removed {
		log.WithField("requeued", ended.Requeued).Info("task ended")
	}
	if ended.Requeued {
		ld.poke()
	}
	ld.setIdle(tid, false, true)
	return nil
}

// running handles TASK_RUNNING: a task that is not (or no longer) the shard's running task,
// or whose job is gone, is killed; daemon heartbeats mark the task busy or idle.
func (ld *leader) running(ctx context.Context, id taskid.ID, jobGone bool, st mesos.TaskStatus, log logrus.FieldLogger) error {
	tid := id.String()
	current, err := ld.store.RunningOf(ctx, id.JobName)
	if err != nil {
		return err
	}
	ours := false
	for _, r := range current {
		if r.TaskID == tid {
			ours = true
		}
	}
	if jobGone || !ours {
		ld.stale.ended(tid)
		log.Warn("killing a task that is not the running task of its shard")
		agent := ""
		if st.AgentID != nil {
			agent = st.AgentID.Value
		}
		ld.call(ctx, calls.Kill(tid, agent))
		return nil
	}
	ld.relaunch.running(id.Meta, tid, time.Now())
	switch st.GetMessage() {
	case "BEGIN":
		ld.setIdle(tid, false, false)
	case "COMPLETE":
		ld.setIdle(tid, true, false)
	}
	return nil
}

// job reads a job's config; gone reports that it was deleted (not an error).
func (ld *leader) job(ctx context.Context, name string) (j config.Job, gone bool, err error) {
	j, err = ld.store.Job(ctx, name)
	if errors.Is(err, state.ErrNotFound) {
		return j, true, nil
	}
	return j, false, err
}

// failoverFollowUp: shards of failover-enabled and DAEMON jobs are relaunched, unless the job
// or its app is disabled or the job is gone.
func (ld *leader) failoverFollowUp(ctx context.Context, job config.Job, jobGone bool) state.FollowUp {
	if jobGone || !(job.Failover || job.JobExecutionType == config.Daemon) || ld.disabled(ctx, job) {
		return state.NoFollowUp
	}
	return state.Failover
}

func (ld *leader) disabled(ctx context.Context, job config.Job) bool {
	off, err := ld.store.JobOrAppDisabled(ctx, job)
	return err == nil && off
}

func (ld *leader) setIdle(tid string, idle, forget bool) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	if forget {
		delete(ld.idle, tid)
		return
	}
	ld.idle[tid] = idle
}

// timeUnreachable treats tasks unreachable for longer than --unreachable-timeout as lost
// (SPEC §5.7). Should one come back, it is killed: its RUNNING names a task that is no longer
// in the running queue (see running), so no memory of it is kept here.
func (ld *leader) timeUnreachable(ctx context.Context) {
	for tid, since := range ld.unreachable {
		if time.Since(since) < ld.cfg.UnreachableTimeout {
			continue
		}
		id, err := taskid.Parse(tid)
		if err != nil {
			delete(ld.unreachable, tid)
			continue
		}
		job, jobGone, err := ld.job(ctx, id.JobName)
		if err != nil {
			continue
		}
		ended, err := ld.store.EndTask(ctx, id, ld.failoverFollowUp(ctx, job, jobGone))
		if err != nil {
			continue
		}
		delete(ld.unreachable, tid)
		ld.stale.ended(tid)
		ld.log.WithFields(logrus.Fields{"task": tid, "requeued": ended.Requeued}).Warn("unreachable for too long: handled as lost")
		if ended.Requeued {
			ld.poke()
		}
	}
}

// reconcile asks Mesos for the state of every task in the running queue, then for every task
// it knows (SPEC §5.8). The answers come back as updates.
func (ld *leader) reconcile(ctx context.Context) {
	ld.lastRecon = time.Now()
	ld.reconcileExplicit(ctx)
	ld.call(ctx, calls.Reconcile())
}

func (ld *leader) reconcileExplicit(ctx context.Context) {
	running, err := ld.store.Running(ctx)
	if err != nil {
		ld.log.WithError(err).Warn("explicit reconciliation skipped: cannot read the running queue")
		return
	}
	ids := make([]string, len(running))
	for i, r := range running {
		ids[i] = r.TaskID
	}
	ld.stale.sync(ids, time.Now())
	if len(running) == 0 {
		return
	}
	tasks := map[string]string{}
	for _, r := range running {
		if id, err := taskid.Parse(r.TaskID); err == nil {
			tasks[r.TaskID] = id.AgentID
		}
	}
	ld.call(ctx, calls.Reconcile(calls.ReconcileTasks(tasks)))
}
