// Package producer turns cron fires of TRANSIENT jobs into ready-queue entries (SPEC §5.3). One
// goroutine sleeps until the earliest next fire among its jobs, then fires every job that is
// due: with misfire the job's ready count grows by one, without it becomes one. Fires that
// fall while no leader runs a producer are not replayed, and a clock that jumps over several
// fires (a suspended VM) fires once.
//
// The timer never waits for ZooKeeper: a second goroutine writes the fires. So a fire that falls
// while an earlier one's write waits for the client to reconnect is counted all the same, and
// is written once the connection is back (with misfire, each one).
//
//	Put(job) / Remove(name) ──▶ schedule ──▶ timer: the earliest fire ──▶ pending ──▶ writer: Store.AddReady ──▶ Fired(job)
package producer

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/cron"
)

// Store is the part of the state layer the producer writes.
type Store interface {
	AddReady(ctx context.Context, job string, misfire bool) error
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
	pending map[string]due // fires not yet written, by job
	written chan struct{}  // tells the writer there is something pending
}

// due is a job's fires that wait to be written.
type due struct {
	job config.Job
	at  []time.Time // the cron times of the fires, in order
}

type entry struct {
	job   config.Job
	sched *cron.Schedule
	loc   *time.Location
	next  time.Time
}

// New returns a producer; fired, if not nil, is called after each fire that was written, with
// the cron time of each run it added to the ready queue (with misfire one per fire, without it
// the earliest fire's), so that the leader can measure the schedule lag of those runs.
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

// Put schedules a job, or reschedules it after a change. Jobs without a cron and DAEMON jobs
// (whose executor runs the cron) are not scheduled here.
func (p *Producer) Put(j config.Job) error {
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
	e := &entry{job: j, sched: sched, loc: loc}
	e.next = sched.Next(p.clock.Now().In(loc))
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

// fireDue adds one fire of every job whose time has come to the pending fires, once however
// many of its fires have passed since the timer last woke.
func (p *Producer) fireDue() {
	now := p.clock.Now()
	p.mu.Lock()
	var fired []due
	for _, e := range p.jobs {
		if !e.next.IsZero() && !e.next.After(now) {
			fired = append(fired, due{job: e.job, at: []time.Time{e.next}})
			e.next = e.sched.Next(now.In(e.loc))
		}
	}
	p.mu.Unlock()
	if len(fired) == 0 {
		return
	}
	p.pendMu.Lock()
	for _, f := range fired {
		d := p.pending[f.job.JobName]
		p.pending[f.job.JobName] = due{job: f.job, at: append(d.at, f.at...)}
	}
	p.pendMu.Unlock()
	select {
	case p.written <- struct{}{}:
	default:
	}
}

// write writes the pending fires until ctx ends.
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
		for _, d := range batch {
			if ctx.Err() != nil {
				return
			}
			p.writeFires(ctx, d)
		}
	}
}

// writeFires records a job's pending fires: with misfire each one, without it one for all.
func (p *Producer) writeFires(ctx context.Context, d due) {
	j := d.job
	log := p.log.WithField("job", j.JobName)
	if len(d.at) > 1 {
		log = log.WithField("fires", len(d.at))
	}
	if off, err := p.store.JobOrAppDisabled(ctx, j); err != nil {
		log.WithError(err).Warn("cron fire skipped: cannot read the disable state")
		return
	} else if off {
		log.Debug("cron fire skipped: job or app disabled")
		return
	}
	runs := d.at[:1]
	if j.Misfire {
		runs = d.at
	}
	for i := range runs {
		if err := p.store.AddReady(ctx, j.JobName, j.Misfire); err != nil {
			log.WithError(err).Warn("cron fire not recorded")
			if i > 0 {
				p.fired(j.JobName, runs[:i])
			}
			return
		}
	}
	p.fired(j.JobName, runs)
}
