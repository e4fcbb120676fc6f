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
// entry launched at or after it. A run the dependency skipped because its own dependency failed
// (SkipQueuedRun: failed and ended) counts too, failed, as of when it was skipped: a chain
// a → b → c skips c's run of the logical time a failed, rather than tie it to b's next run.
func dependencyRun(l state.Ledger, at time.Time) (state.FireEntry, bool) {
	var best state.FireEntry
	var bestAt time.Time
	found := false
	for _, e := range l.Fires {
		when := e.Launched
		switch {
		case e.Outcome == state.OutcomeSkipped && e.Failed != "" && !e.Ended.IsZero():
			when = e.Ended
		case e.Outcome != state.OutcomeFired || e.Launched.IsZero():
			continue
		}
		if when.Before(at) {
			continue
		}
		if !found || when.Before(bestAt) {
			best, bestAt, found = e, when, true
		}
	}
	return best, found
}

// upstreamFailed is the reason a run is skipped for its dependency's failed run of logical time
// at. The dependency's own reason is quoted only when it is not itself an upstream failure: down
// a chain, reasons would nest and grow the ledger with its depth.
func upstreamFailed(dependency string, at time.Time, failed string) string {
	why := fmt.Sprintf("upstream failed: %q's run of %s failed", dependency, at.UTC().Format(time.RFC3339))
	if !strings.HasPrefix(failed, "upstream failed") {
		why += " (" + failed + ")"
	}
	return why
}

// Why queued work waits, as GET /api/job/unplaced gives it beside binpack's reasons (issue 19):
// stable strings a client may match, each with the number of the job's shards waiting for it.
const (
	waitDependency = "waiting: dependency "             // + the dependency's name
	waitRetry      = "waiting: retry backoff until "    // + RFC 3339 (UTC, whole seconds, rounded up)
	waitFailover   = "waiting: failover backoff until " // + RFC 3339: an infrastructure failure's relaunch
	waitForbid     = "waiting: concurrency policy Forbid"
	waitReplace    = "waiting: concurrency policy Replace"
)

// until formats a backoff's end for a reason: rounded up, so that "until" never names a time
// before the wait ends.
func until(t time.Time) string {
	if r := t.Truncate(time.Second); r.Before(t) {
		t = r.Add(time.Second)
	}
	return t.UTC().Format(time.RFC3339)
}

// waits is why queued work waits, per job: a sentence (GET /api/job/{jobName}/fires) and the
// stable reasons with their shard counts (GET /api/job/unplaced).
type waits struct {
	why     map[string]string
	reasons map[string]map[string]int
}

func newWaits() waits {
	return waits{why: map[string]string{}, reasons: map[string]map[string]int{}}
}

func (w waits) add(job, reason string, shards int) {
	if w.reasons[job] == nil {
		w.reasons[job] = map[string]int{}
	}
	w.reasons[job][reason] += shards
}

// gateDependencies takes out of the snapshot's ready entries the runs whose dependencies have
// not all succeeded, and skips those whose dependency failed. It returns, per job held back, why.
func (ld *leader) gateDependencies(ctx context.Context, snap *plan.Snapshot) waits {
	waiting := newWaits()
	kept := snap.Ready[:0:0]
	for _, r := range snap.Ready {
		j, ok := snap.Jobs[r.JobName]
		if !ok || len(j.DependsOn) == 0 {
			kept = append(kept, r)
			continue
		}
		st, why, deps := ld.dependencies(ctx, j, r)
		hold := func() {
			waiting.why[r.JobName] = why
			for _, d := range deps {
				waiting.add(r.JobName, waitDependency+d, j.ShardingTotalCount)
			}
		}
		switch st {
		case depSucceeded:
			kept = append(kept, r)
		case depFailed:
			if err := ld.store.SkipQueuedRun(ctx, r, why); err != nil {
				ld.log.WithError(err).WithField("job", r.JobName).Warn("cannot skip a run whose dependency failed")
				hold()
				continue
			}
			ld.log.WithFields(logrus.Fields{"job": r.JobName, "reason": why}).Info("queued run skipped")
		default:
			hold()
		}
	}
	snap.Ready = kept
	return waiting
}

