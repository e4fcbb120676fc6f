// Package producer turns the cron slots of TRANSIENT jobs into ready-queue entries (SPEC §5.3,
// issue 19). One goroutine sleeps until the earliest next slot among its jobs, then asks
// scheduler/schedule what becomes of every slot of every due job since the last one handled:
// the slot on time fires; slots a sleeping timer jumped over, and at a takeover the slots that
// fell while no instance led, are fired, merged or skipped by the job's misfirePolicy and
// startingDeadline. The last slot handled comes from the job's fire ledger in ZooKeeper, which
// every write moves in the same multi as the ready count, so no slot is handled twice however
// often the leadership changes.
//
// The timer never waits for ZooKeeper: a second goroutine writes the decisions. So a fire that
// falls while an earlier one's write waits for the client to reconnect is counted all the same,
// and is written once the connection is back; a write that fails is tried again.
//
// A change of a job's cron or zone through the leader (Change) is written by the update
// itself, after the old cron's due slots, with the new config in one multi.
//
//	Put(job) / Remove(name) ──▶ schedule ──▶ timer: the earliest slot ──▶ schedule.Plan ──▶ pending
//	  ──▶ writer: Store.RecordFires (ready count + fire ledger, one multi) ──▶ Fired(job, slots)
//	Change(job, update) ──▶ the old cron's due slots written ──▶ update(from): config + ledger
package producer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/cron"
	"github.com/ejcloud/ejcloud/scheduler/schedule"
	"github.com/ejcloud/ejcloud/state"
)

// Store is the part of the state layer the producer reads and writes.
type Store interface {
	// RecordFires writes a job's decided slots: the runs into the ready count, every slot into
	// the fire ledger, in one multi; it returns the entries as written.
	RecordFires(ctx context.Context, job string, f state.Fires) ([]state.FireEntry, error)
	// FireLedger reads the job's ledger, for the last slot handled.
	FireLedger(ctx context.Context, job string) (state.Ledger, bool, error)
	// JobOrAppDisabled says the job's slots are to be skipped.
	JobOrAppDisabled(ctx context.Context, j config.Job) (bool, error)
}

