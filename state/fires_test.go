package state_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/taskid"
)

var slot0 = time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)

func fired(sec int) state.FireEntry {
	return state.FireEntry{Slot: slot0.Add(time.Duration(sec) * time.Second), Count: 1, Outcome: state.OutcomeFired}
}

func outcomes(l state.Ledger) []string {
	var out []string
	for _, e := range l.Fires {
		s := fmt.Sprintf("%s@%v", e.Outcome, e.Slot.Sub(slot0).Seconds())
		if e.Count != 1 {
			s += fmt.Sprintf("x%d", e.Count)
		}
		if e.Tasks > 0 {
			s += fmt.Sprintf("+%d", e.Tasks)
		}
		out = append(out, s)
	}
	return out
}

func withJob(t *testing.T, s *state.Store, name string) {
	t.Helper()
	ctx := ctxT(t)
	if err := s.CreateApp(ctx, testApp("app")); err != nil && !isExists(err) {
		t.Fatal(err)
	}
	must(t, s.CreateJob(ctx, testJob(name, "app")), "CreateJob")
}

func isExists(err error) bool { return errors.Is(err, state.ErrExists) }

// The ready count and the ledger move together: without Accumulate a fire that finds a run
// queued merges into it; with it every fire is a run; the last slot moves with the write.
func TestRecordFiresWritesTheReadyCountAndTheLedgerTogether(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	withJob(t, s, "j")
	out, err := s.RecordFires(ctx, "j", state.Fires{Cron: "c", Zone: "UTC", Last: slot0.Add(2 * time.Second), Entries: []state.FireEntry{fired(0), fired(2)}})
	must(t, err, "RecordFires")
	if out[0].Outcome != state.OutcomeFired || out[1].Outcome != state.OutcomeMerged || out[1].Reason != state.ReasonMergedQueued {
		t.Fatalf("written %+v; want fired, then merged into it", out)
	}
	if r, _ := s.ReadyOf(ctx, "j"); r.Count != 1 {
		t.Fatalf("ready count %d; want 1", r.Count)
	}
	_, err = s.RecordFires(ctx, "j", state.Fires{Cron: "c", Zone: "UTC", Last: slot0.Add(6 * time.Second), Accumulate: true, Entries: []state.FireEntry{fired(4), fired(6)}})
	must(t, err, "RecordFires accumulating")
	if r, _ := s.ReadyOf(ctx, "j"); r.Count != 3 {
		t.Fatalf("ready count %d; want 3", r.Count)
	}
	skipped := state.FireEntry{Slot: slot0.Add(8 * time.Second), Count: 1, Outcome: state.OutcomeSkipped, Reason: "off"}
	for i := range 3 {
		sk := skipped
		sk.Slot = sk.Slot.Add(time.Duration(2*i) * time.Second)
		_, err = s.RecordFires(ctx, "j", state.Fires{Cron: "c", Zone: "UTC", Last: sk.Slot, Entries: []state.FireEntry{sk}})
		must(t, err, "RecordFires skipped")
	}
	l, ok, err := s.FireLedger(ctx, "j")
	must(t, err, "FireLedger")
	want := []string{"fired@0", "merged@2", "fired@4", "fired@6", "skipped@8x3"}
	if !ok || !slices.Equal(outcomes(l), want) || !l.Last.Equal(slot0.Add(12*time.Second)) || l.Cron != "c" {
		t.Fatalf("ledger %v last %v cron %q; want %v last 12 s", outcomes(l), l.Last, l.Cron, want)
	}
	if th := l.Fires[4].Through; !th.Equal(slot0.Add(12 * time.Second)) {
		t.Fatalf("joined skips run through %v; want 12 s", th)
	}
}

// A changed cron: the old cron's slots up to the change are written with their last slot, then
// the change with the new cron and its time (From), which never moves Last: Last stays a real
// slot, and a new leader resumes from the change.
func TestRecordFiresRecordsACronChange(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	withJob(t, s, "j")
	_, err := s.RecordFires(ctx, "j", state.Fires{Cron: "old", Zone: "UTC", Last: slot0, Entries: []state.FireEntry{fired(0)}})
	must(t, err, "RecordFires of the old cron")
	change := slot0.Add(3 * time.Second)
	_, err = s.RecordFires(ctx, "j", state.Fires{Cron: "new", Zone: "Asia/Tokyo", From: change})
	must(t, err, "RecordFires of the change")
	l, _, err := s.FireLedger(ctx, "j")
	must(t, err, "FireLedger")
	if l.Cron != "new" || l.Zone != "Asia/Tokyo" || !l.Last.Equal(slot0) || !l.From.Equal(change) || !l.Resume().Equal(change) {
		t.Fatalf("ledger cron %q zone %q last %v from %v; want the new cron from the change, last the old slot", l.Cron, l.Zone, l.Last, l.From)
	}
	if r, _ := s.ReadyOf(ctx, "j"); r.Count != 1 {
		t.Fatalf("ready count %d; want the old slot's run alone", r.Count)
	}
	// The new cron's first slot moves Last past the change.
	_, err = s.RecordFires(ctx, "j", state.Fires{Cron: "new", Zone: "Asia/Tokyo", Last: slot0.Add(4 * time.Second), Accumulate: true, Entries: []state.FireEntry{fired(4)}})
	must(t, err, "RecordFires of the new cron")
	if l, _, _ := s.FireLedger(ctx, "j"); !l.Resume().Equal(slot0.Add(4*time.Second)) || !slices.Equal(outcomes(l), []string{"fired@0", "fired@4"}) {
		t.Fatalf("ledger %v resumes from %v; want both slots, from 4 s", outcomes(l), l.Resume())
	}
}

