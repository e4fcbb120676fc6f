package scheduler

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sort"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"
	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/executor"
	"github.com/ejcloud/ejcloud/scheduler/binpack"
	"github.com/ejcloud/ejcloud/scheduler/plan"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/taskid"
)

// refuseSeconds is the filter on declined offers (SPEC §5.4 step 5).
const refuseSeconds = 5

// maxLaunchTasks bounds one write-ahead multi (a task node is ~150 bytes of request).
const maxLaunchTasks = 2000

// cycle is the offer cycle of SPEC §5.4: eligible work, placement, the write-ahead multi,
// ACCEPT per agent and DECLINE of everything else. No offer outlives the cycle. The decisions
// are scheduler/plan's; this is the I/O around them.
func (ld *leader) cycle(ctx context.Context, offers []mesos.Offer) {
	if ld.streamEnded() {
		// Mesos rescinded them as the stream ended (MESOS.md §2.4): a launch on them would
		// be written ahead, refused, and its run failed as a lost task.
		ld.log.WithField("offers", len(offers)).Debug("offers of an ended subscription dropped")
		return
	}
	if held := ld.stopUnknown(ctx, offers); len(held) > 0 {
		var drop []mesos.Offer
		offers = slices.DeleteFunc(slices.Clone(offers), func(o mesos.Offer) bool {
			if held[o.AgentID.Value] {
				drop = append(drop, o)
			}
			return held[o.AgentID.Value]
		})
		ld.decline(ctx, drop, declineExecutorStopping)
	}
	w, err := ld.eligible(ctx)
	if err != nil {
		ld.log.WithError(err).Warn("cannot read the queues; declining the offers")
		ld.decline(ctx, offers, declineUnreadable)
		return
	}
	ld.log.WithFields(logrus.Fields{"offers": len(offers), "groups": len(w.Groups)}).Debug("offer cycle")
	if len(w.Groups) == 0 {
		ld.recordUnplaced(w, binpack.Result{}) // nothing was left unplaced: forget the last cycle's reasons
		ld.noteStarving(w, binpack.Result{}, time.Now())
		ld.noteReservation(w, plan.Reservation{Group: -1})
		ld.decline(ctx, offers, declineNoWork)
		if !ld.suppressed {
			ld.call(ctx, calls.Suppress())
			ld.suppressed = true
		}
		return
	}
	agents, byAgent := agentsOf(offers)
	ld.forgetUnlisted(ctx, byAgent)
	res := ld.pack(ctx, w, agents, time.Now())
	ld.recordUnplaced(w, res)
	if h := ld.inst.hooks.packed; h != nil {
		h()
	}

	// The write-ahead goes in multis of whole jobs, each below ZooKeeper's request limit
	// (jute.maxbuffer, 1 MB: about 5,000 task nodes); a burst larger than one multi would
	// otherwise never launch. The jobs' fire ledgers go in the same multis, and a few hundred
	// of them can outgrow the limit too: a chunk that does is split in halves until its
	// multis fit. A job whose multi fails is not launched this cycle.
	tasks := map[string][]mesos.TaskInfo{} // by agent
	pools := map[string]*offered{}         // by agent: what its offers have left
	started := map[string]mesos.ExecutorInfo{}
	parts := plan.Parts(w, res, agents)
	chunks := plan.Chunks(parts, maxLaunchTasks)
	for len(chunks) > 0 && !ld.streamEnded() { // no write-ahead once the offers are void
		chunk := chunks[0]
		chunks = chunks[1:]
		var l state.Launch
		for _, p := range chunk {
			l.Tasks = append(l.Tasks, p.Launch.Tasks...)
			l.Ready = append(l.Ready, p.Launch.Ready...)
			l.Failover = append(l.Failover, p.Launch.Failover...)
			l.Overlapping = append(l.Overlapping, p.Launch.Overlapping...)
			l.Configs = append(l.Configs, p.Launch.Configs...)
		}
		if err := ld.store.RecordLaunch(ctx, l); err != nil {
			if errors.Is(err, state.ErrTooLarge) && len(chunk) > 1 {
				half := len(chunk) / 2
				chunks = append([][]plan.Part{chunk[:half], chunk[half:]}, chunks...)
				continue
			}
			ld.log.WithError(err).WithField("tasks", len(l.Tasks)).Warn("write-ahead of a launch failed; those tasks are not launched this cycle")
			continue
		}
		if h := ld.inst.hooks.writtenAhead; h != nil {
			h()
		}
		now := time.Now()
		for _, p := range chunk {
			for _, r := range p.Launch.Ready {
				if at, ok := ld.fires.launched(r.JobName); ok {
					ld.inst.metrics.scheduleLag.Observe(now.Sub(at).Seconds())
				}
			}
			for _, t := range p.Tasks {
				agent := t.ID.AgentID
				pool := pools[agent]
				if pool == nil {
					pool = offeredBy(byAgent[agent])
					pools[agent] = pool
				}
				exec := ld.executorFor(t.App, agent, pool, started)
				info := taskInfo(t.ID, t.Job, exec, pool.take(t.Job.CPUCount, t.Job.MemoryMB))
				if r, ok := ld.retries[t.ID.Meta]; ok && t.ID.Type == taskid.Failover {
					withAttempt(&info, r.Attempt)
				}
				if ld.cfg.TaskLease > 0 {
					withLabel(&info, executor.LeaseLabel, ld.cfg.TaskLease.String())
				}
				tasks[agent] = append(tasks[agent], info)
				// Traced before the ACCEPT, so that the STAGING precedes every update of the task
				// (whose rows take their original task id from it); a task whose ACCEPT is never
				// sent gets a TASK_DROPPED (unsent).
				ld.inst.trace.launched(info, t.Replaces)
			}
		}
	}
	if len(tasks) == 0 {
		reason := declineUnused // nothing fitted
		if len(parts) > 0 {
			reason = declineWriteAhead
		}
		ld.decline(ctx, offers, reason)
		return
	}
	ld.recordExecutors(ctx, started)
	maps.Copy(ld.executors, started)
	for id := range started {
		ld.startedAt[id] = time.Now()
	}
	for agentID, ts := range tasks {
		if ld.streamEnded() {
			ld.unsent(ctx, ts)
			continue
		}
		ids := make([]mesos.OfferID, 0, len(byAgent[agentID]))
		for _, o := range byAgent[agentID] {
			ids = append(ids, o.ID)
		}
		for _, t := range ts {
			ld.stale.heardOf(t.TaskID.Value, false, time.Now())
		}
		accept := calls.Accept(calls.OfferOperations{calls.OpLaunch(ts...)}.WithOffers(ids...)).With(calls.RefuseSeconds(refuseSeconds * 1e9))
		if err := ld.call(ctx, accept); err != nil {
			// Recorded running, maybe never launched. Mesos is asked about them now (after
			// the stream's end, the next subscription asks about every task): those it does
			// not know come back TASK_UNKNOWN or TASK_LOST and are relaunched; those it took
			// after all, as they are.
			ld.log.WithError(err).WithFields(logrus.Fields{"agent": agentID, "tasks": len(ts)}).Warn("launch not confirmed by Mesos; asking Mesos about its tasks")
			ld.inst.metrics.launchesUnconfirmed.Add(float64(len(ts)))
			if !errors.Is(err, errStreamEnded) {
				ask := make(map[string]string, len(ts))
				for _, t := range ts {
					ask[t.TaskID.Value] = agentID
				}
				ld.call(ctx, calls.Reconcile(calls.ReconcileTasks(ask)))
				ld.recon.add(ask, time.Now())
				ld.decline(ctx, byAgent[agentID], declineAcceptFailed)
			}
			continue
		}
		ld.log.WithFields(logrus.Fields{"agent": agentID, "tasks": len(ts)}).Info("launched")
		ld.inst.metrics.launched.Add(float64(len(ts)))
		ld.inst.metrics.offersAccepted.Add(float64(len(ids)))
	}
	var unused []mesos.Offer
	for agentID, os := range byAgent {
		if len(tasks[agentID]) == 0 {
			unused = append(unused, os...)
		}
	}
	ld.decline(ctx, unused, declineUnused)
}