// Clock is the producer's time source; tests inject a fake. At takes the instant itself, not
// a duration from a Now read before it: a clock that moves between the two (a fake one jumps)
// would set the timer late.
type Clock interface {
	Now() time.Time
	// At returns a channel that receives once the clock has reached t (at once if it has).
	At(t time.Time) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                  { return time.Now() }
func (realClock) At(t time.Time) <-chan time.Time { return time.After(time.Until(t)) }

// RealClock is the wall clock.
var RealClock Clock = realClock{}

// ReasonDisabled is the reason of the slots of a disabled or stopped job.
const ReasonDisabled = "the job or its app is disabled, or the job is stopped"

// retryWrite is how long the writer waits before writing again what ZooKeeper refused.
const retryWrite = time.Second

// Producer fires the crons of TRANSIENT jobs.
type Producer struct {
	store Store
	clock Clock
	log   logrus.FieldLogger
	fired func(job string, at []time.Time) // told after each job that reached the ready queue

	// mu guards jobs. A decision is pended before mu is let go (lock order: mu, then pendMu),
	// so the writes of a job come in the order of its decisions, a change of cron included.
	mu   sync.Mutex
	jobs map[string]*entry
	wake chan struct{}

	pendMu  sync.Mutex       // guards pending
	pending map[string][]due // decided slots and changes not yet written, by job, in order
	written chan struct{}    // tells the writer there is something pending

	// writing holds a *sync.Mutex per job, held while the job's pending writes are taken and
	// written (lock order: a job's, then mu, then pendMu): so a Change writes after what the
	// writer has taken, never before it.
	writing sync.Map
	// changing holds a *sync.Mutex per job, held by a Change across its writes and by Put and
	// Remove (lock order: it, then the job's write lock): a job's Put or Remove waits for its
	// Change, whose writes are made without mu.
	changing sync.Map
}

// due is a write that waits: some of a job's decided slots, a change of its cron or zone, or
// both (the change, then the new cron's slots after it).
type due struct {
	job   config.Job       // the job's config as of the latest decision: the ledger's cron and zone
	last  time.Time        // the latest slot decided; zero when there is none (a change alone)
	from  time.Time        // a change of cron or zone: when the job's cron took effect
	slots []schedule.Slots // in order
}

type entry struct {
	job   config.Job
	sched *cron.Schedule
	loc   *time.Location
	opts  schedule.Options
	last  time.Time // the latest slot handled: the ledger's at first, then this producer's
	// live is false until the first plan after a takeover: the slots from last up to since
	// (when this producer took the job over) fell while no instance led. Then it is true: the
	// latest due slot is on time.
	live  bool
	since time.Time
	next  time.Time
}

// plan decides e's slots in (e.last, now]. After a takeover the slots up to the takeover were
// missed, and the policy decides them; a slot after it falls while this producer runs, and is
// on time whatever the policy: a takeover between two slots misses none.
func (e *entry) plan(now time.Time) schedule.Decision {
	if e.live {
		return schedule.Plan(e.sched, e.loc, e.last, now, e.opts, true)
	}
	e.live = true
	cut := e.since
	if now.Before(cut) {
		cut = now
	}
	d := schedule.Plan(e.sched, e.loc, e.last, cut, e.opts, false)
	if now.After(cut) {
		after := schedule.Plan(e.sched, e.loc, d.Last, now, e.opts, true)
		d.Slots, d.Fires, d.Last = append(d.Slots, after.Slots...), append(d.Fires, after.Fires...), after.Last
	}
	return d
}

// New returns a producer; fired, if not nil, is called after each write, with the slots of the
// runs it added to the ready queue, so that the leader can measure the schedule lag of those
// runs.
func New(store Store, clock Clock, log logrus.FieldLogger, fired func(job string, at []time.Time)) *Producer {
	if clock == nil {
		clock = RealClock
	}
	if fired == nil {
		fired = func(string, []time.Time) {}
	}
	return &Producer{store: store, clock: clock, log: log, fired: fired, jobs: map[string]*entry{}, wake: make(chan struct{}, 1),
		pending: map[string][]due{}, written: make(chan struct{}, 1)}
}

// Options are a job's misfire options for schedule.Plan.
func Options(j config.Job) schedule.Options {
	return schedule.Options{Policy: schedule.Policy(j.EffectiveMisfirePolicy()), Deadline: time.Duration(j.StartingDeadline) * time.Second}
}

// Put schedules a job, or reschedules it after a change. Jobs without a cron and DAEMON jobs
// (whose executor runs the cron) are not scheduled here. A job new to this producer resumes
// where its fire ledger says (schedule.Resume: a takeover, the slots since then were missed),
// or from now. A change of cron or zone first decides the old cron's slots that are due (the
// timer running late), then takes effect from now: the ledger records it (From) after those
// slots, so a leader that takes over before the new cron's first slot resumes from the change
// with the new cron, and the old cron's passed slots are never decided again.
func (p *Producer) Put(ctx context.Context, j config.Job) error {
	changing := jobLock(&p.changing, j.JobName)
	changing.Lock()
	defer changing.Unlock()
	if c, _ := j.FiredCron(); c == "" {
		p.mu.Lock()
		defer p.poke()
		defer p.mu.Unlock()
		if old := p.jobs[j.JobName]; old != nil {
			// No longer this producer's to fire (trigger only, or a DAEMON job, whose executor
			// runs the cron): a change to no cron. Were the ledger left with the old cron, the
			// same cron put back later would catch up the time it was not scheduled.
			none := j
			none.Cron, none.TimeZone = "", ""
			p.change(old, none, p.clock.Now())
			delete(p.jobs, j.JobName)
		}
		return nil
	}
	sched, err := cron.Parse(j.Cron)
	if err != nil {
		return err
	}
	loc, err := j.Location()
	if err != nil {
		return err
	}
	p.mu.Lock()
	_, known := p.jobs[j.JobName]
	p.mu.Unlock()
	var led state.Ledger
	if !known {
		l, ok, err := p.store.FireLedger(ctx, j.JobName)
		if err != nil {
			return fmt.Errorf("schedule job %q: %w", j.JobName, err)
		}
		if ok {
			led = l
		}
	}
	e := &entry{job: j, sched: sched, loc: loc, opts: Options(j)}
	p.mu.Lock()
	defer p.poke()
	defer p.mu.Unlock()
	now := p.clock.Now()
	switch old := p.jobs[j.JobName]; {
	case old == nil:
		// New to this producer: a takeover, or a new job. (led is empty when the job was
		// removed, then put again, while this Put read nothing: it begins at now, as a new job.)
		from, missed := schedule.Resume(schedule.Mark{Cron: led.Cron, Zone: led.Zone, Last: led.Last, From: led.From}, j.Cron, j.TimeZone, now)
		e.last, e.live, e.since = from, !missed, now
	case old.job.Cron == j.Cron && old.job.TimeZone == j.TimeZone:
		e.last, e.live, e.since = old.last, old.live, old.since
	default:
		p.change(old, j, now)
		e.last, e.live = now, true
	}
	e.next = sched.Next(e.last.In(loc))
	p.jobs[j.JobName] = e
	return nil
}

// change ends old's cron at now, for j's cron and zone (the caller holds mu). The old cron's
// slots up to now are decided as its timer would have (it may be running late), with the old
// options, and written first; then the ledger takes j's cron and zone from now: the new cron's
// slots before now are none of the job's.
func (p *Producer) change(old *entry, j config.Job, now time.Time) {
	if !old.next.IsZero() && !old.next.After(now) {
		if d := old.plan(now); len(d.Slots) > 0 {
			p.pend(due{job: old.job, last: d.Last, slots: d.Slots})
		}
	}
	p.pend(due{job: j, from: now})
	p.signal()
}

// Change applies an update of j's config that changes the cron or zone it is fired by, so that
// the config and the change are written in one multi (state.Store.UpdateJobFrom): the old
// cron's slots up to now are decided, and written with whatever the writer has pending of the
// job, in order; then update(now) writes the config and the change; then j's cron fires from
// now. A leader that takes over at any point finds either the old config and a ledger of the
// old cron, or the new config and a ledger that says when it took effect. A failed write
// changes nothing but the old cron's slots decided up to now; its cron goes on.
//
// The writes are made without mu: they may wait for ZooKeeper (the client reconnecting, up to a
// session timeout), and the other jobs' fires must not wait with them, or a fire decided that
// late could be skipped by its job's starting deadline. Meanwhile the job is out of the timer's
// sight: its slots up to now are decided, and the ones after now are the new cron's, or the old
// cron's again if the change fails.
func (p *Producer) Change(ctx context.Context, j config.Job, update func(from time.Time) error) error {
	var sched *cron.Schedule
	var loc *time.Location
	if c, _ := j.FiredCron(); c != "" {
		var err error
		if sched, err = cron.Parse(j.Cron); err != nil {
			return err
		}
		if loc, err = j.Location(); err != nil {
			return err
		}
	}
	c := jobLock(&p.changing, j.JobName)
	c.Lock()
	defer c.Unlock()
	// The job's write lock first: while the writer writes a long batch, the timer goes on.
	w := p.writeLock(j.JobName)
	w.Lock()
	defer w.Unlock()
	defer p.poke()
	p.mu.Lock()
	now := p.clock.Now()
	old := p.jobs[j.JobName]
	if old != nil {
		p.decide(old, now)
		delete(p.jobs, j.JobName)
	}
	p.mu.Unlock()
	err := p.writeChange(ctx, j.JobName, now, update)
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case err != nil:
		if old != nil {
			p.jobs[j.JobName] = old // its cron goes on, from the slots decided up to now
		}
		return err
	case sched == nil:
		return nil
	}
	e := &entry{job: j, sched: sched, loc: loc, opts: Options(j), last: now, live: true}
	e.next = sched.Next(now.In(loc))
	p.jobs[j.JobName] = e
	return nil
}

