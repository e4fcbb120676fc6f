package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"
	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/scheduler/plan"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/taskdata"
	"github.com/ejcloud/ejcloud/taskid"
)

// maxGroupOps and maxGroupBytes bound a group commit. Most ops are a node of a hundred bytes,
// but the end of a run rewrites its job's fire ledger, which grows with the job's shards (up
// to about 100 KB), so the bytes are bounded too: once a group holds maxGroupBytes it takes
// no more updates, and what the last one added stays below ZooKeeper's request limit
// (jute.maxbuffer, 1 MB). A group that outgrows the limit all the same is split in halves.
const (
	maxGroupOps   = 400
	maxGroupBytes = 512 << 10
)

// update records one status update and acknowledges it once recorded.
func (ld *leader) update(ctx context.Context, st mesos.TaskStatus) {
	ld.updates(ctx, []mesos.TaskStatus{st})
}

// updates records status updates (SPEC §5.7) with group commit: the writes of all of them go
// to ZooKeeper in as few multis as their size allows, and each update is acknowledged, and its
// effects on the leader's bookkeeping made, only after the multi that recorded it succeeded.
// An update that could not be recorded is not acknowledged, so Mesos sends it again.
func (ld *leader) updates(ctx context.Context, sts []mesos.TaskStatus) {
	if seen := ld.inst.hooks.updateSeen; seen != nil {
		for _, st := range sts {
			seen(st)
		}
	}
	ld.recordAll(ctx, ld.checkEnds(ctx, sts), 0)
}

// recordAll records every one of sts, in as many groups as their size needs.
func (ld *leader) recordAll(ctx context.Context, sts []mesos.TaskStatus, attempt int) {
	for n := 0; n < len(sts); {
		n += ld.recordGroupTry(ctx, sts[n:], attempt)
	}
}

// recordGroup records updates from the head of sts in one group and returns how many it took.
func (ld *leader) recordGroup(ctx context.Context, sts []mesos.TaskStatus) int {
	return ld.recordGroupTry(ctx, sts, 0)
}

// conflictRetries bounds how often a lone update is planned again after ZooKeeper refused it
// for a node someone else changed (the model has read that node again by then).
const conflictRetries = 3

func (ld *leader) recordGroupTry(ctx context.Context, sts []mesos.TaskStatus, attempt int) int {
	g := ld.store.Group()
	afters := make([]func() bool, 0, len(sts))
	took := 0
	for _, st := range sts {
		if g.Ops() >= maxGroupOps || g.Bytes() >= maxGroupBytes {
			break
		}
		took++
		after, err := ld.record(ctx, g, st)
		if err != nil {
			ld.log.WithError(err).WithField("task", st.TaskID.Value).Warn("status update not recorded; not acknowledging it")
			after = nil
		}
		afters = append(afters, after)
	}
	if err := g.Commit(ctx); err != nil {
		if took > 1 && errors.Is(err, state.ErrTooLarge) { // nothing was sent
			ld.recordAll(ctx, sts[:took/2], attempt)
			ld.recordAll(ctx, sts[took/2:took], attempt)
			return took
		}
		if took == 1 && errors.Is(err, state.ErrConflict) && attempt < conflictRetries {
			return ld.recordGroupTry(ctx, sts[:1], attempt+1)
		}
		// A broken connection is not a failure while the session lives: once the client has
		// reconnected, record them again on what ZooKeeper holds (the model reads back what
		// the lost multi may have done first, so each is recorded once).
		if errors.Is(err, state.ErrUnavailable) && attempt < conflictRetries && ld.store.AwaitSession(ctx) == nil {
			ld.log.WithError(err).WithField("updates", took).Info("ZooKeeper connection back; recording the updates again")
			ld.recordAll(ctx, sts[:took], attempt+1)
			return took
		}
		if took == 1 {
			ld.log.WithError(err).WithField("task", sts[0].TaskID.Value).Warn("status update not recorded; not acknowledging it")
			return took
		}
		// The group was refused as a whole (someone else changed a node it touched): record
		// them one by one, on what ZooKeeper now holds.
		ld.log.WithError(err).WithField("updates", took).Warn("group commit of status updates refused; recording them one by one")
		for _, st := range sts[:took] {
			ld.recordGroup(ctx, []mesos.TaskStatus{st})
		}
		return took
	}
	for i, st := range sts[:took] {
		if afters[i] == nil {
			continue
		}
		// Settled for the reconciliation run only now: an answer (no uuid) that could not be
		// recorded is never sent again, so its task must be asked about again.
		ld.recon.heard(st.TaskID.Value)
		ld.counted(st, afters[i]())
		if len(st.UUID) > 0 && st.AgentID != nil {
			ld.acknowledge(ctx, calls.Acknowledge(st.AgentID.Value, st.TaskID.Value, st.UUID))
		}
	}
	return took
}

