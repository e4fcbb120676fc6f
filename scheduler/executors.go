package scheduler

import (
	"context"
	"maps"
	"slices"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"
	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/executor"
	"github.com/ejcloud/ejcloud/taskid"
)

// The ExecutorInfos of live executors (SPEC §5.4 step 2). Mesos refuses a task for a live
// executor unless it carries that executor's ExecutorInfo, and an app's config may have
// changed since the executor started (an app update takes effect where its executor next
// starts). So the leader keeps the ExecutorInfo of each executor it starts, in ld.executors
// and in ZooKeeper (state.Store.SaveExecutors), and a new leader reads them back: built again
// from today's app, a task would be refused (TASK_ERROR "ExecutorInfo is not compatible") for
// as long as the old executor lives.

// loadExecutors reads the ExecutorInfos that the leaders before this one recorded, and since
// when the agents the master lists nowhere are so (pruneWith).
func (ld *leader) loadExecutors(ctx context.Context) {
	if since, err := ld.store.UnlistedAgents(ctx); err != nil {
		ld.log.WithError(err).Warn("cannot read since when agents are unlisted: their executors' records are kept a day from now")
	} else {
		maps.Copy(ld.agentsUnlisted, since)
	}
	recorded, err := ld.store.Executors(ctx)
	if err != nil {
		ld.log.WithError(err).Warn("cannot read the recorded executors: tasks for a live executor are built from the app's config")
		return
	}
	for id, data := range recorded {
		var e mesos.ExecutorInfo
		if err := e.Unmarshal(data); err != nil || e.ExecutorID.Value != id {
			ld.log.WithField("executor", id).Warn("recorded ExecutorInfo unreadable; ignoring it")
			continue
		}
		ld.executors[id] = e
	}
}

// recordExecutors records the ExecutorInfos of executors that a launch is about to start.
// Unrecorded, only a leader change while the executor lives makes a difference, so a failed
// write does not hold the launch back.
func (ld *leader) recordExecutors(ctx context.Context, started map[string]mesos.ExecutorInfo) {
	if len(started) == 0 {
		return
	}
	infos := make(map[string][]byte, len(started))
	for id, e := range started {
		data, err := e.Marshal()
		if err != nil {
			ld.log.WithError(err).WithField("executor", id).Warn("cannot encode an ExecutorInfo")
			continue
		}
		infos[id] = data
	}
	if err := ld.store.SaveExecutors(ctx, infos); err != nil {
		ld.log.WithError(err).Warn("cannot record the ExecutorInfos of new executors")
	}
}

// forgetExecutors drops executors that Mesos says are gone: the next task for their app on
// their agent starts a new executor from the app's config.
func (ld *leader) forgetExecutors(ctx context.Context, ids ...string) {
	if len(ids) == 0 {
		return
	}
	for _, id := range ids {
		delete(ld.executors, id)
		delete(ld.startedAt, id)
	}
	if err := ld.store.ForgetExecutors(ctx, ids...); err != nil {
		ld.log.WithError(err).WithField("executors", ids).Warn("cannot remove the records of executors that are gone")
	}
}

// forgetUnlisted forgets the recorded executors on the offered agents that their offers do not
// list: an offer lists every executor of this framework running on its agent (MESOS.md
// §1.9.1), while FAILURE, which says one ended, is not reliably delivered, and an executor
// recorded for an ACCEPT that Mesos refused never started. Kept, such a record would give the
// next executor there the ExecutorInfo of the app as it was, not what the packer budgeted
// from the app as it is: more than the offer, or an app update that never takes effect.
func (ld *leader) forgetUnlisted(ctx context.Context, byAgent map[string][]mesos.Offer) {
	if len(ld.executors) == 0 {
		return
	}
	listed := map[string]bool{}
	for _, offers := range byAgent {
		for _, o := range offers {
			for _, e := range o.ExecutorIDs {
				listed[e.Value] = true
			}
		}
	}
	var gone []string
	for id := range ld.executors {
		if time.Since(ld.startedAt[id]) < unlistedGrace {
			continue // an offer made before Mesos took the ACCEPT that started it
		}
		ex, err := taskid.ParseExecutor(id)
		if _, offered := byAgent[ex.AgentID]; err == nil && offered && !listed[id] {
			gone = append(gone, id)
		}
	}
	ld.forgetExecutors(ctx, gone...)
}