// A ledger written before From existed reads as one whose cron never changed.
func TestALedgerWithoutFromResumesFromItsLast(t *testing.T) {
	t.Parallel()
	var l state.Ledger
	if err := json.Unmarshal([]byte(`{"cron":"*/2 * * * * ?","zone":"UTC","last":"2026-11-24T10:00:00Z","fires":[]}`), &l); err != nil {
		t.Fatal(err)
	}
	if !l.From.IsZero() || !l.Resume().Equal(slot0) {
		t.Fatalf("from %v resume %v; want none, and the last slot", l.From, l.Resume())
	}
	if b, _ := json.Marshal(l); bytes.Contains(b, []byte(`"from"`)) {
		t.Fatalf("%s: an unchanged cron's ledger writes no from", b)
	}
}

// A deleted job's fires are refused (its ledger and ready entry went with it), and deleting a
// job removes its ledger.
func TestRecordFiresOfADeletedJob(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	_, err := s.RecordFires(ctx, "ghost", state.Fires{Last: slot0, Entries: []state.FireEntry{fired(0)}})
	mustIs(t, err, state.ErrNotFound, "RecordFires of a job that does not exist")
	if r, _ := s.ReadyOf(ctx, "ghost"); r.Count != 0 {
		t.Fatalf("a missing job's fire was queued: %+v", r)
	}
	withJob(t, s, "j")
	_, err = s.RecordFires(ctx, "j", state.Fires{Last: slot0, Entries: []state.FireEntry{fired(0)}})
	must(t, err, "RecordFires")
	must(t, s.DeleteJob(ctx, "j"), "DeleteJob")
	if _, ok, err := s.FireLedger(ctx, "j"); ok || err != nil {
		t.Fatalf("ledger after DeleteJob: %v, %v; want none", ok, err)
	}
}

// A full ready root refuses the run: the slot is recorded as skipped, with the reason.
func TestRecordFiresIntoAFullReadyQueue(t *testing.T) {
	t.Parallel()
	s := newStore(t, func(c *state.Config) { c.QueueSizeLimit = 1 })
	ctx := ctxT(t)
	withJob(t, s, "j")
	must(t, s.AddReady(ctx, "other", true), "AddReady")
	out, err := s.RecordFires(ctx, "j", state.Fires{Last: slot0, Entries: []state.FireEntry{fired(0)}})
	must(t, err, "RecordFires")
	if out[0].Outcome != state.OutcomeSkipped || out[0].Reason != state.ReasonQueueFull {
		t.Fatalf("written %+v; want skipped for the full queue", out)
	}
	if l, _, _ := s.FireLedger(ctx, "j"); !l.Last.Equal(slot0) || len(l.Fires) != 1 {
		t.Fatalf("ledger %+v; want the skipped slot and its last", l)
	}
}

// With Refuse (an operator's trigger), a full ready root fails the write and nothing is written.
func TestRecordFiresRefusedByAFullReadyQueue(t *testing.T) {
	t.Parallel()
	s := newStore(t, func(c *state.Config) { c.QueueSizeLimit = 1 })
	ctx := ctxT(t)
	withJob(t, s, "j")
	must(t, s.AddReady(ctx, "other", true), "AddReady")
	_, err := s.RecordFires(ctx, "j", state.Fires{Accumulate: true, Refuse: true, Entries: []state.FireEntry{fired(0)}})
	if !errors.Is(err, state.ErrQueueFull) {
		t.Fatalf("RecordFires: %v; want %v", err, state.ErrQueueFull)
	}
	if l, ok, err := s.FireLedger(ctx, "j"); err != nil || ok && len(l.Fires) != 0 {
		t.Fatalf("ledger %+v (%v); want no entry", l, err)
	}
	if r, err := s.ReadyOf(ctx, "j"); err != nil || r.Count != 0 {
		t.Fatalf("ready %+v (%v); want none", r, err)
	}
}

