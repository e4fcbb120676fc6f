package producer

import (
	"context"
	"io"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/internal/await"
)

// fakeClock moves only when told; After channels fire when the time passes them.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now // as time.After(0) does
		return ch
	}
	c.waiters = append(c.waiters, waiter{c.now.Add(d), ch})
	return ch
}

func (c *fakeClock) waiting() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if !w.at.After(c.now) {
			w.ch <- c.now
		} else {
			kept = append(kept, w)
		}
	}
	c.waiters = kept
}

// recorder is a Store that records the adds.
type recorder struct {
	mu       sync.Mutex
	adds     []string
	disabled map[string]bool
	gate     chan struct{} // if set, an add waits for it to close (ZooKeeper unreachable)
	blocked  int           // adds waiting at the gate
	fired    []string      // what the producer told its fired func: "job@seconds after t0"
}

func (r *recorder) firedTimes(job string, at []time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range at {
		r.fired = append(r.fired, job+"@"+a.Sub(t0).String())
	}
}

func (r *recorder) firedSoFar() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.fired...)
}

func (r *recorder) AddReady(_ context.Context, job string, misfire bool) error {
	r.mu.Lock()
	if gate := r.gate; gate != nil {
		r.blocked++
		r.mu.Unlock()
		<-gate
		r.mu.Lock()
		r.blocked--
	}
	defer r.mu.Unlock()
	kind := "set"
	if misfire {
		kind = "add"
	}
	r.adds = append(r.adds, job+":"+kind)
	return nil
}

func (r *recorder) JobOrAppDisabled(_ context.Context, j config.Job) (bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.disabled[j.JobName] || r.disabled[j.AppName], nil
}

func (r *recorder) got() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.adds...)
}

func job(name, cronExpr, zone string, misfire bool) config.Job {
	return config.Job{JobName: name, AppName: "app", JobType: config.Script, JobExecutionType: config.Transient,
		Cron: cronExpr, TimeZone: zone, Misfire: misfire}
}

func start(t *testing.T, now time.Time) (*Producer, *fakeClock, *recorder) {
	clock := &fakeClock{now: now}
	rec := &recorder{disabled: map[string]bool{}}
	log := logrus.New()
	log.SetOutput(io.Discard)
	p := New(rec, clock, log, rec.firedTimes)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return p, clock, rec
}

// step advances the clock once the producer is waiting, and waits for the adds to settle.
func step(t *testing.T, clock *fakeClock, rec *recorder, d time.Duration, want []string) {
	t.Helper()
	await.True(t, 5*time.Second, "producer waiting", func() bool { return clock.waiting() > 0 })
	clock.advance(d)
	await.True(t, 5*time.Second, "adds "+fmtList(want), func() bool { return reflect.DeepEqual(rec.got(), want) })
}

func fmtList(s []string) string { return "[" + joinComma(s) + "]" }

func joinComma(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ","
		}
		out += x
	}
	return out
}

var t0 = time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)

func TestFiresInTheJobsZoneWithMisfireSemantics(t *testing.T) {
	p, clock, rec := start(t, t0)
	p.Put(job("every2s", "*/2 * * * * ?", "UTC", true))
	p.Put(job("tokyo10", "0 0 10 * * ?", "Asia/Tokyo", false)) // 01:00 UTC
	step(t, clock, rec, 2*time.Second, []string{"every2s:add"})
	step(t, clock, rec, 2*time.Second, []string{"every2s:add", "every2s:add"})
	// Up to 00:59:59.999 in one jump: the 2 s job fires once for all it missed on the way...
	step(t, clock, rec, time.Hour-4*time.Second-time.Millisecond, []string{"every2s:add", "every2s:add", "every2s:add"})
	// ...and at 01:00 UTC, 10:00 in Tokyo, both fire.
	step(t, clock, rec, time.Millisecond, []string{"every2s:add", "every2s:add", "every2s:add", "every2s:add", "tokyo10:set"})
}