// counted counts a recorded update in ejcloud_status_updates_total and traces it; counts says
// whether it counts in the task results too (record's after). An update Mesos sends again (the
// same UUID) has its count, row and result already. A reconciliation's answer that ends no task
// is the master repeating what the leader knew (every task of the leader's, at each
// reconciliation): traced, as Elastic-Job-Cloud traces every update, but not counted.
func (ld *leader) counted(st mesos.TaskStatus, counts bool) {
	if len(st.UUID) > 0 && !ld.inst.heard.add(string(st.UUID)) {
		return
	}
	if st.GetReason() != mesos.REASON_RECONCILIATION || ended(st.GetState()) && counts {
		ld.inst.metrics.updates.WithLabelValues(st.GetState().String()).Inc()
	}
	ld.inst.trace.recorded(st, counts)
}

// record decides what a status update means and writes it through store (a group). It
// returns what to do once the write is in ZooKeeper: the leader's own bookkeeping, kills and
// log lines, none of which may happen for an update that ends up not recorded. That reports
// whether the update counts in the task results: an end that finds the task already ended (an
// update sent again, its acknowledgement lost) does not count twice.
func (ld *leader) record(ctx context.Context, store *state.Store, st mesos.TaskStatus) (func() bool, error) {
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
		return func() bool { log.Warn("status update for a task that is not ejcloud's; ignoring it"); return false }, nil
	}
	now := time.Now()
	heard := func() { ld.stale.heardOf(tid, st.GetSource() == mesos.SOURCE_MASTER, now) }
	facts, err := ld.facts(ctx, store, id, st)
	if err != nil {
		return nil, err
	}
	m := plan.Decide(facts)
	switch m.Kind {
	case plan.Heard:
		return func() bool {
			heard()
			ld.reachable(tid) // its agent speaks of it
			log.Debug("task state")
			return true
		}, nil
	case plan.Unreachable:
		return func() bool {
			heard()
			if _, asked := ld.confirming[tid]; asked && st.GetReason() == mesos.REASON_RECONCILIATION {
				ld.lost(ctx, tid)
				return true
			}
			if _, seen := ld.unreachable[tid]; !seen {
				// The timeout counts from when Mesos found the task unreachable, not from when
				// this leader heard of it: a leader taking over must not start it again, or
				// leaders changing more often than the timeout would never end the task.
				// The age is taken on the master's clock alone (the update's timestamp less
				// unreachable_time): the two clocks need not agree.
				since := now
				if ut := st.GetUnreachableTime(); ut != nil && ut.GetNanoseconds() > 0 && st.GetTimestamp() > 0 {
					age := time.Duration(st.GetTimestamp()*1e9) - time.Duration(ut.GetNanoseconds())
					since = now.Add(-max(age, 0))
				}
				ld.unreachable[tid] = since
				log.WithField("since", since).Warn("task unreachable; it counts as running until the unreachable timeout")
			}
			return true
		}, nil
	case plan.Kill:
		// The kill is decided on a read, and no fenced write stands between it and Mesos:
		// confirm the leadership first, or a leader misled by a stale server could kill the
		// real leader's task. Unconfirmed, the update stays unacknowledged and comes again.
		if err := ld.confirmed(ctx); err != nil {
			return nil, fmt.Errorf("confirm the leadership before killing: %w", err)
		}
		return func() bool {
			heard()
			ld.reachable(tid)
			ld.stale.ended(tid)
			switch {
			case facts.JobGone:
				log.Warn("killing a task whose job is deleted")
			case facts.Disabled:
				log.Warn("killing a task whose job or app is disabled")
			case facts.Restarted:
				log.Warn("killing a task that runs its job's config from before an update")
			default:
				log.Warn("killing a task that is not the running task of its shard")
			}
			agent := ""
			if st.AgentID != nil {
				agent = st.AgentID.Value
			}
			ld.kill(ctx, tid, agent)
			return true
		}, nil
	case plan.Running:
		return func() bool {
			heard()
			ld.reachable(tid)
			ld.relaunch.running(id.Meta, tid, now)
			if st.GetSource() == mesos.SOURCE_MASTER {
				ld.killAgain(ctx, tid, log)
			}
			switch st.GetMessage() {
			case "BEGIN":
				ld.setIdle(tid, false, false)
			case "COMPLETE":
				// A COMPLETE that finds the task idle already is one sent again (the agent
				// retries an update until it is acknowledged): its run was counted.
				return ld.setIdle(tid, true, false)
			}
			return true
		}, nil
	}
	follow, failed := m.Follow, m.Failed
	var retry plan.RetryDecision
	if facts.State == mesos.TASK_FAILED && facts.JobFailed {
		if retry, err = ld.retryFacts(ctx, store, id); err != nil {
			return nil, err
		}
	}
	endedAfter, ended, err := ld.endTask(ctx, store, id, st, follow, failed, retry, log)
	if err != nil {
		return nil, err
	}
	return func() bool {
		heard()
		ld.reachable(tid)
		delete(ld.killed, tid)
		endedAfter()
		ld.stale.ended(tid)
		if ended.Removed {
			log.WithField("requeued", ended.Requeued).Info("task ended")
		}
		if ended.Requeued {
			ld.poke()
		}
		ld.setIdle(tid, false, true)
		return ended.Removed
	}, nil
}