// The launch's multi writes the task ids into the ledger: a READY launch to the oldest fired
// slot the ready count still holds, a FAILOVER relaunch to the entry of the task it replaces.
func TestRecordLaunchWritesTheTaskIDsIntoTheLedger(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	withJob(t, s, "j")
	// A first fire whose run a disable dropped, then two queued runs.
	_, err := s.RecordFires(ctx, "j", state.Fires{Last: slot0, Accumulate: true, Entries: []state.FireEntry{fired(0)}})
	must(t, err, "RecordFires")
	must(t, s.RemoveReady(ctx, "j"), "RemoveReady")
	_, err = s.RecordFires(ctx, "j", state.Fires{Last: slot0.Add(4 * time.Second), Accumulate: true, Entries: []state.FireEntry{fired(2), fired(4)}})
	must(t, err, "RecordFires")
	launch := func(typ taskid.Type, items ...int) []taskid.ID {
		var ids []taskid.ID
		for _, i := range items {
			ids = append(ids, taskid.New(taskid.Meta{JobName: "j", Item: i}, typ, "S0"))
		}
		r, err := s.ReadyOf(ctx, "j")
		must(t, err, "ReadyOf")
		l := state.Launch{Tasks: ids}
		if typ == taskid.Ready {
			l.Ready = []state.ReadyEntry{r}
		} else {
			fos, err := s.Failovers(ctx)
			must(t, err, "Failovers")
			l.Failover = fos
		}
		must(t, s.RecordLaunch(ctx, l), "RecordLaunch")
		return ids
	}
	first := launch(taskid.Ready, 0, 1, 2)
	l, _, _ := s.FireLedger(ctx, "j")
	if want := []string{"fired@0", "fired@2+3", "fired@4"}; !slices.Equal(outcomes(l), want) {
		t.Fatalf("after the first launch %v; want %v", outcomes(l), want)
	}
	if got := l.Fires[1].TaskIDs; len(got) != 3 || got[0] != first[0].String() || l.Fires[1].Launched.IsZero() {
		t.Fatalf("task ids %v launched %v; want the launch's", got, l.Fires[1].Launched)
	}
	// Shard 1 of that run dies and is relaunched.
	_, err = s.EndTask(ctx, first[1], state.Failover)
	must(t, err, "EndTask")
	re := launch(taskid.Failover, 1)
	for _, id := range []taskid.ID{first[0], first[2], re[0]} { // the run ends
		_, err = s.EndTask(ctx, id, state.NoFollowUp)
		must(t, err, "EndTask")
	}
	launch(taskid.Ready, 0, 1, 2)
	l, _, _ = s.FireLedger(ctx, "j")
	if want := []string{"fired@0", "fired@2+4", "fired@4+3"}; !slices.Equal(outcomes(l), want) {
		t.Fatalf("after the relaunch and the second launch %v; want %v", outcomes(l), want)
	}
	if !slices.Contains(l.Fires[1].TaskIDs, re[0].String()) {
		t.Fatalf("the relaunch %s is not with its run: %v", re[0], l.Fires[1].TaskIDs)
	}
}

// The ledger keeps the latest LedgerKeep entries.
func TestTheLedgerIsBounded(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	withJob(t, s, "j")
	var entries []state.FireEntry
	for i := range state.LedgerKeep + 10 {
		entries = append(entries, fired(i))
	}
	_, err := s.RecordFires(ctx, "j", state.Fires{Last: slot0.Add(time.Hour), Accumulate: true, Entries: entries})
	must(t, err, "RecordFires")
	l, _, _ := s.FireLedger(ctx, "j")
	if len(l.Fires) != state.LedgerKeep || !l.Fires[0].Slot.Equal(slot0.Add(10*time.Second)) {
		t.Fatalf("%d entries from %v; want the latest %d", len(l.Fires), l.Fires[0].Slot, state.LedgerKeep)
	}
	if r, _ := s.ReadyOf(ctx, "j"); r.Count != state.LedgerKeep+10 {
		t.Fatalf("ready count %d; want every run", r.Count)
	}
}

// A catch-up of more runs than the ledger keeps: the queue launches its oldest runs first,
// whose entries are gone, so those launches are recorded against no entry, and each of the
// rest against its own slot (not the first kept entry taking the first launch, and the last
// launches finding none).
func TestLaunchesOfRunsTheLedgerNoLongerKeepsAreRecordedAgainstNone(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	withJob(t, s, "j")
	const over = 10
	var entries []state.FireEntry
	for i := range state.LedgerKeep + over {
		e := fired(i)
		e.CatchUp = true
		entries = append(entries, e)
	}
	_, err := s.RecordFires(ctx, "j", state.Fires{Last: slot0.Add(time.Hour), Entries: entries})
	must(t, err, "RecordFires")
	for n := range state.LedgerKeep + over {
		r, err := s.ReadyOf(ctx, "j")
		must(t, err, "ReadyOf")
		id := taskid.New(taskid.Meta{JobName: "j", Item: 0}, taskid.Ready, fmt.Sprintf("S%d", n))
		must(t, s.RecordLaunch(ctx, state.Launch{Tasks: []taskid.ID{id}, Ready: []state.ReadyEntry{r}}), "RecordLaunch")
		_, err = s.EndTask(ctx, id, state.NoFollowUp)
		must(t, err, "EndTask")
		l, _, err := s.FireLedger(ctx, "j")
		must(t, err, "FireLedger")
		for k, e := range l.Fires {
			slot := int(e.Slot.Sub(slot0) / time.Second)
			switch launched := !e.Launched.IsZero(); {
			case launched != (slot <= n):
				t.Fatalf("after launch %d (of slot %d) the entry of slot %d launched=%v", n, n, slot, launched)
			case launched && (len(e.TaskIDs) != 1 || !strings.Contains(e.TaskIDs[0], fmt.Sprintf("@-@S%d@-@", slot))):
				t.Fatalf("entry %d (slot %d) holds tasks %v; want the launch of its own slot", k, slot, e.TaskIDs)
			}
		}
	}
}