func TestMissedFiresAreNotReplayed(t *testing.T) {
	p, clock, rec := start(t, t0)
	p.Put(job("j", "*/2 * * * * ?", "UTC", true))
	// Ten fires' worth of time passes in one jump (a long GC pause, a suspended VM): one fire.
	step(t, clock, rec, 20*time.Second, []string{"j:add"})
}

// A write that waits for ZooKeeper (the client reconnecting) does not stop the timer: the fires
// that fall meanwhile are written once it returns — with misfire each one, without it one.
func TestFiresDuringASlowWriteAreNotLost(t *testing.T) {
	p, clock, rec := start(t, t0)
	p.Put(job("add", "*/2 * * * * ?", "UTC", true))
	p.Put(job("set", "*/2 * * * * ?", "UTC", false))
	gate := make(chan struct{})
	rec.mu.Lock()
	rec.gate = gate
	rec.mu.Unlock()
	await.True(t, 5*time.Second, "producer waiting", func() bool { return clock.waiting() > 0 })
	clock.advance(2 * time.Second)
	await.True(t, 5*time.Second, "the first fire's write waiting", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return rec.blocked == 1
	})
	for range 3 { // three more fires of each job while that write waits
		await.True(t, 5*time.Second, "producer waiting", func() bool { return clock.waiting() > 0 })
		clock.advance(2 * time.Second)
	}
	await.True(t, 5*time.Second, "the timer waiting for the fourth fire's successor", func() bool {
		p.mu.Lock()
		defer p.mu.Unlock()
		return p.jobs["add"].next.Equal(t0.Add(10*time.Second)) && clock.waiting() > 0
	})
	rec.mu.Lock()
	rec.gate = nil
	rec.mu.Unlock()
	close(gate)
	want := []string{"add:add", "set:set", "add:add", "add:add", "add:add", "set:set"}
	await.True(t, 5*time.Second, "adds "+fmtList(want), func() bool { return reflect.DeepEqual(rec.got(), want) })
	// The runs' cron times, for the schedule lag: each fire's with misfire, the earliest of
	// the fires a run stands for without it.
	fired := []string{"add@2s", "set@2s", "add@4s", "add@6s", "add@8s", "set@4s"}
	await.True(t, 5*time.Second, "fired "+fmtList(fired), func() bool { return reflect.DeepEqual(rec.firedSoFar(), fired) })
}

func TestDisabledAndRemovedJobsDoNotFire(t *testing.T) {
	p, clock, rec := start(t, t0)
	p.Put(job("off", "*/2 * * * * ?", "UTC", false))
	p.Put(job("gone", "*/2 * * * * ?", "UTC", false))
	p.Put(job("on", "*/2 * * * * ?", "UTC", false))
	rec.disabled["off"] = true
	p.Remove("gone")
	step(t, clock, rec, 2*time.Second, []string{"on:set"})
}

func TestTriggerOnlyAndDaemonJobsAreNotScheduled(t *testing.T) {
	p, _, _ := start(t, t0)
	p.Put(job("trigger-only", "", "UTC", false))
	d := job("daemon", "*/1 * * * * ?", "UTC", false)
	d.JobExecutionType = config.Daemon
	p.Put(d)
	p.mu.Lock()
	n := len(p.jobs)
	p.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d jobs scheduled; want none", n)
	}
}

func TestNext(t *testing.T) {
	got, err := Next(job("j", "0 15 10 ? * 6L", "UTC", false), t0, 2)
	want := []time.Time{time.Date(2026, 11, 27, 10, 15, 0, 0, time.UTC), time.Date(2026, 12, 25, 10, 15, 0, 0, time.UTC)}
	if err != nil || len(got) != 2 || !got[0].Equal(want[0]) || !got[1].Equal(want[1]) {
		t.Fatalf("Next = %v, %v; want %v", got, err, want)
	}
}