// dependencies says whether job j's next queued run (r) may start, why not, and which of its
// dependencies it waits for (or the one that failed).
func (ld *leader) dependencies(ctx context.Context, j config.Job, r state.ReadyEntry) (depState, string, []string) {
	led, _, err := ld.store.FireLedger(ctx, j.JobName)
	if err != nil {
		return depWaiting, "cannot read the fire ledger: " + err.Error(), j.DependsOn
	}
	i := led.NextRun(r.Count)
	if i < 0 {
		return depSucceeded, "", nil // a run the ledger does not know: nothing to wait for
	}
	slot := led.Fires[i].Slot
	var waits, names []string
	for _, name := range j.DependsOn {
		dep, err := ld.store.Job(ctx, name)
		if err != nil {
			waits, names = append(waits, fmt.Sprintf("dependency %q: %v", name, err)), append(names, name)
			continue
		}
		sched, err1 := dep.Schedule()
		loc, err2 := dep.Location()
		if err1 != nil || err2 != nil || sched == nil {
			waits, names = append(waits, fmt.Sprintf("dependency %q has no cron", name)), append(names, name)
			continue
		}
		at := schedule.LogicalTime(sched, loc, slot)
		if at.IsZero() {
			continue // no slot of it before this one: nothing to wait for
		}
		dl, _, err := ld.store.FireLedger(ctx, name)
		if err != nil {
			waits, names = append(waits, fmt.Sprintf("dependency %q: %v", name, err)), append(names, name)
			continue
		}
		run, ok := dependencyRun(dl, at)
		switch {
		case ok && run.Succeeded():
		case ok && run.Failed != "":
			return depFailed, upstreamFailed(name, at, run.Failed), []string{name}
		case ok:
			waits, names = append(waits, fmt.Sprintf("waiting for %q's run of %s to end", name, at.UTC().Format(time.RFC3339))), append(names, name)
		default:
			why := fmt.Sprintf("waiting for %q's run of %s", name, at.UTC().Format(time.RFC3339))
			if off, err := (fireGate{ld.store}).JobOrAppDisabled(ctx, dep); err == nil && off {
				why += " (it is disabled or stopped)"
			}
			waits, names = append(waits, why), append(names, name)
		}
	}
	if len(waits) > 0 {
		sort.Strings(waits)
		return depWaiting, "dependsOn: " + strings.Join(waits, "; "), names
	}
	return depSucceeded, "", nil
}

// waitReasons adds to waiting why each queued run and failed-over shard that the cycle's work
// leaves out waits, where it is the job's own schedule semantics (issue 19): a retry's backoff, a
// failed-over shard's backoff (relaunchAt: when it runs out), or the last run still running
// (concurrencyPolicy). Disabled and stopped jobs say so elsewhere; unplaced shards have their
// own reasons.
func waitReasons(snap plan.Snapshot, w plan.Work, retries map[taskid.Meta]state.RetryState, relaunchAt func(taskid.Meta) time.Time, now time.Time, waiting waits) {
	chosen := map[string]bool{}
	for _, j := range w.Jobs {
		chosen[j.JobName] = true
	}
	running := map[string]int{}
	for _, r := range snap.Running {
		running[r.Meta.JobName]++
	}
	launched := map[taskid.Meta]bool{}
	for _, fs := range w.Failover {
		for _, f := range fs {
			launched[f.Meta] = true
		}
	}
	relaunch := map[string][]string{}
	for _, f := range snap.Failovers {
		job := f.Meta.JobName
		if r, ok := retries[f.Meta]; ok && now.Before(r.NotBefore) {
			relaunch[job] = append(relaunch[job],
				fmt.Sprintf("shard %d's retry (attempt %d) at %s", f.Meta.Item, r.Attempt, r.NotBefore.UTC().Format(time.RFC3339Nano)))
			waiting.add(job, waitRetry+until(r.NotBefore), 1)
			continue
		}
		if _, launching := w.Failover[job]; !launching {
			relaunch[job] = append(relaunch[job], fmt.Sprintf("shard %d's relaunch backoff", f.Meta.Item))
		}
		if at := relaunchAt(f.Meta); !launched[f.Meta] && now.Before(at) {
			waiting.add(job, waitFailover+until(at), 1)
		}
	}
	for _, r := range snap.Ready {
		if chosen[r.JobName] || waiting.why[r.JobName] != "" {
			continue
		}
		j := snap.Jobs[r.JobName]
		switch {
		case j.ConcurrencyPolicy == config.Allow:
			// Its runs wait for neither the last run nor its relaunches: if not chosen, it
			// is disabled, stopped or unplaced, which say so themselves.
		case len(relaunch[r.JobName]) > 0:
			sort.Strings(relaunch[r.JobName])
			waiting.why[r.JobName] = "waiting for " + strings.Join(relaunch[r.JobName], ", ")
		case running[r.JobName] > 0 && j.ConcurrencyPolicy == config.Replace:
			waiting.why[r.JobName] = fmt.Sprintf("concurrencyPolicy Replace: waiting for the %d killed shards of the last run to end", running[r.JobName])
			waiting.add(r.JobName, waitReplace, j.ShardingTotalCount)
		case running[r.JobName] > 0:
			waiting.why[r.JobName] = fmt.Sprintf("concurrencyPolicy Forbid: waiting for the last run to end (%d shards running)", running[r.JobName])
			waiting.add(r.JobName, waitForbid, j.ShardingTotalCount)
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
	return ld.waiting.why[job]
}
