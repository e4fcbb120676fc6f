// Package producer turns cron fires of TRANSIENT jobs into ready-queue entries (SPEC §5.3). One
// goroutine sleeps until the earliest next fire among its jobs, then fires every job that is
// due: with misfire the job's ready count grows by one, without it becomes one. Fires that
// fall while no leader runs a producer are not replayed.
//
//	Put(job) / Remove(name) ──▶ schedule ──▶ Run: wait for the earliest fire ──▶ Store.AddReady ──▶ Fired(job)
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
	fired func(job string) // told after each job that reached the ready queue

	mu   sync.Mutex // guards jobs
	jobs map[string]*entry
	wake chan struct{}
}

type entry struct {
	job   config.Job
	sched *cron.Schedule
	loc   *time.Location
	next  time.Time
}

// New returns a producer; fired, if not nil, is called after each fire that was written.
func New(store Store, clock Clock, log logrus.FieldLogger, fired func(job string)) *Producer {
	if clock == nil {
		clock = RealClock
	}
	if fired == nil {
		fired = func(string) {}
	}
	return &Producer{store: store, clock: clock, log: log, fired: fired, jobs: map[string]*entry{}, wake: make(chan struct{}, 1)}
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
		p.fireDue(ctx)
	}
}

// fireDue fires every job whose time has come, once, however many of its fires have passed.
func (p *Producer) fireDue(ctx context.Context) {
	now := p.clock.Now()
	p.mu.Lock()
	var due []config.Job
	for _, e := range p.jobs {
		if !e.next.IsZero() && !e.next.After(now) {
			due = append(due, e.job)
			e.next = e.sched.Next(now.In(e.loc))
		}
	}
	p.mu.Unlock()
	sort.Slice(due, func(i, j int) bool { return due[i].JobName < due[j].JobName })
	for _, j := range due {
		if ctx.Err() != nil {
			return
		}
		log := p.log.WithField("job", j.JobName)
		if off, err := p.store.JobOrAppDisabled(ctx, j); err != nil {
			log.WithError(err).Warn("cron fire skipped: cannot read the disable state")
			continue
		} else if off {
			log.Debug("cron fire skipped: job or app disabled")
			continue
		}
		if err := p.store.AddReady(ctx, j.JobName, j.Misfire); err != nil {
			log.WithError(err).Warn("cron fire not recorded")
			continue
		}
		p.fired(j.JobName)
	}
}