// job reads a job's config; gone reports that it was deleted (not an error).
func (ld *leader) job(ctx context.Context, store *state.Store, name string) (j config.Job, gone bool, err error) {
	j, err = store.Job(ctx, name)
	if errors.Is(err, state.ErrNotFound) {
		return j, true, nil
	}
	return j, false, err
}

// facts reads from the model what plan.Decide needs to know of an update's task: nothing
// for updates that end the task whatever the job says; else the job, whether it or its app is
// disabled, and, for TASK_RUNNING, whether the task is its shard's running task (one node, not
// every running node of the job: a 1,000-shard job must not make each update cost 1,000) and
// whether an update restarts it (its job's restart list).
func (ld *leader) facts(ctx context.Context, store *state.Store, id taskid.ID, st mesos.TaskStatus) (plan.Facts, error) {
	f := plan.Facts{State: st.GetState(), Item: id.Item, NeverRan: plan.NeverRan(st)}
	if f.State == mesos.TASK_FAILED {
		d, _ := taskdata.DecodeStatus(st.Data)
		f.JobFailed = d.JobFailed
	}
	if !plan.NeedsJob(f.State, f.JobFailed) {
		return f, nil
	}
	var err error
	if f.Job, f.JobGone, err = ld.job(ctx, store, id.JobName); err != nil || f.JobGone {
		return f, err
	}
	// A failed read is an error, never a guess: the update is then left unacknowledged.
	if f.Disabled, err = store.JobOrAppDisabled(ctx, f.Job); err != nil {
		return f, err
	}
	if f.Job.ConcurrencyPolicy == config.Replace {
		// A replaced run's task killed on a partitioned agent keeps running (Mesos forgets the
		// KILL), and may end lost or gone: it must not come back ahead of the new run.
		if f.Replaced, err = ld.replaced(ctx, store, id); err != nil {
			return f, err
		}
	}
	if f.State == mesos.TASK_RUNNING {
		if f.Current, err = store.IsRunning(ctx, id); err != nil || !f.Current {
			return f, err
		}
		if f.Restarted, err = store.Restarted(ctx, id); err != nil {
			return f, err
		}
	}
	return f, nil
}

// replaced reports whether the fire ledger has the task's run failed as replaced by a newer fire.
func (ld *leader) replaced(ctx context.Context, store *state.Store, id taskid.ID) (bool, error) {
	led, ok, err := store.FireLedger(ctx, id.JobName)
	if err != nil || !ok {
		return false, err
	}
	i := led.RunOf(id.String())
	return i >= 0 && led.Fires[i].Failed == ReasonReplaced, nil
}

// retryFacts reads what plan.DecideRetry needs of a shard that failed by the job's own fault
// and asks it.
func (ld *leader) retryFacts(ctx context.Context, store *state.Store, id taskid.ID) (plan.RetryDecision, error) {
	var f plan.RetryFacts
	var err error
	if f.Job, f.JobGone, err = ld.job(ctx, store, id.JobName); err != nil || f.JobGone {
		return plan.DecideRetry(f), err
	}
	gate := fireGate{store}
	if f.Disabled, err = gate.JobOrAppDisabled(ctx, f.Job); err != nil {
		return plan.RetryDecision{}, err
	}
	f.Attempt = 1
	if r, ok, err := store.RetryOf(ctx, id.Meta); err != nil {
		return plan.RetryDecision{}, err
	} else if ok {
		f.Attempt = r.Attempt
	}
	return plan.DecideRetry(f), nil
}

// setIdle records whether a DAEMON task is between runs (forget: it ended), and reports
// whether that is news: a task first heard of, or a change.
func (ld *leader) setIdle(tid string, idle, forget bool) (changed bool) {
	ld.mu.Lock()
	defer ld.mu.Unlock()
	if forget {
		delete(ld.idle, tid)
		return false
	}
	was, known := ld.idle[tid]
	ld.idle[tid] = idle
	return !known || was != idle
}