// streamEnded says whether the subscription's event stream has ended: its offers are void.
func (ld *leader) streamEnded() bool { return ld.sub == nil || ld.sub.streamEnded().Err() != nil }

// unsent puts back the tasks written ahead whose ACCEPT was never sent, the stream having
// ended first: they never ran, so each shard goes to the failover queue whatever its job's
// failover setting, to run in the same run. Left running, reconciliation would end them as
// lost and the run of a job without failover would be lost with them.
func (ld *leader) unsent(ctx context.Context, ts []mesos.TaskInfo) {
	for _, t := range ts {
		id, err := taskid.Parse(t.TaskID.Value)
		if err != nil {
			continue
		}
		if _, err := ld.store.EndTaskWith(ctx, id, state.Failover, state.EndOptions{}); err != nil {
			ld.log.WithError(err).WithField("task", id.String()).Warn("cannot put back a task whose launch was never sent; reconciliation will end it")
			continue
		}
		ld.inst.trace.unsent(t)
		ld.log.WithField("task", id.String()).Info("the Mesos stream ended before the launch was sent: the shard is queued to launch again")
	}
	ld.poke()
}

func (ld *leader) decline(ctx context.Context, offers []mesos.Offer, reason string) {
	if len(offers) == 0 {
		return
	}
	ids := make([]mesos.OfferID, len(offers))
	for i, o := range offers {
		ids[i] = o.ID
	}
	ld.call(ctx, calls.Decline(ids...).With(calls.RefuseSeconds(refuseSeconds*1e9)))
	ld.inst.metrics.offersDeclined.WithLabelValues(reason).Add(float64(len(ids)))
}