// writeChange writes, for a Change, what the job has pending (its old cron's slots up to now),
// then the update; the caller holds the job's write lock.
func (p *Producer) writeChange(ctx context.Context, job string, now time.Time, update func(from time.Time) error) error {
	if !p.writeQueued(ctx, job) {
		return fmt.Errorf("change the cron of job %q: the old cron's slots up to the change are not written", job)
	}
	return update(now)
}

// writeLock returns the lock a job's writes are made under.
func (p *Producer) writeLock(job string) *sync.Mutex { return jobLock(&p.writing, job) }

// jobLock returns job's lock in locks, a map of *sync.Mutex by job.
func jobLock(locks *sync.Map, job string) *sync.Mutex {
	l, _ := locks.LoadOrStore(job, &sync.Mutex{})
	return l.(*sync.Mutex)
}

// Remove stops firing a job; it waits for a Change of the job under way.
func (p *Producer) Remove(name string) {
	c := jobLock(&p.changing, name)
	c.Lock()
	defer c.Unlock()
	p.mu.Lock()
	delete(p.jobs, name)
	p.mu.Unlock()
	p.poke()
}

func (p *Producer) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// Next returns a job's next n fire times in its own zone (GET /api/job/{job}/next).
func Next(j config.Job, from time.Time, n int) ([]time.Time, error) {
	sched, err := j.Schedule()
	if err != nil || sched == nil {
		return nil, err
	}
	loc, err := j.Location()
	if err != nil {
		return nil, err
	}
	return sched.NextN(from.In(loc), n), nil
}

