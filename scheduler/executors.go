package scheduler

import (
	"context"
	"maps"
	"slices"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"

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

// loadExecutors reads the ExecutorInfos that the leaders before this one recorded.
func (ld *leader) loadExecutors(ctx context.Context) {
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

// unlistedGrace is how long an executor this leader just launched is kept though an offer of
// its agent does not list it: Mesos may have made that offer (of other resources of the agent)
// before it took the ACCEPT.
const unlistedGrace = 15 * time.Second

// pruneExecutors forgets, after a subscription, the executors that the master no longer lists
// on an agent connected to it: their FAILURE events may have come while this leader was not
// subscribed, or before it led. An executor on another agent (unreachable, or not re-registered
// after a master failover) is kept: it may come back.
func (ld *leader) pruneExecutors(ctx context.Context) {
	if len(ld.executors) == 0 {
		return
	}
	doc, err := ld.masterState(ctx)
	if err != nil {
		ld.log.WithError(err).Warn("cannot read the master's state: the known ExecutorInfos are kept")
		return
	}
	live := map[string]bool{}
	for _, f := range doc.Frameworks {
		if f.ID == ld.sub.frameworkID {
			for _, e := range f.Executors {
				live[e.ExecutorID] = true
			}
		}
	}
	agents := map[string]bool{} // the agents connected to the master: it lists all their executors
	for _, a := range doc.Slaves {
		agents[a.ID] = a.Active
	}
	var gone []string
	for _, id := range slices.Sorted(maps.Keys(ld.executors)) {
		if ex, err := taskid.ParseExecutor(id); err == nil && agents[ex.AgentID] && !live[id] {
			gone = append(gone, id)
		}
	}
	if len(gone) > 0 {
		ld.log.WithField("executors", len(gone)).Info("forgetting the executors the master no longer lists")
	}
	ld.forgetExecutors(ctx, gone...)
}

// sweepOrphans tells this framework's executors whose app no longer exists to stop (MESSAGE
// STOP), off the event loop. DeleteApp tells them once, but Mesos drops a message to an agent
// or executor it cannot reach, and a deletion between subscriptions or written behind the
// leader's back tells none; Mesos never stops an idle executor, so such an executor would hold
// its resources for ever. Every subscription, and every reconciliation interval, looks again.
func (ld *leader) sweepOrphans(ctx context.Context) {
	if !ld.sweeping.CompareAndSwap(false, true) {
		return // the last sweep is still under way
	}
	go func() {
		defer ld.sweeping.Store(false)
		live, err := ld.masterExecutors(ctx)
		if err != nil {
			ld.log.WithError(err).Debug("cannot read the master's executors: no sweep of the deleted apps' executors this time")
			return
		}
		apps, err := ld.store.Apps(ctx)
		if err != nil {
			ld.log.WithError(err).Debug("cannot read the apps: no sweep of the deleted apps' executors this time")
			return
		}
		exists := map[string]bool{}
		for _, a := range apps {
			exists[a.AppName] = true
		}
		var orphans []string
		for _, id := range slices.Sorted(maps.Keys(live)) {
			if ex, err := taskid.ParseExecutor(id); err == nil && !exists[ex.AppName] {
				orphans = append(orphans, id)
			}
		}
		if len(orphans) == 0 {
			return
		}
		ld.onLoop(ctx, func(ctx context.Context) {
			ld.log.WithField("executors", orphans).Info("executors of deleted apps are still up: telling them to stop")
			ld.stopExecutors(ctx, orphans)
		})
	}()
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