// executorFor returns the ExecutorInfo for an app on an agent: the one already running there,
// byte for byte (Mesos refuses any other), or started by this launch; else one built from the
// app's current config, its resources taken from the agent's offers, which joins started.
func (ld *leader) executorFor(app config.App, agentID string, pool *offered, started map[string]mesos.ExecutorInfo) mesos.ExecutorInfo {
	id := taskid.Executor{AppName: app.AppName, AgentID: agentID}.String()
	if e, ok := ld.executors[id]; ok {
		return e
	}
	if e, ok := started[id]; ok {
		return e
	}
	e := executorInfo(ld.sub.frameworkID, app, agentID, pool.take(app.CPUCount, app.MemoryMB))
	started[id] = e
	return e
}

// agentsOf sums the offers per agent for the packer.
func agentsOf(offers []mesos.Offer) ([]binpack.Agent, map[string][]mesos.Offer) {
	byAgent := map[string][]mesos.Offer{}
	for _, o := range offers {
		byAgent[o.AgentID.Value] = append(byAgent[o.AgentID.Value], o)
	}
	ids := make([]string, 0, len(byAgent))
	for id := range byAgent {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	agents := make([]binpack.Agent, 0, len(ids))
	for _, id := range ids {
		a := binpack.Agent{ID: id, Hostname: byAgent[id][0].Hostname, Executors: map[string]bool{}}
		for _, o := range byAgent[id] {
			for _, r := range o.Resources {
				if r.Scalar == nil {
					continue
				}
				switch r.Name {
				case "cpus":
					a.Free.CPUs += r.Scalar.Value
				case "mem":
					a.Free.MemMB += r.Scalar.Value
				}
			}
			for _, e := range o.ExecutorIDs {
				if ex, err := taskid.ParseExecutor(e.Value); err == nil {
					a.Executors[ex.AppName] = true
				}
			}
		}
		agents = append(agents, a)
	}
	return agents, byAgent
}

// eligible reads the cycle's snapshot from the model and asks plan.Eligible; it removes the
// entries of jobs that no longer exist. A failed read is an error, never a guess.
func (ld *leader) eligible(ctx context.Context) (plan.Work, error) {
	mark := ld.fires.mark()
	snap, err := ld.snapshot(ctx)
	if err != nil {
		return plan.Work{}, err
	}
	counts := make(map[string]int, len(snap.Ready))
	for _, r := range snap.Ready {
		counts[r.JobName] = r.Count
	}
	ld.fires.settle(mark, counts)
	waiting := ld.gateDependencies(ctx, &snap)
	now := time.Now()
	var retries map[taskid.Meta]state.RetryState
	if len(snap.Failovers) > 0 {
		if retries, err = ld.store.Retries(ctx); err != nil {
			return plan.Work{}, err
		}
	}
	ld.retries = retries
	// A shard's failover entry goes once its failover backoff and its retry backoff (issue 19)
	// have both run out.
	w := plan.Eligible(snap, func(m taskid.Meta) bool {
		return ld.relaunch.due(m, now) && !now.Before(retries[m].NotBefore)
	})
	waitReasons(snap, w, retries, ld.relaunch.retryAt, now, waiting)
	ld.mu.Lock()
	ld.waiting = waiting
	ld.mu.Unlock()
	for _, f := range w.StaleFailover {
		if err := ld.store.RemoveStaleFailover(ctx, f); err != nil {
			ld.log.WithError(err).WithField("shard", f.Meta.String()).Warn("cannot remove the failover entry of a deleted job")
		}
	}
	for _, job := range w.StaleReady {
		if err := ld.store.RemoveStaleReady(ctx, job); err != nil {
			ld.log.WithError(err).WithField("job", job).Warn("cannot remove the ready entry of a deleted job")
		}
	}
	for _, r := range w.Settled {
		if err := ld.store.DropReady(ctx, r); err != nil {
			ld.log.WithError(err).WithField("job", r.JobName).Debug("cannot drop the ready entry of a DAEMON job whose every shard runs")
		}
	}
	for _, job := range w.Beyond {
		if n, err := ld.store.DropBeyond(ctx, job, snap.Jobs[job].ShardingTotalCount); err != nil {
			ld.log.WithError(err).WithField("job", job).Warn("cannot drop the waiting shards beyond the job's shardingTotalCount")
		} else if n > 0 {
			ld.log.WithFields(logrus.Fields{"job": job, "dropped": n}).Info("dropped the waiting shards beyond the job's lowered shardingTotalCount; their run failed")
		}
	}
	return w, nil
}

// snapshot reads what plan.Eligible needs from the model.
func (ld *leader) snapshot(ctx context.Context) (plan.Snapshot, error) {
	var s plan.Snapshot
	var err error
	// The queues are read before the jobs: an entry is written only for a job that exists, so
	// every entry's job is in the later job list unless it was really deleted.
	if s.Ready, err = ld.store.Ready(ctx); err != nil {
		return s, err
	}
	if s.Failovers, err = ld.store.Failovers(ctx); err != nil {
		return s, err
	}
	if len(s.Ready) == 0 && len(s.Failovers) == 0 {
		return s, nil
	}
	queued := map[string]bool{}
	for _, r := range s.Ready {
		queued[r.JobName] = true
	}
	for _, f := range s.Failovers {
		queued[f.Meta.JobName] = true
	}
	if s.Jobs, s.JobVersions, err = ld.store.JobsNamed(ctx, slices.Sorted(maps.Keys(queued))); err != nil {
		return s, err
	}
	apps, err := ld.store.Apps(ctx)
	if err != nil {
		return s, err
	}
	s.Apps = make(map[string]config.App, len(apps))
	for _, a := range apps {
		s.Apps[a.AppName] = a
	}
	if s.OffApps, s.OffJobs, err = ld.store.Disabled(ctx); err != nil {
		return s, err
	}
	if s.Stopped, err = ld.store.StoppedJobs(ctx); err != nil {
		return s, err
	}
	s.Running, err = ld.store.Running(ctx)
	return s, err
}

// recordUnplaced keeps, per job, why its shards found no room, for the API and console.
func (ld *leader) recordUnplaced(w plan.Work, res binpack.Result) {
	reasons := plan.Unplaced(w, res)
	ld.mu.Lock()
	last := ld.unplaced
	ld.unplaced = reasons
	ld.mu.Unlock()
	for _, u := range res.Unplaced {
		for r := range u.Reasons {
			ld.inst.metrics.unplaced.WithLabelValues(r).Inc()
		}
	}
	// At Info when a job's reasons change (which, not how many agents gave each, which
	// follows the offers), not at every cycle: a job that cannot fit would say so at every
	// offer, for as long as it waits.
	for job, r := range reasons {
		entry := ld.log.WithFields(logrus.Fields{"job": job, "reasons": r})
		if sameKeys(last[job], r) {
			entry.Debug("shards not placed this cycle")
			continue
		}
		entry.Info("shards not placed this cycle")
	}
}

// Unplaced returns, per job, why its shards were not placed in the last cycle, and why its queued
// work waits (issue 19: dependencies, backoffs, concurrency policy), from the leader's memory.
func (s *instance) Unplaced() map[string]map[string]int {
	s.mu.Lock()
	ld := s.ld
	s.mu.Unlock()
	if ld == nil {
		return nil
	}
	ld.mu.Lock()
	defer ld.mu.Unlock()
	out := map[string]map[string]int{}
	for k, v := range ld.unplaced {
		out[k] = maps.Clone(v)
	}
	for k, v := range ld.waiting.reasons {
		if out[k] == nil {
			out[k] = map[string]int{}
		}
		maps.Copy(out[k], v)
	}
	return out
}

// sameKeys says whether a and b have the same keys.
func sameKeys(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			return false
		}
	}
	return true
}