// Run fires jobs until ctx ends.
func (p *Producer) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.write(ctx)
	}()
	defer wg.Wait()
	for {
		p.mu.Lock()
		var earliest time.Time
		for _, e := range p.jobs {
			if !e.next.IsZero() && (earliest.IsZero() || e.next.Before(earliest)) {
				earliest = e.next
			}
		}
		p.mu.Unlock()
		var timer <-chan time.Time
		if !earliest.IsZero() {
			timer = p.clock.At(earliest)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-p.wake:
			continue
		case <-timer:
		}
		p.fireDue()
	}
}

// fireDue decides the slots of every job whose next slot has come, and hands them to the
// writer.
func (p *Producer) fireDue() {
	now := p.clock.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	decided := false
	for _, e := range p.jobs {
		decided = p.decide(e, now) || decided
	}
	if decided {
		p.signal()
	}
}

// decide decides e's slots up to now if its next one has come, and pends them (the caller
// holds mu); it reports whether it pended any.
func (p *Producer) decide(e *entry, now time.Time) bool {
	if e.next.IsZero() || e.next.After(now) {
		return false
	}
	d := e.plan(now)
	if len(d.Slots) > 0 {
		e.last = d.Last
		p.pend(due{job: e.job, last: d.Last, slots: d.Slots})
	}
	e.next = e.sched.Next(e.last.In(e.loc))
	if !e.next.After(now) { // a slot Plan did not see (cannot happen): never spin on it
		e.next = e.sched.Next(now.In(e.loc))
	}
	return len(d.Slots) > 0
}

// pend adds d after the job's pending writes (the caller holds mu), joined to the last of them
// when one multi can write both, with the same ready-count semantics: slots of one cron, a
// change after the old cron's slots (so that the ledger never holds them without the change
// that follows), or the new cron's slots after the change.
func (p *Producer) pend(d due) {
	p.pendMu.Lock()
	defer p.pendMu.Unlock()
	q := p.pending[d.job.JobName]
	if n := len(q); n > 0 {
		prev := &q[n-1]
		sameCron := prev.job.Cron == d.job.Cron && prev.job.TimeZone == d.job.TimeZone
		if prev.job.Misfire == d.job.Misfire && (sameCron || !d.from.IsZero()) {
			prev.job, prev.slots = d.job, append(prev.slots, d.slots...)
			if !d.last.IsZero() {
				prev.last = d.last
			}
			if !d.from.IsZero() {
				prev.from = d.from
			}
			return
		}
	}
	p.pending[d.job.JobName] = append(q, d)
}

// requeue puts back, before whatever was pended since, a job's writes that failed (the caller
// holds pendMu).
func (p *Producer) requeue(job string, ds []due) {
	p.pending[job] = append(slices.Clip(ds), p.pending[job]...)
}

func (p *Producer) signal() {
	select {
	case p.written <- struct{}{}:
	default:
	}
}

// write writes the pending slots until ctx ends.
func (p *Producer) write(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-p.written:
		}
		if failed := !p.writeBatch(ctx); failed {
			select {
			case <-ctx.Done():
				return
			case <-time.After(retryWrite):
			}
			p.signal()
		}
	}
}

