package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/ejcloud/ejcloud/taskid"
)

// The fire ledger (issue 19): per TRANSIENT cron job, /state/fires/{jobName} holds the latest
// cron slot handled and what became of the recent slots. It is written in the same multi as the
// ready-queue write that admits a fire, so a slot is handled exactly when the ledger says so: a
// new leader's producer starts from the ledger's last slot, and no slot is handled twice across
// any number of leader changes. The launch's multi (RecordLaunch) writes into it the task ids
// each fired slot produced.

// Outcomes of a slot in the ledger (scheduler/schedule decides them; the write may turn a fire
// into a merge or a skip, see RecordFires).
const (
	OutcomeFired   = "fired"
	OutcomeMerged  = "merged"
	OutcomeSkipped = "skipped"
)

// Reasons RecordFires gives.
const (
	ReasonMergedQueued = "merged into the run already queued"
	ReasonQueueFull    = "the ready queue is full (job-state-queue-size)"
)

// LedgerKeep is how many entries a job's ledger keeps (the oldest go first); LedgerTaskIDs is
// how many task ids an entry keeps (Tasks counts them all). They bound the node, which the
// leader's model holds in memory, at a few KB for a job of a few shards.
const (
	LedgerKeep    = 64
	LedgerTaskIDs = 16
)

// FireEntry is one slot, or a run of consecutive slots with one outcome, in a job's ledger.
type FireEntry struct {
	Slot    time.Time `json:"slot"`                   // the (first) slot
	Through time.Time `json:"through,omitzero"`       // the last slot, when the entry stands for several
	Count   int       `json:"count"`                  // how many slots
	AtLeast bool      `json:"countAtLeast,omitempty"` // Count is a lower bound (a very long run)
	Outcome string    `json:"outcome"`                // fired, merged or skipped
	Reason  string    `json:"reason,omitempty"`
	// Triggered marks a run asked for through the API, not by the cron; its Slot is when.
	Triggered bool `json:"triggered,omitempty"`
	// CatchUp (not stored) makes a fired entry add a run even without Fires.Accumulate: a
	// missed slot that misfirePolicy fireAll runs.
	CatchUp  bool      `json:"-"`
	Launched time.Time `json:"launched,omitzero"`  // when its tasks were written ahead
	Tasks    int       `json:"tasks,omitempty"`    // tasks launched for it, relaunches included
	TaskIDs  []string  `json:"taskIds,omitempty"`  // the first LedgerTaskIDs of them
	Attempts int       `json:"attempts,omitempty"` // the highest attempt a shard of the run was launched as (retries)
	Failed   string    `json:"failed,omitempty"`   // the run failed for good: why (set once)
	// Run is the run id that all its task ids carry (taskid.ID.Run), relaunches included:
	// it tells the run's tasks beyond the first LedgerTaskIDs. Empty in entries launched
	// before run ids.
	Run string `json:"run,omitempty"`
	// Ended is when the run's last shard ended (none running or waiting for a relaunch): the
	// run succeeded if Failed is empty. Dependent jobs wait for it (dependsOn).
	Ended time.Time `json:"ended,omitzero"`
}

// Succeeded reports whether the entry is a run that ended with every shard successful.
func (e FireEntry) Succeeded() bool { return !e.Ended.IsZero() && e.Failed == "" }

// Ledger is a job's fire ledger.
type Ledger struct {
	Cron string    `json:"cron"` // the expression the job is scheduled with: since From, or Last's
	Zone string    `json:"zone"` // and its zone
	Last time.Time `json:"last"` // the latest slot handled: always a real slot, of Cron or of the cron before From
	// From is when Cron and Zone took effect (a changed cron or zone): the slots up to then were
	// the old cron's, all handled, and the new cron's slots before it are none of the job's. A
	// new leader resumes from the later of Last and From. Zero: the cron has not changed since
	// the ledger began (and ledgers from before it read so).
	From  time.Time   `json:"from,omitzero"`
	Fires []FireEntry `json:"fires"` // oldest first
}