// NextRun: the oldest of the latest count unlaunched fired entries; none when the queue holds
// more runs than the ledger has such entries (their entries were dropped) or none at all.
func TestNextRun(t *testing.T) {
	t.Parallel()
	launched := func(sec int) state.FireEntry { e := fired(sec); e.Launched = slot0; return e }
	merged := state.FireEntry{Slot: slot0, Count: 1, Outcome: state.OutcomeMerged}
	for _, tc := range []struct {
		name  string
		fires []state.FireEntry
		count int
		want  int
	}{
		{"one queued", []state.FireEntry{launched(0), fired(1)}, 1, 1},
		{"two queued", []state.FireEntry{fired(0), merged, fired(2)}, 2, 0},
		{"a dropped count leaves older entries behind", []state.FireEntry{fired(0), fired(1), fired(2)}, 1, 2},
		{"more queued than entries", []state.FireEntry{fired(0), fired(1)}, 3, -1},
		{"nothing unlaunched", []state.FireEntry{launched(0)}, 1, -1},
		{"nothing queued", []state.FireEntry{fired(0)}, 0, -1},
		{"an empty ledger", nil, 1, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := (state.Ledger{Fires: tc.fires}).NextRun(tc.count); got != tc.want {
				t.Fatalf("NextRun(%d) = %d; want %d", tc.count, got, tc.want)
			}
		})
	}
}

// launchedRun registers job "j", fires it once and launches the run's two shards.
func launchedRun(t *testing.T, s *state.Store) (a, b taskid.ID) {
	t.Helper()
	ctx := ctxT(t)
	withJob(t, s, "j")
	_, err := s.RecordFires(ctx, "j", state.Fires{Last: slot0, Entries: []state.FireEntry{fired(0)}})
	must(t, err, "RecordFires")
	r, _ := s.ReadyOf(ctx, "j")
	a, b = taskid.New(taskid.Meta{JobName: "j", Item: 0}, taskid.Ready, "S0"), taskid.New(taskid.Meta{JobName: "j", Item: 1}, taskid.Ready, "S0")
	must(t, s.RecordLaunch(ctx, state.Launch{Tasks: []taskid.ID{a, b}, Ready: []state.ReadyEntry{r}}), "RecordLaunch")
	return a, b
}

// A run's entry records when its last shard ended; a run whose shards still run or wait for a
// relaunch has not ended.
func TestTheLedgerRecordsTheEndOfARun(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	a, b := launchedRun(t, s)
	_, err := s.EndTask(ctx, a, state.NoFollowUp)
	must(t, err, "EndTask a")
	if l, _, _ := s.FireLedger(ctx, "j"); !l.Fires[0].Ended.IsZero() {
		t.Fatal("the run ended with a shard still running")
	}
	_, err = s.EndTask(ctx, b, state.Failover) // lost: relaunched
	must(t, err, "EndTask b")
	if l, _, _ := s.FireLedger(ctx, "j"); !l.Fires[0].Ended.IsZero() {
		t.Fatal("the run ended with a shard waiting for its relaunch")
	}
	fos, _ := s.Failovers(ctx)
	re := taskid.New(taskid.Meta{JobName: "j", Item: 1}, taskid.Failover, "S0")
	must(t, s.RecordLaunch(ctx, state.Launch{Tasks: []taskid.ID{re}, Failover: fos}), "RecordLaunch relaunch")
	_, err = s.EndTask(ctx, re, state.NoFollowUp)
	must(t, err, "EndTask relaunch")
	l, _, _ := s.FireLedger(ctx, "j")
	if !l.Fires[0].Succeeded() {
		t.Fatalf("entry %+v; want ended, succeeded", l.Fires[0])
	}
}

