package audit

import (
	"fmt"
	"slices"
	"sort"
	"time"

	"github.com/ejcloud/ejcloud/scheduler/schedule"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/taskid"
)

// Every cron slot of a job's audited window [Since, Until] must be accounted for (the window
// begins earlier when the ledger holds a slot the registration was under way at: see
// Job.Registered). The runs
// (status updates or side effects) alone cannot do it: with misfire off, any number of slots
// may merge into one run that waits (behind a long round, a relaunch, a takeover), so a job
// idle between two rounds looks the same whether the slots between were merged or lost. The
// scheduler's fire ledger says what it did with each slot, and names the run each fired slot
// became (the run id all its task ids carry, relaunches included); the runs then say whether
// that run happened. The ledger is believed only where the runs bear it out, or where the
// caller saw a reason for it:
//
//   - fired: the tasks of its run must show, and begin after the slot (the slot is decided
//     at or after its time, and its launch is written after that: a run that began before is
//     another slot's).
//   - merged into the run already queued (misfire off; state.RecordFires merges only while
//     the ready count holds a run not launched yet): that run is the latest fired entry
//     before it, and must likewise show and begin after the slot: one that had begun was not
//     queued, and the slot went nowhere. A fire that finds a run running is not merged: it
//     queues the next run (SPEC §5.3), which accounts for it as fired. (A merge of another
//     reason, fireOnce's catch-up, is into the first fired entry after it.)
//   - skipped as missed while no instance led (misfirePolicy skip): only inside one of the
//     job's Leaderless spans. Any other skip (a full ready queue, a disabled job, a deadline,
//     a timer that slept) is a lost fire.
//   - in no entry: never handled (a producer that skipped it without a word), or gone from the
//     ledger (it keeps state.LedgerKeep entries) before it was read. Only a slot before the
//     ledger's first entry inside a Leaderless span is excused: a leader that takes over a job
//     without a ledger begins at once and records nothing of what it missed
//     (schedule.Resume).
//
// Every run in this is matched by its run id, and its tasks are whatever the source shows:
// a run launched and dropped still shows (and its shards are the rounds' findings), a run
// that never launched, or whose tasks never showed, does not.

// accountSlots accounts for the slots of j's audited window from its ledger and its tasks.
func accountSlots(j Job, tasks []*task, source string, rep *Report, problem func(string, ...any)) {
	if j.Schedule == nil || j.Until.IsZero() {
		return
	}
	ledger := slices.Clone(j.Fires)
	sort.SliceStable(ledger, func(a, b int) bool { return ledger[a].Slot.Before(ledger[b].Slot) })
	var cron []int // the cron entries (not triggered) of the ledger, in slot order
	for i, e := range ledger {
		if !e.Triggered {
			cron = append(cron, i)
		}
	}
	// The earliest first sign of each run id and of each task.
	byRun, byTask := map[string]time.Time{}, map[string]time.Time{}
	for _, t := range tasks {
		byTask[t.id] = t.first
		if id, err := taskid.Parse(t.id); err == nil && id.Run() != "" {
			if at, ok := byRun[id.Run()]; !ok || t.first.Before(at) {
				byRun[id.Run()] = t.first
			}
		}
	}
	began := func(e state.FireEntry) (time.Time, bool) {
		at, ok := byRun[e.Run]
		if e.Run == "" {
			ok = false
		}
		for _, id := range e.TaskIDs {
			if first, seen := byTask[id]; seen && (!ok || first.Before(at)) {
				at, ok = first, true
			}
		}
		return at, ok
	}
	leaderless := func(s time.Time) bool {
		return slices.ContainsFunc(j.Leaderless, func(p Span) bool { return p.holds(s) })
	}
	// ranAfter says why the run of fired entry e does not account for slot s, or "".
	ranAfter := func(e state.FireEntry, s time.Time) string {
		name := fmt.Sprintf("run %s", e.Run)
		if e.Run == "" {
			name = fmt.Sprintf("run of tasks %v", e.TaskIDs)
		}
		switch at, ok := began(e); {
		case e.Run == "" && len(e.TaskIDs) == 0:
			return "was never launched (the ledger names no run)"
		case !ok:
			return fmt.Sprintf("became %s (launched %s, says the ledger), of which the %s show no task",
				name, e.Launched.Format("15:04:05.000"), source)
		case !at.After(s):
			return fmt.Sprintf("became %s, which began at %s, not after the slot", name, at.Format("15:04:05.000"))
		}
		return ""
	}
	for s := j.Schedule.Next(j.firstSlot().Add(-time.Nanosecond)); !s.IsZero() && !s.After(j.Until); s = j.Schedule.Next(s) {
		rep.Slots++
		why := ""
		switch i := entryOf(ledger, cron, s); {
		case i < 0 && leaderless(s) && (len(cron) == 0 || s.Before(ledger[cron[0]].Slot)):
			rep.Excused++ // a takeover of a job without a ledger: nothing recorded, see above
		case i < 0:
			why = "is in no entry of the fire ledger: the scheduler never handled it, or the entry left the ledger before it was read"
		case ledger[i].Outcome == state.OutcomeFired:
			if w := ranAfter(ledger[i], s); w != "" {
				why = "fired and " + w
			}
		case ledger[i].Outcome == state.OutcomeMerged:
			into := mergedInto(ledger, i)
			if into < 0 {
				why = fmt.Sprintf("merged (%s) into no fired slot of the ledger", ledger[i].Reason)
			} else if w := ranAfter(ledger[into], s); w != "" {
				why = fmt.Sprintf("merged (%s) into the slot %s, which %s", ledger[i].Reason, ledger[into].Slot.Format("15:04:05.000"), w)
			}
		case ledger[i].Outcome == state.OutcomeSkipped && ledger[i].Reason == schedule.ReasonPolicySkip && leaderless(s):
			rep.Excused++
		case ledger[i].Outcome == state.OutcomeSkipped && ledger[i].Reason == schedule.ReasonPolicySkip:
			why = fmt.Sprintf("was skipped (%s), outside every leaderless span", ledger[i].Reason)
		default:
			why = fmt.Sprintf("was %s (%s)", ledger[i].Outcome, ledger[i].Reason)
		}
		if why != "" {
			rep.LostFires++
			problem("cron slot %s %s: a lost fire", s.Format("15:04:05.000"), why)
		}
	}
}

// entryOf returns the index in ledger (sorted by slot) of the cron entry that holds slot s, or
// -1; cron indexes the ledger's cron entries (triggered ones hold no cron slot), which never
// overlap.
func entryOf(ledger []state.FireEntry, cron []int, s time.Time) int {
	// The last cron entry that begins at or before s.
	k := sort.Search(len(cron), func(k int) bool { return ledger[cron[k]].Slot.After(s) }) - 1
	if k < 0 {
		return -1
	}
	e := ledger[cron[k]]
	last := e.Slot
	if !e.Through.IsZero() {
		last = e.Through
	}
	if s.After(last) {
		return -1
	}
	return cron[k]
}

// mergedInto returns the index of the fired entry the merged entry i joined: the latest before
// it when it was merged into the run already queued, else (fireOnce's catch-up, a clock jump)
// the first after it; -1 when the ledger has none.
func mergedInto(ledger []state.FireEntry, i int) int {
	if ledger[i].Reason == state.ReasonMergedQueued {
		for k := i - 1; k >= 0; k-- {
			if ledger[k].Outcome == state.OutcomeFired {
				return k
			}
		}
		return -1
	}
	for k := i + 1; k < len(ledger); k++ {
		if ledger[k].Outcome == state.OutcomeFired {
			return k
		}
	}
	return -1
}
