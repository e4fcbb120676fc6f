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
//	Put(job) / Remove(name) ──▶ schedule ──▶ timer: the earliest slot ──▶ schedule.Plan ──▶ pending
//	  ──▶ writer: Store.RecordFires (ready count + fire ledger, one multi) ──▶ Fired(job, slots)
package producer

import (
	"context"
	"errors"
	"fmt"
	"sort"
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

// Clock is the producer's time source; tests inject a fake.
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

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

	mu   sync.Mutex // guards jobs
	jobs map[string]*entry
	wake chan struct{}

	pendMu  sync.Mutex     // guards pending
	pending map[string]due // decided slots not yet written, by job
	written chan struct{}  // tells the writer there is something pending
}

// due is a job's decided slots that wait to be written.
type due struct {
	job   config.Job
	last  time.Time        // the latest slot decided
	slots []schedule.Slots // in order
}

type entry struct {
	job   config.Job
	sched *cron.Schedule
	loc   *time.Location
	opts  schedule.Options
	last  time.Time // the latest slot handled: the ledger's at first, then this producer's
	// live is false until the first plan after a takeover: the slots since last fell while no
	// instance led. Then it is true: the latest due slot is on time.
	live bool
	next time.Time
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
		pending: map[string]due{}, written: make(chan struct{}, 1)}
}

// Options are a job's misfire options for schedule.Plan.
func Options(j config.Job) schedule.Options {
	return schedule.Options{Policy: schedule.Policy(j.EffectiveMisfirePolicy()), Deadline: time.Duration(j.StartingDeadline) * time.Second}
}

// Put schedules a job, or reschedules it after a change. Jobs without a cron and DAEMON jobs
// (whose executor runs the cron) are not scheduled here. A job new to this producer resumes
// from its fire ledger's last slot when the ledger is of the same cron and zone (a takeover:
// the slots since then were missed); otherwise, and after a change of cron or zone, from now.
func (p *Producer) Put(ctx context.Context, j config.Job) error {
	if j.JobExecutionType != config.Transient || j.Cron == "" {
		p.Remove(j.JobName)
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
	e := &entry{job: j, sched: sched, loc: loc, opts: Options(j), last: p.clock.Now(), live: true}
	p.mu.Lock()
	old := p.jobs[j.JobName]
	p.mu.Unlock()
	switch {
	case old != nil && old.job.Cron == j.Cron && old.job.TimeZone == j.TimeZone:
		e.last, e.live = old.last, old.live
	case old == nil:
		led, ok, err := p.store.FireLedger(ctx, j.JobName)
		if err != nil {
			return fmt.Errorf("schedule job %q: %w", j.JobName, err)
		}
		if ok && led.Cron == j.Cron && led.Zone == j.TimeZone && !led.Last.IsZero() {
			e.last, e.live = led.Last, false
		}
	}
	e.next = sched.Next(e.last.In(loc))
	p.mu.Lock()
	p.jobs[j.JobName] = e
	p.mu.Unlock()
	p.poke()
	return nil
}

// Remove stops firing a job.
func (p *Producer) Remove(name string) {
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
			timer = p.clock.After(max(earliest.Sub(p.clock.Now()), 0))
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
	var decided []due
	for _, e := range p.jobs {
		if e.next.IsZero() || e.next.After(now) {
			continue
		}
		d := schedule.Plan(e.sched, e.loc, e.last, now, e.opts, e.live)
		e.live = true
		if len(d.Slots) > 0 {
			e.last = d.Last
			decided = append(decided, due{job: e.job, last: d.Last, slots: d.Slots})
		}
		e.next = e.sched.Next(e.last.In(e.loc))
		if !e.next.After(now) { // a slot Plan did not see (cannot happen): never spin on it
			e.next = e.sched.Next(now.In(e.loc))
		}
	}
	p.mu.Unlock()
	if len(decided) == 0 {
		return
	}
	p.pendMu.Lock()
	for _, d := range decided {
		p.pend(d, false)
	}
	p.pendMu.Unlock()
	p.signal()
}

// pend adds d to the job's pending slots (the caller holds pendMu): after them, or before them
// when d is a batch whose write failed and is to be tried again.
func (p *Producer) pend(d due, before bool) {
	old, ok := p.pending[d.job.JobName]
	switch {
	case !ok:
		p.pending[d.job.JobName] = d
	case before:
		old.slots = append(d.slots, old.slots...)
		p.pending[d.job.JobName] = old
	default:
		p.pending[d.job.JobName] = due{job: d.job, last: d.last, slots: append(old.slots, d.slots...)}
	}
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
		p.pendMu.Lock()
		batch := make([]due, 0, len(p.pending))
		for _, d := range p.pending {
			batch = append(batch, d)
		}
		clear(p.pending)
		p.pendMu.Unlock()
		sort.Slice(batch, func(i, j int) bool { return batch[i].job.JobName < batch[j].job.JobName })
		failed := false
		for _, d := range batch {
			if ctx.Err() != nil {
				return
			}
			if failed || !p.writeFires(ctx, d) {
				// Not written: the ledger still has the slots before these as its last, so
				// they must be written before any later one. Try again shortly.
				failed = true
				p.pendMu.Lock()
				p.pend(d, true)
				p.pendMu.Unlock()
			}
		}
		if failed {
			select {
			case <-ctx.Done():
				return
			case <-time.After(retryWrite):
			}
			p.signal()
		}
	}
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
		e := state.FireEntry{Slot: s.First, Count: s.Count, AtLeast: s.AtLeast, Outcome: string(s.Outcome), Reason: s.Reason}
		if !s.Last.Equal(s.First) {
			e.Through = s.Last
		}
		if off {
			e.Outcome, e.Reason = state.OutcomeSkipped, ReasonDisabled
		}
		entries[i] = e
	}
	written, err := p.store.RecordFires(ctx, j.JobName, state.Fires{Cron: j.Cron, Zone: j.TimeZone, Last: d.last, Entries: entries,
		Accumulate: j.Misfire || j.EffectiveMisfirePolicy() == config.FireAll})
	switch {
	case errors.Is(err, state.ErrNotFound):
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