// A run given up while its shards wait for a relaunch (a Replace drops them) is marked failed
// with the reason, and ended when none of its shards runs: nothing else would end it. With a
// shard still running, it ends when that shard does.
func TestARunGivenUpWhileItsShardsWaitIsFailedAndEnded(t *testing.T) {
	t.Parallel()
	for _, stillRunning := range []bool{false, true} {
		t.Run(fmt.Sprintf("a shard still running: %v", stillRunning), func(t *testing.T) {
			s := newStore(t)
			ctx := ctxT(t)
			a, b := launchedRun(t, s)
			_, err := s.EndTask(ctx, b, state.Failover) // lost: waits for its relaunch
			must(t, err, "EndTask b")
			if !stillRunning {
				_, err = s.EndTask(ctx, a, state.NoFollowUp)
				must(t, err, "EndTask a")
			}
			n, err := s.DropWaiting(ctx, "j", "replaced by a newer fire")
			must(t, err, "DropWaiting")
			l, _, _ := s.FireLedger(ctx, "j")
			if e := l.Fires[0]; n != 1 || e.Failed != "replaced by a newer fire" || e.Ended.IsZero() == !stillRunning {
				t.Fatalf("dropped %d; entry %+v; want 1 dropped, the run failed, ended unless a shard runs", n, e)
			}
			if stillRunning {
				_, err = s.EndTask(ctx, a, state.NoFollowUp)
				must(t, err, "EndTask a")
				if l, _, _ := s.FireLedger(ctx, "j"); l.Fires[0].Ended.IsZero() {
					t.Fatalf("entry %+v; want ended with its last shard", l.Fires[0])
				}
			}
		})
	}
}

// Without Accumulate a fired slot finding a run queued merges into it, but a catch-up slot
// (misfirePolicy fireAll) adds its run: each missed slot is one run, and the slot on time after
// them merges as any would.
func TestACatchUpEntryAddsARunWithoutAccumulate(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	withJob(t, s, "j")
	_, err := s.RecordFires(ctx, "j", state.Fires{Last: slot0, Entries: []state.FireEntry{fired(0)}})
	must(t, err, "RecordFires")
	up := func(e state.FireEntry) state.FireEntry { e.CatchUp = true; return e }
	out, err := s.RecordFires(ctx, "j", state.Fires{Last: slot0.Add(6 * time.Second), Entries: []state.FireEntry{up(fired(2)), up(fired(4)), fired(6)}})
	must(t, err, "RecordFires")
	if r, _ := s.ReadyOf(ctx, "j"); r.Count != 3 {
		t.Fatalf("ready count %d; want 3: the queued run and the two catch-ups", r.Count)
	}
	if out[0].Outcome != state.OutcomeFired || out[1].Outcome != state.OutcomeFired || out[2].Outcome != state.OutcomeMerged {
		t.Fatalf("written %+v; want fired, fired, merged", out)
	}
}

// A queued run skipped (its dependency failed) leaves the ready queue and the ledger says why.
func TestSkipQueuedRun(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	withJob(t, s, "j")
	_, err := s.RecordFires(ctx, "j", state.Fires{Last: slot0.Add(2 * time.Second), Accumulate: true, Entries: []state.FireEntry{fired(0), fired(2)}})
	must(t, err, "RecordFires")
	r, _ := s.ReadyOf(ctx, "j")
	must(t, s.SkipQueuedRun(ctx, r, "upstream failed"), "SkipQueuedRun")
	if r, _ := s.ReadyOf(ctx, "j"); r.Count != 1 {
		t.Fatalf("ready count %d; want 1", r.Count)
	}
	l, _, _ := s.FireLedger(ctx, "j")
	if want := []string{"skipped@0", "fired@2"}; !slices.Equal(outcomes(l), want) || l.Fires[0].Reason != "upstream failed" {
		t.Fatalf("ledger %v %q; want %v, the oldest skipped with the reason", outcomes(l), l.Fires[0].Reason, want)
	}
	if e := l.Fires[0]; e.Failed != "upstream failed" || e.Ended.IsZero() {
		t.Fatalf("skipped entry failed %q, ended %v; want failed and ended, for the jobs that depend on this one", e.Failed, e.Ended)
	}
}