// reconcileAnswerWait is how long the reconciliation of a task unreachable past the timeout
// waits for its answer before it is asked again (a master that recovered after a failover does
// not answer for an agent that has not re-registered yet).
const reconcileAnswerWait = 10 * time.Second

// timeUnreachable treats tasks unreachable for longer than --unreachable-timeout as lost
// (SPEC §5.7), once Mesos confirms it. A busy leader reads its event stream late: the agent
// may have come back, and reported the task finished, in updates this leader has not read yet.
// So the timeout only asks Mesos (explicit reconciliation); its answer comes on the same
// stream, after every update sent before it, and only "still unreachable" makes the task lost
// (record's Unreachable case). Should one come back after that, it is killed: its RUNNING
// names a task that is no longer in the running queue (see running).
func (ld *leader) timeUnreachable(ctx context.Context) {
	ask := map[string]string{}
	now := time.Now()
	for tid, since := range ld.unreachable {
		if now.Sub(since) < ld.cfg.UnreachableTimeout {
			continue
		}
		if at, asked := ld.confirming[tid]; asked && now.Sub(at) < reconcileAnswerWait {
			continue
		}
		id, err := taskid.Parse(tid)
		if err != nil {
			delete(ld.unreachable, tid)
			continue
		}
		ld.confirming[tid] = now
		ask[tid] = id.AgentID
	}
	if len(ask) > 0 {
		ld.log.WithField("tasks", len(ask)).Info("unreachable past the timeout; asking Mesos whether they still are")
		ld.call(ctx, calls.Reconcile(calls.ReconcileTasks(ask)))
	}
}

// lost ends a task that Mesos confirmed unreachable past the timeout, as TASK_LOST would.
// On a failed read or write it stays unreachable and is asked about again.
func (ld *leader) lost(ctx context.Context, tid string) {
	id, err := taskid.Parse(tid)
	if err != nil {
		ld.reachable(tid)
		return
	}
	f, err := ld.facts(ctx, ld.store, id, mesos.TaskStatus{State: mesos.TASK_LOST.Enum()})
	if err != nil {
		return
	}
	follow := plan.Decide(f).Follow
	var o state.EndOptions
	if follow == state.NoFollowUp {
		o.FireFailed = shardEnded(id, mesos.TASK_LOST)
	}
	ended, err := ld.store.EndTaskWith(ctx, id, follow, o)
	if err != nil {
		return
	}
	ld.reachable(tid)
	delete(ld.killed, tid)
	ld.stale.ended(tid)
	ld.setIdle(tid, false, true)
	if !ended.Removed {
		return // it had ended already (its end recorded meanwhile): nothing was lost
	}
	ld.log.WithFields(logrus.Fields{"task": tid, "requeued": ended.Requeued}).Warn("unreachable for too long: handled as lost")
	// Traced and counted as the TASK_LOST it stands for (SPEC §5.7), from the scheduler.
	ld.counted(mesos.TaskStatus{TaskID: mesos.TaskID{Value: tid}, State: mesos.TASK_LOST.Enum(), AgentID: &mesos.AgentID{Value: id.AgentID},
		Message: ptr("unreachable for longer than --unreachable-timeout")}, ended.Removed)
	if ended.Requeued {
		ld.poke()
	}
}

// kill asks Mesos to kill a task, and remembers it until the task ends.
func (ld *leader) kill(ctx context.Context, tid, agent string) {
	ld.killed[tid] = agent
	ld.call(ctx, calls.Kill(tid, agent))
}

// killAgain kills again a task that this leader asked Mesos to kill and that the master
// reports running: a reconciliation's answer, or its agent back from unreachability. Real
// Mesos forgets a KILL for a task on an unreachable agent (MESOS.md §1.7), so a disable's,
// an update's or a replacement's kill sent during a partition would otherwise be lost.
func (ld *leader) killAgain(ctx context.Context, tid string, log logrus.FieldLogger) {
	agent, ok := ld.killed[tid]
	if !ok {
		return
	}
	log.Warn("a task this leader killed still runs (a KILL is forgotten while its agent is unreachable): killing it again")
	ld.call(ctx, calls.Kill(tid, agent))
}

// reachable forgets that a task was unreachable: Mesos spoke of it otherwise.
func (ld *leader) reachable(tid string) {
	delete(ld.unreachable, tid)
	delete(ld.confirming, tid)
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
		ld.log.WithError(err).Warn("explicit reconciliation put off: cannot read the running queue")
		ld.reconOwed = true // the next tick tries again
		return
	}
	ld.reconOwed = false
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
	ld.recon.start(tasks, time.Now())
}