// Resume is where a producer resumes the job's slots from: the later of Last and From.
func (l Ledger) Resume() time.Time {
	if l.From.After(l.Last) {
		return l.From
	}
	return l.Last
}

func parseLedger(data []byte) (Ledger, error) {
	var l Ledger
	err := json.Unmarshal(data, &l)
	return l, err
}

// readLedger reads a job's ledger. A damaged one is logged and read as empty: it is rewritten
// whole at the next fire, and the job goes on.
func (s *Store) readLedger(ctx context.Context, job string) (Ledger, node, error) {
	p := s.path(firesDir, job)
	n, err := s.get(ctx, p)
	if err != nil || !n.exists {
		return Ledger{}, n, err
	}
	l, err := cachedParse(n.mn, "fire ledger", job, n.data, parseLedger)
	if err != nil {
		s.log.WithError(err).WithField("path", p).Warn("fire ledger unreadable; starting it afresh")
		return Ledger{}, n, nil
	}
	// The parse may be the model's cached one: never change it in place.
	l.Fires = slices.Clone(l.Fires)
	return l, n, nil
}

// FireLedger returns a job's ledger; ok is false when it has none (a job that has not fired
// since it was registered, or since ledgers exist).
func (s *Store) FireLedger(ctx context.Context, job string) (l Ledger, ok bool, err error) {
	l, n, err := s.readLedger(ctx, job)
	if err != nil {
		return l, false, fmt.Errorf("read the fire ledger of job %q: %w", job, err)
	}
	return l, n.exists, nil
}

// Fires is what the producer decided for some of a job's slots.
type Fires struct {
	// Cron and Zone are the job's schedule after this write, which the ledger then holds when
	// Last or From is set.
	Cron, Zone string
	// Last is the latest slot handled, which the ledger then holds; zero leaves it (a trigger,
	// or a change of cron alone).
	Last time.Time
	// From, when set, is a change of cron or zone: Cron and Zone take effect then. It is
	// written after (or with) the old cron's slots up to the change, and never moves Last.
	From time.Time
	// Entries, in slot order: each fired one asks for one run.
	Entries []FireEntry
	// Accumulate: each run adds one to the ready count (misfire). Otherwise the count becomes
	// 1, and a fire that finds a run queued merges into it (2.1.5's misfire=false), unless the
	// entry is a CatchUp.
	Accumulate bool
	// Refuse: a full ready root fails the write with ErrQueueFull and nothing is written (an
	// operator's trigger, answered 503). Otherwise the fired entries are recorded as skipped.
	Refuse bool
	// App, when set, is the job's app, and a write that queues a run requires that neither
	// the job nor App is disabled: a disable written since the caller checked (which dropped
	// the job's ready entry) fails it with ErrDisabled, and nothing is written. Without it, a
	// run queued just after the disable would wait, and run the moment the job is enabled.
	App string
	// ClearStop: the job's stop mark, if any, goes in the same multi (an operator's trigger is
	// how a stopped job is told to try again), so that a refused write keeps it and a written
	// one cannot leave it behind.
	ClearStop bool
}