// Two runs of a job whose runs overlap (concurrencyPolicy Allow): both launch on the same
// shards, each task in a node of its own; each failed task is its own failover entry, and each
// run ends in the ledger with the last of its own tasks, whatever the other run does.
func TestOverlappingRunsOfTheSameShards(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	withJob(t, s, "j")
	run := func(sec int, kind taskid.Type) []taskid.ID {
		t.Helper()
		_, err := s.RecordFires(ctx, "j", state.Fires{Last: slot0.Add(time.Duration(sec) * time.Second), Entries: []state.FireEntry{fired(sec)}})
		must(t, err, "RecordFires")
		r, err := s.ReadyOf(ctx, "j")
		must(t, err, "ReadyOf")
		ids := []taskid.ID{taskid.New(taskid.Meta{JobName: "j", Item: 0}, kind, "S0"), taskid.New(taskid.Meta{JobName: "j", Item: 1}, kind, "S0")}
		must(t, s.RecordLaunch(ctx, state.Launch{Tasks: ids, Ready: []state.ReadyEntry{r}, Overlapping: []string{"j"}}), "RecordLaunch")
		return ids
	}
	a := run(0, taskid.Ready)
	b := run(5, taskid.Ready) // while a runs
	running, err := s.RunningOf(ctx, "j")
	must(t, err, "RunningOf")
	if len(running) != 4 {
		t.Fatalf("running %+v; want the four tasks of both runs", running)
	}
	for _, id := range append(slices.Clone(a), b...) {
		if ok, err := s.IsRunning(ctx, id); err != nil || !ok {
			t.Fatalf("IsRunning(%s) = %v, %v; want true", id, ok, err)
		}
	}
	for _, id := range []taskid.ID{a[0], b[0]} {
		e, err := s.EndTask(ctx, id, state.Failover)
		if err != nil || !e.Removed || !e.Requeued {
			t.Fatalf("EndTask(%s, Failover) = %+v, %v; want removed and queued for relaunch", id, e, err)
		}
	}
	fos, err := s.Failovers(ctx)
	must(t, err, "Failovers")
	if len(fos) != 2 || fos[0].Meta != fos[1].Meta {
		t.Fatalf("failover entries %+v; want one per failed task of shard 0", fos)
	}
	for _, id := range []taskid.ID{a[1], b[1]} {
		_, err := s.EndTask(ctx, id, state.NoFollowUp)
		must(t, err, "EndTask")
	}
	ended := func() (a, b bool) {
		l, _, err := s.FireLedger(ctx, "j")
		must(t, err, "FireLedger")
		return !l.Fires[0].Ended.IsZero(), !l.Fires[1].Ended.IsZero()
	}
	if ea, eb := ended(); ea || eb {
		t.Fatalf("runs ended %v, %v with their shard 0 waiting for a relaunch; want neither", ea, eb)
	}
	// Run a's shard 0 is relaunched and finishes: run a is over, b still waits.
	var mine state.FailoverEntry
	for _, f := range fos {
		if f.TaskID == a[0].String() {
			mine = f
		}
	}
	re := taskid.New(a[0].Meta, taskid.Failover, "S1")
	must(t, s.RecordLaunch(ctx, state.Launch{Tasks: []taskid.ID{re}, Failover: []state.FailoverEntry{mine}, Overlapping: []string{"j"}}), "relaunch")
	if fos, _ := s.Failovers(ctx); len(fos) != 1 || fos[0].TaskID != b[0].String() {
		t.Fatalf("failover entries after the relaunch %+v; want b's only", fos)
	}
	_, err = s.EndTask(ctx, re, state.NoFollowUp)
	must(t, err, "EndTask relaunch")
	if ea, eb := ended(); !ea || eb {
		t.Fatalf("runs ended %v, %v; want a's only", ea, eb)
	}
}

// Overlapping runs of more shards than a ledger entry keeps ids of are told apart by their run
// id: a failure of a shard past the first LedgerTaskIDs marks its own run failed, a relaunch
// past them counts in its own run, and each run ends with the last of its own tasks, whatever
// the other run does. (Before run ids, the failure marked the run launched last, and neither
// run ended before the other's tasks had all ended.)
func TestOverlappingRunsOfManyShardsAreToldApartByTheirRun(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	withJob(t, s, "j")
	const shards = state.LedgerTaskIDs + 4
	run := func(sec int) []taskid.ID {
		t.Helper()
		_, err := s.RecordFires(ctx, "j", state.Fires{Last: slot0.Add(time.Duration(sec) * time.Second), Entries: []state.FireEntry{fired(sec)}})
		must(t, err, "RecordFires")
		r, err := s.ReadyOf(ctx, "j")
		must(t, err, "ReadyOf")
		id := taskid.NewRun()
		var ids []taskid.ID
		for item := range shards {
			ids = append(ids, taskid.NewInRun(taskid.Meta{JobName: "j", Item: item}, taskid.Ready, "S0", id))
		}
		must(t, s.RecordLaunch(ctx, state.Launch{Tasks: ids, Ready: []state.ReadyEntry{r}, Overlapping: []string{"j"}}), "RecordLaunch")
		return ids
	}
	a := run(0)
	b := run(5) // while a runs
	entries := func() (a, b state.FireEntry) {
		l, _, err := s.FireLedger(ctx, "j")
		must(t, err, "FireLedger")
		return l.Fires[0], l.Fires[1]
	}
	if ea, eb := entries(); ea.Run != a[0].Run() || eb.Run != b[0].Run() || ea.Tasks != shards || len(ea.TaskIDs) != state.LedgerTaskIDs {
		t.Fatalf("entries %+v and %+v; want each with its run's id, %d tasks, %d ids kept", ea, eb, shards, state.LedgerTaskIDs)
	}

	last := shards - 1 // past the ids an entry keeps
	_, err := s.EndTaskWith(ctx, a[last], state.NoFollowUp, state.EndOptions{FireFailed: "shard failed"})
	must(t, err, "EndTaskWith")
	if ea, eb := entries(); ea.Failed == "" || eb.Failed != "" {
		t.Fatalf("failed marks %q (a), %q (b); want a's run failed, b's not", ea.Failed, eb.Failed)
	}
	e, err := s.EndTask(ctx, a[last-1], state.Failover)
	if err != nil || !e.Requeued {
		t.Fatalf("EndTask(%s, Failover) = %+v, %v; want queued for relaunch", a[last-1], e, err)
	}
	fos, err := s.Failovers(ctx)
	must(t, err, "Failovers")
	re := taskid.NewInRun(a[last-1].Meta, taskid.Failover, "S1", a[last-1].Run())
	must(t, s.RecordLaunch(ctx, state.Launch{Tasks: []taskid.ID{re}, Failover: fos, Overlapping: []string{"j"}}), "relaunch")
	if ea, eb := entries(); ea.Tasks != shards+1 || eb.Tasks != shards {
		t.Fatalf("tasks %d (a), %d (b); want the relaunch counted in a's run", ea.Tasks, eb.Tasks)
	}
	for _, id := range a[:last-1] {
		_, err := s.EndTask(ctx, id, state.NoFollowUp)
		must(t, err, "EndTask")
	}
	if ea, _ := entries(); !ea.Ended.IsZero() {
		t.Fatal("run a ended while its relaunch runs")
	}
	_, err = s.EndTask(ctx, re, state.NoFollowUp)
	must(t, err, "EndTask relaunch")
	if ea, eb := entries(); ea.Ended.IsZero() || !eb.Ended.IsZero() {
		t.Fatalf("runs ended %v (a), %v (b) with b's tasks all running; want a's only", ea.Ended, eb.Ended)
	}
	for _, id := range b {
		_, err := s.EndTask(ctx, id, state.NoFollowUp)
		must(t, err, "EndTask")
	}
	if ea, eb := entries(); eb.Ended.IsZero() || eb.Failed != "" || ea.Failed == "" {
		t.Fatalf("run b ended %v, failed %q; run a failed %q; want b ended and not failed, a failed", eb.Ended, eb.Failed, ea.Failed)
	}
}