// writeBatch writes what is pending, job by job, and reports whether all of it was written.
// It takes the jobs' queues under their write locks, so that a Change writes neither before
// nor while this writes its job. After a failure the rest go back unwritten (ZooKeeper is
// likely away): one wait, not one per job.
func (p *Producer) writeBatch(ctx context.Context) bool {
	p.pendMu.Lock()
	jobs := slices.Sorted(maps.Keys(p.pending))
	p.pendMu.Unlock()
	locks := make([]*sync.Mutex, len(jobs))
	for i, job := range jobs {
		locks[i] = p.writeLock(job)
		locks[i].Lock()
	}
	p.pendMu.Lock()
	batch := make([][]due, len(jobs))
	for i, job := range jobs {
		batch[i] = p.pending[job]
		delete(p.pending, job)
	}
	p.pendMu.Unlock()
	failed := false
	for i, job := range jobs {
		for k, d := range batch[i] {
			if failed || !p.writeFires(ctx, d) {
				failed = true
				p.pendMu.Lock()
				p.requeue(job, batch[i][k:])
				p.pendMu.Unlock()
				break
			}
		}
		locks[i].Unlock()
	}
	return !failed
}

// writeQueued writes a job's pending writes in order and reports whether all were written
// (the caller holds the job's write lock). What is not written goes back, before anything
// pended since: the ledger still has the slots before it as its last, so it must be written
// before any later one.
func (p *Producer) writeQueued(ctx context.Context, job string) bool {
	p.pendMu.Lock()
	ds := p.pending[job]
	delete(p.pending, job)
	p.pendMu.Unlock()
	for i, d := range ds {
		if !p.writeFires(ctx, d) {
			p.pendMu.Lock()
			p.requeue(job, ds[i:])
			p.pendMu.Unlock()
			return false
		}
	}
	return true
}

// writeFires records a job's decided slots and reports whether they were written.
func (p *Producer) writeFires(ctx context.Context, d due) bool {
	j := d.job
	log := p.log.WithField("job", j.JobName)
	off, err := p.store.JobOrAppDisabled(ctx, j)
	if err != nil {
		log.WithError(err).Warn("cron slots not recorded: cannot read the disable state; trying again")
		return false
	}
	entries := make([]state.FireEntry, len(d.slots))
	for i, s := range d.slots {
		e := state.FireEntry{Slot: s.First, Count: s.Count, AtLeast: s.AtLeast, Outcome: string(s.Outcome), Reason: s.Reason, CatchUp: s.CatchUp}
		if !s.Last.Equal(s.First) {
			e.Through = s.Last
		}
		if off {
			e.Outcome, e.Reason = state.OutcomeSkipped, ReasonDisabled
		}
		entries[i] = e
	}
	f := state.Fires{Cron: j.Cron, Zone: j.TimeZone, Last: d.last, From: d.from, Entries: entries, Accumulate: j.Misfire}
	if !off {
		// A disable written since the read above fails the write rather than leave a run
		// queued, to start the moment the job is enabled (SPEC §5.3: a disabled job's fires
		// do nothing); the slots are then recorded as skipped on the next try.
		f.App = j.AppName
	}
	written, err := p.store.RecordFires(ctx, j.JobName, f)
	switch {
	case errors.Is(err, state.ErrDisabled):
		log.WithError(err).Debug("the job or its app was disabled as its slots were written; recording them as skipped")
		return false
	case errors.Is(err, state.ErrNotFound) && !errors.Is(err, state.ErrConflict):
		// The job's config is gone. (A node gone since it was read is a conflict, which
		// RecordFires reads again until ctx ends: the slots are not a deleted job's.)
		log.WithError(err).Debug("cron slots of a deleted job dropped")
		return true
	case err != nil:
		if ctx.Err() == nil {
			log.WithError(err).Warn("cron slots not recorded; trying again")
		}
		return false
	}
	var runs []time.Time
	for _, e := range written {
		if e.Outcome == state.OutcomeFired {
			runs = append(runs, e.Slot)
		}
	}
	if len(d.slots) > 1 || len(runs) != 1 {
		log.WithFields(logrus.Fields{"slots": len(d.slots), "runs": len(runs)}).Debug("cron slots recorded")
	}
	if len(runs) > 0 {
		p.fired(j.JobName, runs)
	}
	return true
}