// RecordFires writes a job's fires in one multi: the ready count grows by the runs they ask for
// and the ledger records every entry and the new last slot. A fired entry that finds a run
// queued without Accumulate is recorded as merged; when the ready root is full, as skipped
// (or, with Refuse, the write fails with ErrQueueFull).
// It returns the entries as written; it fails with ErrNotFound when the job does not exist.
func (s *Store) RecordFires(ctx context.Context, job string, f Fires) ([]FireEntry, error) {
	var out []FireEntry
	full := false
	err := retry(ctx, func() error {
		var err error
		out, err = s.recordFires(ctx, job, f, full)
		if errors.Is(err, ErrQueueFull) && !full && !f.Refuse {
			full = true // refused and logged by admit: record the slots as skipped
			out, err = s.recordFires(ctx, job, f, full)
		}
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("record %d fire ledger entries of job %q: %w", len(f.Entries), job, err)
	}
	return out, nil
}

func (s *Store) recordFires(ctx context.Context, job string, f Fires, full bool) ([]FireEntry, error) {
	rp, lp, jp := s.path(readyDir, job), s.path(firesDir, job), s.path(jobsDir, job)
	// The job's config is checked in the multi: a deleted job's ledger and ready entry are
	// gone with it (deleteJobOps), and a late write must not bring them back.
	jst, err := s.stat(ctx, jp)
	if err != nil {
		return nil, err
	}
	if jst == nil {
		return nil, &OpError{Op: "check", Path: jp, Err: ErrNotFound}
	}
	rn, err := s.get(ctx, rp)
	if err != nil {
		return nil, err
	}
	led, ln, err := s.readLedger(ctx, job)
	if err != nil {
		return nil, err
	}
	if !f.Last.IsZero() && f.From.IsZero() && !f.Last.After(led.Last) {
		// These slots are handled already: a write whose reply was lost, tried again. A slot
		// is handled once (the ledger's Last), so nothing is written, and the caller learns
		// what the first write recorded.
		return led.recorded(f.Entries), nil
	}
	count := 0
	if rn.exists {
		count = s.parseCount(rp, rn.data)
	}
	start := count
	entries := slices.Clone(f.Entries)
	for i := range entries {
		e := &entries[i]
		if e.Outcome != OutcomeFired {
			continue
		}
		switch {
		case full:
			e.Outcome, e.Reason = OutcomeSkipped, ReasonQueueFull
		case f.Accumulate || e.CatchUp || count == 0:
			count++
		default:
			e.Outcome, e.Reason = OutcomeMerged, ReasonMergedQueued
		}
	}
	ops := []any{checkOp(jp, jst.Version)}
	switch {
	case count == start:
	case !rn.exists:
		admit, err := s.admit(ctx, readyDir)
		if err != nil {
			return nil, err
		}
		ops = append(ops, admit, s.createOp(rp, []byte(strconv.Itoa(count))))
	default:
		ops = append(ops, setOp(rp, []byte(strconv.Itoa(count)), rn.version))
	}
	for _, e := range entries {
		led.add(e)
	}
	if !f.Last.IsZero() {
		led.Last = f.Last
	}
	if !f.From.IsZero() {
		led.From = f.From
	}
	if !f.Last.IsZero() || !f.From.IsZero() {
		led.Cron, led.Zone = f.Cron, f.Zone
	}
	data, err := json.Marshal(led)
	if err != nil {
		return nil, fmt.Errorf("encode the fire ledger: %w", err)
	}
	if ln.exists {
		ops = append(ops, setOp(lp, data, ln.version))
	} else {
		ops = append(ops, s.createOp(lp, data))
	}
	if f.ClearStop {
		sp := s.path(stoppedDir, job)
		st, err := s.stat(ctx, sp)
		if err != nil {
			return nil, err
		}
		if st != nil {
			ops = append(ops, deleteOp(sp, st.Version))
		}
	}
	var markers []string
	if f.App != "" && count > start {
		markers = []string{s.path(disableJobDir, job), s.path(disableAppDir, f.App)}
		for _, p := range markers {
			ops = append(ops, s.absentOps(p)...)
		}
	}
	if err := s.multi(ctx, ops...); err != nil {
		var op *OpError
		if errors.As(err, &op) && op.Op == "create" && errors.Is(err, ErrExists) && slices.Contains(markers, op.Path) {
			return nil, fmt.Errorf("%w: %w", ErrDisabled, err)
		}
		return nil, conflictIfExists(err)
	}
	return entries, nil
}

// recorded returns the ledger's entries of the slots of entries that it still holds.
func (l Ledger) recorded(entries []FireEntry) []FireEntry {
	var out []FireEntry
	for _, e := range entries {
		for _, h := range l.Fires {
			if h.Slot.Equal(e.Slot) && !h.Triggered {
				out = append(out, h)
				break
			}
		}
	}
	return out
}

// add appends an entry, joining it to the last one when both are the same merge or skip (a
// disabled job's every slot is one growing entry, not the whole ledger), and drops the oldest
// beyond LedgerKeep.
func (l *Ledger) add(e FireEntry) {
	if n := len(l.Fires); n > 0 && e.Outcome != OutcomeFired && !e.Triggered {
		last := &l.Fires[n-1]
		if last.Outcome == e.Outcome && last.Reason == e.Reason && !last.Triggered {
			last.Count += e.Count
			last.AtLeast = last.AtLeast || e.AtLeast
			last.Through = e.Slot
			if !e.Through.IsZero() {
				last.Through = e.Through
			}
			return
		}
	}
	l.Fires = append(l.Fires, e)
	if over := len(l.Fires) - LedgerKeep; over > 0 {
		l.Fires = slices.Delete(l.Fires, 0, over)
	}
}

// launchLedgerOps returns the op that records, in each launched job's ledger, the tasks its
// launch produced: a READY launch belongs to the oldest fired slot its ready count still
// holds (the count's runs are the latest fired entries not yet launched); a FAILOVER relaunch
// to the entry of the task it replaces. Jobs without a ledger (DAEMON jobs) are left alone.
func (s *Store) launchLedgerOps(ctx context.Context, l Launch, now time.Time) ([]any, error) {
	ready := map[string]int{}
	for _, r := range l.Ready {
		ready[r.JobName] = r.Count
	}
	replaced := map[string]string{} // failed task id → its relaunch
	for _, f := range l.Failover {
		replaced[f.Meta.String()] = f.TaskID
	}
	byJob := map[string][]taskid.ID{}
	var jobs []string
	for _, id := range l.Tasks {
		if _, seen := byJob[id.JobName]; !seen {
			jobs = append(jobs, id.JobName)
		}
		byJob[id.JobName] = append(byJob[id.JobName], id)
	}
	var ops []any
	for _, job := range jobs {
		led, n, err := s.readLedger(ctx, job)
		if err != nil {
			return nil, err
		}
		if !n.exists {
			continue
		}
		changed := false
		var fresh []taskid.ID
		for _, id := range byJob[job] {
			if id.Type == taskid.Failover {
				attempt := 0
				if r, ok, err := s.RetryOf(ctx, id.Meta); err != nil {
					return nil, err
				} else if ok {
					attempt = r.Attempt
				}
				if orig, ok := replaced[id.Meta.String()]; ok && led.relaunched(orig, id.String(), attempt) {
					changed = true
				}
				continue
			}
			fresh = append(fresh, id)
		}
		if count, ok := ready[job]; ok && len(fresh) > 0 && led.launched(count, fresh, now) {
			changed = true
		}
		if !changed {
			continue
		}
		data, err := json.Marshal(led)
		if err != nil {
			return nil, fmt.Errorf("encode the fire ledger: %w", err)
		}
		ops = append(ops, setOp(s.path(firesDir, job), data, n.version))
	}
	return ops, nil
}

// NextRun returns the index of the fired entry the next launch of a job with count queued runs
// belongs to: the oldest of the latest count fired entries not yet launched (older ones left
// the queue without a launch: a disable dropped the count); -1 when there is none. The queue
// launches its oldest run first, so when it holds more runs than the ledger has unlaunched
// entries, the next run is one whose entry the ledger no longer keeps (a fireAll catch-up of
// more than LedgerKeep slots): none, rather than the entry of a later run.
func (l Ledger) NextRun(count int) int {
	var pending []int
	for i, e := range l.Fires {
		if e.Outcome == OutcomeFired && e.Launched.IsZero() {
			pending = append(pending, i)
		}
	}
	if count < 1 || count > len(pending) {
		return -1
	}
	return pending[len(pending)-count]
}

// launched gives ids, the tasks of one run, to the fired entry the launch of a ready count of
// count runs belongs to.
func (l *Ledger) launched(count int, ids []taskid.ID, now time.Time) bool {
	i := l.NextRun(count)
	if i < 0 {
		return false
	}
	e := l.Fires[i]
	e.Launched, e.Tasks = now, len(ids)
	e.TaskIDs = make([]string, min(len(ids), LedgerTaskIDs))
	for k := range e.TaskIDs {
		e.TaskIDs[k] = ids[k].String()
	}
	e.Run = ids[0].Run()
	for _, id := range ids {
		if id.Run() != e.Run {
			e.Run = "" // not one run's: told apart by their ids only
		}
	}
	l.Fires[i] = e
	return true
}

// relaunched adds a relaunch (a failover or a retry, as attempt) to its run's entry.
func (l *Ledger) relaunched(orig, id string, attempt int) bool {
	i := l.RunOf(orig)
	if i < 0 {
		return false
	}
	e := l.Fires[i]
	e.Tasks++
	if len(e.TaskIDs) < LedgerTaskIDs {
		e.TaskIDs = append(slices.Clip(e.TaskIDs), id)
	}
	e.Attempts = max(e.Attempts, attempt)
	l.Fires[i] = e
	return true
}

// RunOf returns the index of the entry of the run task belongs to: the one of its run id, or
// that names it, or the latest launched (a job's runs never overlap, unless it is Allow: its
// runs launched before run ids, of more tasks than an entry keeps ids of, are then told apart
// no better); -1 when there is none.
func (l *Ledger) RunOf(task string) int {
	var run string
	if id, err := taskid.Parse(task); err == nil {
		run = id.Run()
	}
	latest := -1
	for i := len(l.Fires) - 1; i >= 0; i-- {
		if e := &l.Fires[i]; run != "" && e.Run == run || slices.Contains(e.TaskIDs, task) {
			return i
		}
		if latest < 0 && !l.Fires[i].Launched.IsZero() {
			latest = i
		}
	}
	return latest
}

// DropReady removes one run from a job's ready count, read as r (a DAEMON job's entry with
// nothing left to launch). A count changed since is a conflict, and nothing is written.
func (s *Store) DropReady(ctx context.Context, r ReadyEntry) error {
	p := s.path(readyDir, r.JobName)
	op := any(setOp(p, []byte(strconv.Itoa(r.Count-1)), r.Version))
	if r.Count <= 1 {
		op = deleteOp(p, r.Version)
	}
	if err := s.multi(ctx, op); err != nil {
		return fmt.Errorf("drop a queued run of job %q: %w", r.JobName, err)
	}
	return nil
}

// SkipQueuedRun drops a job's next queued run, read as r, and records its slot as skipped with
// reason, failed and ended, in one multi (a run whose dependency failed, issue 19).
func (s *Store) SkipQueuedRun(ctx context.Context, r ReadyEntry, reason string) error {
	led, n, err := s.readLedger(ctx, r.JobName)
	if err != nil {
		return fmt.Errorf("skip the queued run of job %q: %w", r.JobName, err)
	}
	p := s.path(readyDir, r.JobName)
	ops := []any{setOp(p, []byte(strconv.Itoa(r.Count-1)), r.Version)}
	if r.Count <= 1 {
		ops = []any{deleteOp(p, r.Version)}
	}
	if i := led.NextRun(r.Count); i >= 0 && n.exists {
		led.Fires[i].Outcome, led.Fires[i].Reason = OutcomeSkipped, reason
		// Failed and ended as of now: the jobs that depend on this one are skipped for the same
		// logical time in turn, instead of waiting for its next run (a chain a → b → c).
		led.Fires[i].Failed, led.Fires[i].Ended = reason, time.Now().UTC()
		data, err := json.Marshal(led)
		if err != nil {
			return fmt.Errorf("encode the fire ledger: %w", err)
		}
		ops = append(ops, setOp(s.path(firesDir, r.JobName), data, n.version))
	}
	if err := s.multi(ctx, ops...); err != nil {
		return fmt.Errorf("skip the queued run of job %q: %w", r.JobName, err)
	}
	return nil
}