// A job update that changes the fired cron records the change in the ledger in the same multi
// (from when, the new cron and zone; last stays the old cron's); one that does not leaves the
// ledger alone, as does a change of a job without a ledger.
func TestUpdateJobFromRecordsACronChangeWithTheConfig(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	withJob(t, s, "j")
	withJob(t, s, "new")
	_, err := s.RecordFires(ctx, "j", state.Fires{Cron: "0/5 * * * * ?", Zone: "UTC", Last: slot0, Entries: []state.FireEntry{fired(0)}})
	must(t, err, "RecordFires")
	j := testJob("j", "app")
	j.Description = "only the description"
	_, err = s.UpdateJobFrom(ctx, j, slot0.Add(time.Second))
	must(t, err, "UpdateJobFrom (same cron)")
	if l, _, _ := s.FireLedger(ctx, "j"); !l.From.IsZero() || l.Cron != "0/5 * * * * ?" {
		t.Fatalf("ledger cron %q from %v after an update of the same cron; want it unchanged", l.Cron, l.From)
	}
	j.Cron, j.TimeZone = "0/2 * * * * ?", "Asia/Tokyo"
	_, err = s.UpdateJobFrom(ctx, j, slot0.Add(3*time.Second))
	must(t, err, "UpdateJobFrom (new cron)")
	l, _, _ := s.FireLedger(ctx, "j")
	if l.Cron != j.Cron || l.Zone != j.TimeZone || !l.From.Equal(slot0.Add(3*time.Second)) || !l.Last.Equal(slot0) || len(l.Fires) != 1 {
		t.Fatalf("ledger %+v; want the new cron and zone from 3 s, last and fires unchanged", l)
	}
	if got, _ := s.Job(ctx, "j"); got.Cron != j.Cron {
		t.Fatalf("job cron %q; want %q", got.Cron, j.Cron)
	}
	n := testJob("new", "app")
	n.Cron = "0/2 * * * * ?"
	_, err = s.UpdateJobFrom(ctx, n, slot0)
	must(t, err, "UpdateJobFrom (no ledger)")
	if _, ok, _ := s.FireLedger(ctx, "new"); ok {
		t.Fatal("a ledger was made for a job that had none")
	}
}

// A write that names the job's app (an operator's trigger) queues nothing while the job or its
// app is disabled: the disable may have come after the caller's check, and dropped the ready
// entry the run would join. Enabled again, the same write queues the run.
func TestRecordFiresWithTheAppRequiresTheJobEnabled(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	withJob(t, s, "j")
	trigger := func() error {
		_, err := s.RecordFires(ctx, "j", state.Fires{Accumulate: true, Refuse: true, App: "app",
			Entries: []state.FireEntry{{Slot: slot0, Count: 1, Outcome: state.OutcomeFired, Triggered: true}}})
		return err
	}
	nothingWritten := func(what string) {
		t.Helper()
		if r, _ := s.ReadyOf(ctx, "j"); r.Count != 0 {
			t.Fatalf("%s: ready count %d; want 0", what, r.Count)
		}
		if _, ok, err := s.FireLedger(ctx, "j"); err != nil || ok {
			t.Fatalf("%s: a fire ledger (%v); want none", what, err)
		}
	}
	for _, tc := range []struct {
		name            string
		disable, enable func(context.Context, string) error
		marked          string
	}{
		{"job disabled", s.DisableJob, func(ctx context.Context, job string) error { _, err := s.EnableJob(ctx, job); return err }, "j"},
		{"app disabled", s.DisableApp, func(ctx context.Context, app string) error { _, err := s.EnableApp(ctx, app); return err }, "app"},
	} {
		must(t, tc.disable(ctx, tc.marked), tc.name)
		if err := trigger(); !errors.Is(err, state.ErrDisabled) {
			t.Fatalf("%s: %v; want ErrDisabled", tc.name, err)
		}
		nothingWritten(tc.name)
		must(t, tc.enable(ctx, tc.marked), tc.name+": enable")
	}
	must(t, trigger(), "trigger of the enabled job")
	if r, _ := s.ReadyOf(ctx, "j"); r.Count != 1 {
		t.Fatalf("ready count %d; want 1", r.Count)
	}
	if apps, jobs, err := s.Disabled(ctx); err != nil || len(apps) != 0 || len(jobs) != 0 {
		t.Fatalf("disabled after the checked write: apps %v, jobs %v (%v); want none", apps, jobs, err)
	}
}

