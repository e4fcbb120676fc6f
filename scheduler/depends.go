package scheduler

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/scheduler/plan"
	"github.com/ejcloud/ejcloud/scheduler/schedule"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/taskid"
)

// Dependencies (issue 19): a queued run of a job with dependsOn starts only once, for each
// dependency, the dependency's run of the same logical time — its first run launched at or after
// its latest slot at or before this run's slot — has ended successfully. A failed one skips the
// run ("upstream failed"); anything else keeps it waiting, with the reason shown.

// depState is what a dependency's ledger says of one logical time.
type depState int

const (
	depWaiting depState = iota
	depSucceeded
	depFailed
)

// dependencyRun finds, in a dependency's ledger, its run for logical time at: the first fired
// entry launched at or after it.
func dependencyRun(l state.Ledger, at time.Time) (state.FireEntry, bool) {
	var best state.FireEntry
	found := false
	for _, e := range l.Fires {
		if e.Outcome != state.OutcomeFired || e.Launched.IsZero() || e.Launched.Before(at) {
			continue
		}
		if !found || e.Launched.Before(best.Launched) {
			best, found = e, true
		}
	}
	return best, found
}

// gateDependencies takes out of the snapshot's ready entries the runs whose dependencies have
// not all succeeded, and skips those whose dependency failed. It returns, per job held back, why.
func (ld *leader) gateDependencies(ctx context.Context, snap *plan.Snapshot) map[string]string {
	waiting := map[string]string{}
	kept := snap.Ready[:0:0]
	for _, r := range snap.Ready {
		j, ok := snap.Jobs[r.JobName]
		if !ok || len(j.DependsOn) == 0 {
			kept = append(kept, r)
			continue
		}
		st, why := ld.dependencies(ctx, j, r)
		switch st {
		case depSucceeded:
			kept = append(kept, r)
		case depFailed:
			if err := ld.store.SkipQueuedRun(ctx, r, why); err != nil {
				ld.log.WithError(err).WithField("job", r.JobName).Warn("cannot skip a run whose dependency failed")
				waiting[r.JobName] = why
				continue
			}
			ld.log.WithFields(logrus.Fields{"job": r.JobName, "reason": why}).Info("queued run skipped")
		default:
			waiting[r.JobName] = why
		}
	}
	snap.Ready = kept
	return waiting
}

// dependencies says whether job j's next queued run (r) may start, and why not.
func (ld *leader) dependencies(ctx context.Context, j config.Job, r state.ReadyEntry) (depState, string) {
	led, _, err := ld.store.FireLedger(ctx, j.JobName)
	if err != nil {
		return depWaiting, "cannot read the fire ledger: " + err.Error()
	}
	i := led.NextRun(r.Count)
	if i < 0 {
		return depSucceeded, "" // a run the ledger does not know: nothing to wait for
	}
	slot := led.Fires[i].Slot
	var waits []string
	for _, name := range j.DependsOn {
		dep, err := ld.store.Job(ctx, name)
		if err != nil {
			waits = append(waits, fmt.Sprintf("dependency %q: %v", name, err))
			continue
		}
		sched, err1 := dep.Schedule()
		loc, err2 := dep.Location()
		if err1 != nil || err2 != nil || sched == nil {
			waits = append(waits, fmt.Sprintf("dependency %q has no cron", name))
			continue
		}
		at := schedule.LogicalTime(sched, loc, slot)
		if at.IsZero() {
			continue // no slot of it before this one: nothing to wait for
		}
		dl, _, err := ld.store.FireLedger(ctx, name)
		if err != nil {
			waits = append(waits, fmt.Sprintf("dependency %q: %v", name, err))
			continue
		}
		run, ok := dependencyRun(dl, at)
		switch {
		case ok && run.Succeeded():
		case ok && run.Failed != "":
			return depFailed, fmt.Sprintf("upstream failed: %q's run of %s failed (%s)", name, at.UTC().Format(time.RFC3339), run.Failed)
		case ok:
			waits = append(waits, fmt.Sprintf("waiting for %q's run of %s to end", name, at.UTC().Format(time.RFC3339)))
		default:
			why := fmt.Sprintf("waiting for %q's run of %s", name, at.UTC().Format(time.RFC3339))
			if off, err := (fireGate{ld.store}).JobOrAppDisabled(ctx, dep); err == nil && off {
				why += " (it is disabled or stopped)"
			}
			waits = append(waits, why)
		}
	}
	if len(waits) > 0 {
		sort.Strings(waits)
		return depWaiting, "dependsOn: " + strings.Join(waits, "; ")
	}
	return depSucceeded, ""
}

// waitReasons adds to waiting why each queued run that the cycle's work leaves out waits, where
// it is the job's own schedule semantics (issue 19): a retry's backoff, a failed-over shard's
// backoff, or the last run still running (concurrencyPolicy). Disabled and stopped jobs say so
// elsewhere; unplaced shards have their own reasons.
func waitReasons(snap plan.Snapshot, w plan.Work, retries map[taskid.Meta]state.RetryState, now time.Time, waiting map[string]string) {
	chosen := map[string]bool{}
	for _, j := range w.Jobs {
		chosen[j.JobName] = true
	}
	running := map[string]int{}
	for _, r := range snap.Running {
		running[r.Meta.JobName]++
	}
	relaunch := map[string][]string{}
	for _, f := range snap.Failovers {
		if r, ok := retries[f.Meta]; ok && now.Before(r.NotBefore) {
			relaunch[f.Meta.JobName] = append(relaunch[f.Meta.JobName],
				fmt.Sprintf("shard %d's retry (attempt %d) at %s", f.Meta.Item, r.Attempt, r.NotBefore.UTC().Format(time.RFC3339Nano)))
		} else if _, launched := w.Failover[f.Meta.JobName]; !launched {
			relaunch[f.Meta.JobName] = append(relaunch[f.Meta.JobName], fmt.Sprintf("shard %d's relaunch backoff", f.Meta.Item))
		}
	}
	for _, r := range snap.Ready {
		if chosen[r.JobName] || waiting[r.JobName] != "" {
			continue
		}
		j := snap.Jobs[r.JobName]
		switch {
		case len(relaunch[r.JobName]) > 0:
			sort.Strings(relaunch[r.JobName])
			waiting[r.JobName] = "waiting for " + strings.Join(relaunch[r.JobName], ", ")
		case running[r.JobName] > 0 && j.ConcurrencyPolicy == config.Replace:
			waiting[r.JobName] = fmt.Sprintf("concurrencyPolicy Replace: waiting for the %d killed shards of the last run to end", running[r.JobName])
		case running[r.JobName] > 0:
			waiting[r.JobName] = fmt.Sprintf("concurrencyPolicy Forbid: waiting for the last run to end (%d shards running)", running[r.JobName])
		}
	}
}

// Waiting returns why the job's queued run waits (dependencies, retries, relaunches, the last
// run still running), or "".
func (s *instance) Waiting(job string) string {
	s.mu.Lock()
	ld := s.ld
	s.mu.Unlock()
	if ld == nil {
		return ""
	}
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return ld.waiting[job]
}