// stopUnknown tells each idle executor of ours that an offer lists but whose ExecutorInfo the
// leader does not know to stop (MESSAGE STOP), and returns the agents of those it told, whose
// offers this cycle must leave alone. Such an info was lost: its record's write failed (which
// does not hold a launch back), or it was forgotten while its agent was away (pruneWith). A
// task for its app sent there would carry an info built from the app as it is now, which Mesos
// refuses (TASK_ERROR "ExecutorInfo is not compatible") if the app has changed since, for as
// long as the executor lives, and Mesos never stops an idle one. Stopped, it makes way for a
// new one at the app's next task there; until its agent is offered without it (after the
// decline's filter), that agent takes nothing, as a task sent meanwhile could still meet it.
// One that runs tasks of ours is left alone: they run the app as it was, and would die with it.
// It looks whether or not there is work: an idle executor holds its resources meanwhile.
func (ld *leader) stopUnknown(ctx context.Context, offers []mesos.Offer) map[string]bool {
	unknown := map[string]taskid.Executor{}
	for _, o := range offers {
		for _, e := range o.ExecutorIDs {
			ex, err := taskid.ParseExecutor(e.Value)
			if _, known := ld.executors[e.Value]; err == nil && !known && ex.AgentID == o.AgentID.Value {
				unknown[e.Value] = ex
			}
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	running, err := ld.store.Running(ctx)
	if err != nil {
		ld.log.WithError(err).Warn("cannot read the running tasks: the executors whose ExecutorInfo is unknown are left alone this cycle")
		return nil
	}
	names := map[string]bool{}
	for _, r := range running {
		names[r.Meta.JobName] = true
	}
	jobs, _, err := ld.store.JobsNamed(ctx, slices.Sorted(maps.Keys(names)))
	if err != nil {
		ld.log.WithError(err).Warn("cannot read the running tasks' jobs: the executors whose ExecutorInfo is unknown are left alone this cycle")
		return nil
	}
	busy, busyAgent := map[string]bool{}, map[string]bool{} // executors running our tasks; agents running tasks of an unknown app
	for _, r := range running {
		id, err := taskid.Parse(r.TaskID)
		if err != nil {
			continue
		}
		if job, ok := jobs[r.Meta.JobName]; ok {
			busy[taskid.Executor{AppName: job.AppName, AgentID: id.AgentID}.String()] = true
		} else {
			busyAgent[id.AgentID] = true
		}
	}
	held := map[string]bool{}
	var idle []string
	for _, id := range slices.Sorted(maps.Keys(unknown)) {
		if ex := unknown[id]; !busy[id] && !busyAgent[ex.AgentID] {
			idle, held[ex.AgentID] = append(idle, id), true
		}
	}
	if len(idle) > 0 {
		ld.log.WithField("executors", idle).Warn("idle executors whose ExecutorInfo is unknown (the record was lost): telling them to stop, so that the app's next task there starts one from the app as it is")
		ld.stopExecutors(ctx, idle)
	}
	return held
}

// unlistedGrace is how long an executor this leader just launched is kept though an offer of
// its agent does not list it: Mesos may have made that offer (of other resources of the agent)
// before it took the ACCEPT.
const unlistedGrace = 15 * time.Second

// pruneExecutors forgets, after a subscription, the recorded executors that the master shows
// are gone (pruneWith).
func (ld *leader) pruneExecutors(ctx context.Context) {
	if len(ld.executors) == 0 {
		return
	}
	readAt := time.Now()
	doc, err := ld.masterState(ctx)
	if err != nil {
		ld.log.WithError(err).Warn("cannot read the master's state: the known ExecutorInfos are kept")
		return
	}
	// On the event loop, so every launch of this leader's was sent before the read.
	ld.pruneWith(ctx, doc, readAt, readAt)
}

// pruneWith forgets the recorded executors that doc, the master's state, shows are gone:
//   - one the master no longer lists on an agent connected to it: its FAILURE event may have
//     come while this leader was not subscribed, or before it led;
//   - every one on an agent the master has listed nowhere (neither registered nor recovered
//     from its registry) for agentGoneAfter until now, as the leaders have seen it (the time
//     it was first found so is kept in ZooKeeper: state.Store.MarkUnlisted). Agents come back
//     from a partition under their id, with their executors, so a short absence keeps the
//     records; but an agent whose host rebooted registers under a new id and the old one never
//     returns, and without this its records would pile up in ZooKeeper for ever.
//
// One on an agent registered but disconnected is kept: it may come back. So is one this
// leader launched after settled, which doc may predate.
func (ld *leader) pruneWith(ctx context.Context, doc masterState, settled, now time.Time) {
	if ld.sub == nil || len(ld.executors) == 0 && len(ld.agentsUnlisted) == 0 {
		return
	}
	live := doc.executorsOf(ld.sub.frameworkID)
	active := map[string]bool{} // the agents connected to the master: it lists all their executors
	listed := map[string]bool{}
	for _, a := range doc.Slaves {
		active[a.ID], listed[a.ID] = a.Active, true
	}
	for _, a := range doc.RecoveredSlaves {
		listed[a.ID] = true
	}
	var gone []string
	recorded, agentsGone := map[string]bool{}, map[string]bool{} // agents with a record, and of those gone
	marked := map[string]time.Time{}                             // agents found unlisted now
	for _, id := range slices.Sorted(maps.Keys(ld.executors)) {
		ex, err := taskid.ParseExecutor(id)
		if err != nil || ld.startedAt[id].After(settled) {
			continue
		}
		recorded[ex.AgentID] = true
		switch since, seen := ld.agentsUnlisted[ex.AgentID]; {
		case active[ex.AgentID] && !live[id]:
			gone = append(gone, id)
		case listed[ex.AgentID]:
		case !seen:
			ld.agentsUnlisted[ex.AgentID], marked[ex.AgentID] = now, now
		case now.Sub(since) >= agentGoneAfter:
			gone, agentsGone[ex.AgentID] = append(gone, id), true
		}
	}
	var unmarked []string
	for _, agent := range slices.Sorted(maps.Keys(ld.agentsUnlisted)) {
		if listed[agent] || !recorded[agent] || agentsGone[agent] {
			unmarked = append(unmarked, agent)
		}
	}
	if err := ld.store.MarkUnlisted(ctx, marked); err != nil {
		ld.log.WithError(err).Warn("cannot record since when agents are unlisted: a new leader would count from its own start")
	}
	if len(gone) > 0 {
		ld.log.WithFields(logrus.Fields{"executors": len(gone), "agents_gone": slices.Sorted(maps.Keys(agentsGone))}).
			Info("forgetting the executors the master no longer lists")
	}
	ld.forgetExecutors(ctx, gone...)
	if len(unmarked) > 0 {
		// Kept until ZooKeeper has them gone: the next prune tries again.
		if err := ld.store.UnmarkUnlisted(ctx, unmarked...); err != nil {
			ld.log.WithError(err).Warn("cannot remove the unlisted marks of agents listed again or without records")
			return
		}
		for _, agent := range unmarked {
			delete(ld.agentsUnlisted, agent)
		}
	}
}

// agentGoneAfter is how long an agent the master lists nowhere keeps its executors' records
// (pruneWith). An agent cut off that long and then back is rare, and what it costs then is what
// a record lost to a failed write costs: an idle executor there is told to stop (stopUnknown),
// and one still running our tasks, should its app have changed, has Mesos refuse the app's
// tasks there (TASK_ERROR, relaunched after a backoff) until it ends.
const agentGoneAfter = 24 * time.Hour

// sweepOrphans, off the event loop, reads the master's state and then, on the loop, forgets
// the recorded executors it shows are gone (pruneWith) and tells this framework's executors
// whose app no longer exists to stop (MESSAGE STOP). DeleteApp tells them once, but Mesos
// drops a message to an agent or executor it cannot reach, and a deletion between
// subscriptions or written behind the leader's back tells none; Mesos never stops an idle
// executor, so such an executor would hold its resources for ever. Every subscription, and
// every reconciliation interval, looks again.
func (ld *leader) sweepOrphans(ctx context.Context) {
	if !ld.sweeping.CompareAndSwap(false, true) {
		return // the last sweep is still under way
	}
	go func() {
		defer ld.sweeping.Store(false)
		readAt := time.Now()
		doc, err := ld.masterState(ctx)
		if err != nil {
			ld.log.WithError(err).Debug("cannot read the master's state: no sweep of the executors this time")
			return
		}
		var orphans []string
		if apps, err := ld.store.Apps(ctx); err != nil {
			ld.log.WithError(err).Debug("cannot read the apps: no sweep of the deleted apps' executors this time")
		} else {
			orphans = ld.orphans(ctx, doc, apps)
		}
		ld.onLoop(ctx, func(ctx context.Context) {
			// Mesos may not have taken yet, when the master was read, an ACCEPT sent
			// shortly before.
			ld.pruneWith(ctx, doc, readAt.Add(-unlistedGrace), time.Now())
			if len(orphans) > 0 {
				ld.log.WithField("executors", orphans).Info("executors of deleted apps are still up: telling them to stop")
				ld.stopExecutors(ctx, orphans)
			}
		})
	}()
}

// orphans are this framework's executors in doc whose app is not one of apps.
func (ld *leader) orphans(ctx context.Context, doc masterState, apps []config.App) []string {
	fwID, err := ld.store.FrameworkID(ctx)
	if err != nil {
		ld.log.WithError(err).Debug("cannot read the framework id: no sweep of the deleted apps' executors this time")
		return nil
	}
	exists := map[string]bool{}
	for _, a := range apps {
		exists[a.AppName] = true
	}
	var out []string
	for _, id := range slices.Sorted(maps.Keys(doc.executorsOf(fwID))) {
		if ex, err := taskid.ParseExecutor(id); err == nil && !exists[ex.AppName] {
			out = append(out, id)
		}
	}
	return out
}

// stopExecutors tells executors to stop (MESSAGE STOP: they kill their tasks and exit) and
// forgets them, on the event loop. Mesos drops a message it cannot deliver: sweepOrphans looks
// again later.
func (ld *leader) stopExecutors(ctx context.Context, ids []string) {
	for _, id := range ids {
		if ex, err := taskid.ParseExecutor(id); err == nil {
			ld.call(ctx, calls.Message(ex.AgentID, id, []byte(executor.StopMessage)))
		}
	}
	ld.forgetExecutors(ctx, ids...)
}