// The waiting shards of a job beyond its lowered shardingTotalCount are dropped with their
// retries, and their run fails, and ends once nothing else of the job runs or waits: jobs that
// depend on it must not wait for a run that can never end.
func TestDropBeyondFailsAndEndsTheRunOfTheDroppedShards(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	a, b := launchedRun(t, s) // shards 0 and 1 of a job of 3
	_, err := s.EndTask(ctx, a, state.NoFollowUp)
	must(t, err, "EndTask a")
	_, err = s.EndTaskWith(ctx, b, state.Failover, state.EndOptions{Retry: &state.RetryState{Attempt: 2, NotBefore: time.Now().Add(time.Hour)}})
	must(t, err, "EndTask b, to be retried")
	if n, err := s.DropBeyond(ctx, "j", 2); err != nil || n != 0 {
		t.Fatalf("DropBeyond(2) = %d, %v; want nothing dropped: shard 1 still exists", n, err)
	}
	n, err := s.DropBeyond(ctx, "j", 1)
	if err != nil || n != 1 {
		t.Fatalf("DropBeyond(1) = %d, %v; want shard 1 dropped", n, err)
	}
	if fo, _ := s.Failovers(ctx); len(fo) != 0 {
		t.Fatalf("failover entries %v; want none", fo)
	}
	if r, _ := s.Retries(ctx); len(r) != 0 {
		t.Fatalf("retries %v; want none", r)
	}
	l, _, _ := s.FireLedger(ctx, "j")
	if e := l.Fires[0]; e.Ended.IsZero() || e.Succeeded() || !strings.Contains(e.Failed, "shardingTotalCount") {
		t.Fatalf("entry %+v; want ended and failed for the shards removed", e)
	}
}

// A shard whose relaunch the full failover queue refused is not relaunched: its run fails.
func TestAShardTheFullFailoverQueueRefusesFailsItsRun(t *testing.T) {
	t.Parallel()
	s := newStore(t, func(c *state.Config) { c.QueueSizeLimit = 1 })
	ctx := ctxT(t)
	a, b := launchedRun(t, s)
	must(t, s.CreateJob(ctx, testJob("other", "app")), "CreateJob other")
	_, err := s.AddFailover(ctx, taskid.New(taskid.Meta{JobName: "other", Item: 0}, taskid.Ready, "S0")) // fills the queue
	must(t, err, "AddFailover other")
	_, err = s.EndTask(ctx, a, state.NoFollowUp)
	must(t, err, "EndTask a")
	ended, err := s.EndTask(ctx, b, state.Failover)
	must(t, err, "EndTask b")
	if ended.Requeued {
		t.Fatal("shard 1 was queued into a full failover queue")
	}
	l, _, _ := s.FireLedger(ctx, "j")
	if e := l.Fires[0]; e.Ended.IsZero() || e.Succeeded() {
		t.Fatalf("entry %+v; want ended and failed: shard 1 was not relaunched", e)
	}
}

// A write of slots the ledger has handled already (its reply was lost and it is tried again)
// writes nothing, and answers what the first write recorded: a slot is handled once.
func TestRecordFiresOfSlotsAlreadyHandledWritesNothing(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	withJob(t, s, "j")
	f := state.Fires{Last: slot0.Add(2 * time.Second), Accumulate: true, Entries: []state.FireEntry{fired(0), fired(2)}}
	_, err := s.RecordFires(ctx, "j", f)
	must(t, err, "RecordFires")
	again, err := s.RecordFires(ctx, "j", f)
	must(t, err, "RecordFires again")
	if r, _ := s.ReadyOf(ctx, "j"); r.Count != 2 {
		t.Errorf("ready count %d after the same slots twice; want 2", r.Count)
	}
	l, _, _ := s.FireLedger(ctx, "j")
	if want := []string{"fired@0", "fired@2"}; !slices.Equal(outcomes(l), want) {
		t.Errorf("ledger %v; want %v", outcomes(l), want)
	}
	if len(again) != 2 || again[0].Outcome != state.OutcomeFired || !again[1].Slot.Equal(slot0.Add(2*time.Second)) {
		t.Errorf("the second write answered %+v; want the two fired entries the first recorded", again)
	}
}
