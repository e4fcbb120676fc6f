package producer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/scheduler/schedule"
	"github.com/ejcloud/ejcloud/state"
)

// fakeClock moves only when told; At channels fire when the time passes them.
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

func (c *fakeClock) At(t time.Time) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if !t.After(c.now) {
		ch <- c.now // as time.After(0) does
		return ch
	}
	c.waiters = append(c.waiters, waiter{t, ch})
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

// recorder is a Store that records the runs each write asks for ("job:add" with Accumulate or
// for a catch-up entry, "job:set" for the first fire of a write without either, whose later
// fires merge), keeps each job's ledger in memory, and can hold writes at a gate or fail them.
type recorder struct {
	mu       sync.Mutex
	adds     []string
	disabled map[string]bool
	gate     chan struct{} // if set, a write waits for it to close (ZooKeeper unreachable)
	blocked  int           // writes waiting at the gate
	failures int           // the next writes that fail
	fired    []string      // what the producer told its fired func: "job@seconds after t0"
	ledgers  map[string]state.Ledger
	// disableAtWrite names a job that an operator disables as its next write is sent.
	disableAtWrite string
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

func (r *recorder) RecordFires(_ context.Context, job string, f state.Fires) ([]state.FireEntry, error) {
	r.mu.Lock()
	if gate := r.gate; gate != nil {
		r.blocked++
		r.mu.Unlock()
		<-gate
		r.mu.Lock()
		r.blocked--
	}
	defer r.mu.Unlock()
	if r.failures > 0 {
		r.failures--
		return nil, errors.New("ZooKeeper unavailable")
	}
	if r.disableAtWrite == job {
		r.disabled[job], r.disableAtWrite = true, ""
	}
	queues := slices.ContainsFunc(f.Entries, func(e state.FireEntry) bool { return e.Outcome == state.OutcomeFired })
	if f.App != "" && queues && (r.disabled[job] || r.disabled[f.App]) { // as the store's multi checks
		return nil, fmt.Errorf("%w: job %s", state.ErrDisabled, job)
	}
	out := slices.Clone(f.Entries)
	set := false
	for i := range out {
		switch {
		case out[i].Outcome != state.OutcomeFired:
		case f.Accumulate || out[i].CatchUp:
			r.adds = append(r.adds, job+":add")
		case !set:
			r.adds = append(r.adds, job+":set")
			set = true
		default:
			out[i].Outcome, out[i].Reason = state.OutcomeMerged, state.ReasonMergedQueued
		}
	}
	l := r.ledgers[job]
	if !f.Last.IsZero() {
		if !f.Last.After(l.Last) {
			return nil, fmt.Errorf("ledger of %s moved back from %v to %v", job, l.Last, f.Last)
		}
		l.Last = f.Last
	}
	if !f.From.IsZero() {
		if !f.From.After(l.From) {
			return nil, fmt.Errorf("ledger of %s: the cron changed at %v, then at %v", job, l.From, f.From)
		}
		l.From = f.From
	}
	if !f.Last.IsZero() || !f.From.IsZero() {
		l.Cron, l.Zone = f.Cron, f.Zone
	}
	l.Fires = append(l.Fires, out...)
	r.ledgers[job] = l
	return out, nil
}

func (r *recorder) FireLedger(_ context.Context, job string) (state.Ledger, bool, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l, ok := r.ledgers[job]
	return l, ok, nil
}

// slots renders a job's ledger: "outcome@seconds after t0[xcount]".
func (r *recorder) slots(job string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, e := range r.ledgers[job].Fires {
		s := e.Outcome + "@" + e.Slot.Sub(t0).String()
		if e.Count != 1 {
			s += fmt.Sprintf("x%d", e.Count)
		}
		out = append(out, s)
	}
	return out
}

// ledger returns a job's ledger as written so far.
func (r *recorder) ledger(job string) state.Ledger {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ledgers[job]
}

func (r *recorder) last(job string) time.Time { return r.ledger(job).Last }

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
	rec := &recorder{disabled: map[string]bool{}, ledgers: map[string]state.Ledger{}}
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
	p.Put(context.Background(), job("every2s", "*/2 * * * * ?", "UTC", true))
	p.Put(context.Background(), job("tokyo10", "0 0 10 * * ?", "Asia/Tokyo", false)) // 01:00 UTC
	step(t, clock, rec, 2*time.Second, []string{"every2s:add"})
	step(t, clock, rec, 2*time.Second, []string{"every2s:add", "every2s:add"})
	// Up to 00:59:59.999 in one jump: the 2 s job fires once for all it missed on the way...
	step(t, clock, rec, time.Hour-4*time.Second-time.Millisecond, []string{"every2s:add", "every2s:add", "every2s:add"})
	// ...and at 01:00 UTC, 10:00 in Tokyo, both fire.
	step(t, clock, rec, time.Millisecond, []string{"every2s:add", "every2s:add", "every2s:add", "every2s:add", "tokyo10:set"})
}

func TestMissedFiresAreNotReplayed(t *testing.T) {
	p, clock, rec := start(t, t0)
	p.Put(context.Background(), job("j", "*/2 * * * * ?", "UTC", true))
	// Ten fires' worth of time passes in one jump (a long GC pause, a suspended VM): one fire.
	step(t, clock, rec, 20*time.Second, []string{"j:add"})
}

// A write that waits for ZooKeeper (the client reconnecting) does not stop the timer: the fires
// that fall meanwhile are written once it returns — with misfire each one, without it one.
func TestFiresDuringASlowWriteAreNotLost(t *testing.T) {
	p, clock, rec := start(t, t0)
	p.Put(context.Background(), job("add", "*/2 * * * * ?", "UTC", true))
	p.Put(context.Background(), job("set", "*/2 * * * * ?", "UTC", false))
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
	defer explain(t, func() string { return "adds " + fmtList(rec.got()) + ", fired " + fmtList(rec.firedSoFar()) })
	await.True(t, 5*time.Second, "adds "+fmtList(want), func() bool { return reflect.DeepEqual(rec.got(), want) })
	// The runs' cron times, for the schedule lag: each fire's with misfire, the earliest of
	// the fires a run stands for without it.
	fired := []string{"add@2s", "set@2s", "add@4s", "add@6s", "add@8s", "set@4s"}
	await.True(t, 5*time.Second, "fired "+fmtList(fired), func() bool { return reflect.DeepEqual(rec.firedSoFar(), fired) })
}

func TestDisabledAndRemovedJobsDoNotFire(t *testing.T) {
	p, clock, rec := start(t, t0)
	p.Put(context.Background(), job("off", "*/2 * * * * ?", "UTC", false))
	p.Put(context.Background(), job("gone", "*/2 * * * * ?", "UTC", false))
	p.Put(context.Background(), job("on", "*/2 * * * * ?", "UTC", false))
	rec.disabled["off"] = true
	p.Remove("gone")
	step(t, clock, rec, 2*time.Second, []string{"on:set"})
}

func TestTriggerOnlyAndDaemonJobsAreNotScheduled(t *testing.T) {
	p, _, _ := start(t, t0)
	p.Put(context.Background(), job("trigger-only", "", "UTC", false))
	d := job("daemon", "*/1 * * * * ?", "UTC", false)
	d.JobExecutionType = config.Daemon
	p.Put(context.Background(), d)
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

// A takeover: the ledger's last slot is 20 s old, and ten slots of a 2 s cron fell since. Each
// policy decides them at once, and the ledger moves to the latest slot.
func TestTakeoverAppliesTheMisfirePolicy(t *testing.T) {
	p, clock, rec := start(t, t0)
	every2 := "*/2 * * * * ?"
	for _, name := range []string{"skip", "once", "all", "other-cron"} {
		rec.ledgers[name] = state.Ledger{Cron: every2, Zone: "UTC", Last: t0.Add(-20 * time.Second)}
	}
	rec.ledgers["other-cron"] = state.Ledger{Cron: "*/5 * * * * ?", Zone: "UTC", Last: t0.Add(-20 * time.Second)}
	skip, once, all, other := job("skip", every2, "UTC", false), job("once", every2, "UTC", true), job("all", every2, "UTC", false), job("other-cron", every2, "UTC", true)
	all.MisfirePolicy = config.FireAll
	for _, j := range []config.Job{skip, once, all, other} {
		if err := p.Put(context.Background(), j); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string][]string{
		"skip": {"skipped@-18sx10"},
		"once": {"merged@-18sx9", "fired@0s"},
		"all":  {"fired@-18s", "fired@-16s", "fired@-14s", "fired@-12s", "fired@-10s", "fired@-8s", "fired@-6s", "fired@-4s", "fired@-2s", "fired@0s"},
	}
	await.True(t, 5*time.Second, "the missed slots decided", func() bool {
		for job, w := range want {
			if !reflect.DeepEqual(rec.slots(job), w) {
				return false
			}
		}
		return true
	})
	for job := range want {
		if !rec.last(job).Equal(t0) {
			t.Errorf("%s: ledger's last slot %v; want %v", job, rec.last(job), t0)
		}
	}
	adds := map[string]int{}
	for _, a := range rec.got() {
		adds[a]++
	}
	if w := map[string]int{"once:add": 1, "all:add": 10}; !reflect.DeepEqual(adds, w) {
		t.Errorf("runs asked for: %v; want %v", adds, w)
	}
	// A ledger of another cron says nothing of this one's slots: it starts from now.
	if got := rec.slots("other-cron"); len(got) != 0 {
		t.Errorf("a ledger of another cron was caught up: %v", got)
	}
	// From here on the slots are on time, one by one.
	await.True(t, 5*time.Second, "producer waiting", func() bool { return clock.waiting() > 0 })
	clock.advance(2 * time.Second)
	await.True(t, 5*time.Second, "the next slot fires on time", func() bool {
		s := rec.slots("skip")
		return len(s) == 2 && s[1] == "fired@2s"
	})
	// fireAll is for the missed slots: without misfire, the slot on time sets the count to one
	// run (merging into one queued) instead of adding a run to the catch-up ones.
	await.True(t, 5*time.Second, "all's slot on time sets the count", func() bool {
		adds := map[string]int{}
		for _, a := range rec.got() {
			adds[a]++
		}
		return adds["all:add"] == 10 && adds["all:set"] == 1
	})
}

// A takeover between two slots misses none: the first slot after it falls while the new
// leader runs, so it is on time and fires whatever the misfire policy. (Found by the soak: every
// job skipped its first slot after a takeover, so nothing ran for a whole cron period.)
func TestTheFirstSlotAfterATakeoverIsOnTime(t *testing.T) {
	p, clock, rec := start(t, t0.Add(time.Second))
	every2 := "*/2 * * * * ?"
	for _, name := range []string{"skip", "once"} {
		rec.ledgers[name] = state.Ledger{Cron: every2, Zone: "UTC", Last: t0}
	}
	for _, j := range []config.Job{job("skip", every2, "UTC", false), job("once", every2, "UTC", true)} {
		if err := p.Put(context.Background(), j); err != nil {
			t.Fatal(err)
		}
	}
	await.True(t, 5*time.Second, "producer waiting", func() bool { return clock.waiting() > 0 })
	clock.advance(time.Second)
	for _, name := range []string{"skip", "once"} {
		await.True(t, 5*time.Second, name+"'s first slot after the takeover fires on time", func() bool {
			return reflect.DeepEqual(rec.slots(name), []string{"fired@2s"})
		})
	}
}

// A changed cron: the old cron's slots that passed are not decided again, its later ones never,
// and the first slot of the new cron after the change is the next fire. The ledger takes the
// change at once, its last slot staying a real one, so a leader that takes over before the new
// cron's first slot resumes from the change and decides the new cron's missed slots by the
// policy, instead of losing them unrecorded.
func TestCronChangeFiresTheNewCronFromTheChange(t *testing.T) {
	p, clock, rec := start(t, t0)
	j := job("j", "*/10 * * * * ?", "UTC", false)
	j.MisfirePolicy = config.FireAll
	p.Put(context.Background(), j)
	// Without misfire a slot on time sets the count to one run (fireAll is for missed slots).
	step(t, clock, rec, 10*time.Second, []string{"j:set"}) // 10 s
	await.True(t, 5*time.Second, "producer waiting", func() bool { return clock.waiting() > 0 })
	clock.advance(3 * time.Second) // 13 s: the change
	j.Cron = "*/2 * * * * ?"
	p.Put(context.Background(), j)
	await.True(t, 5*time.Second, "the ledger takes the new cron from the change", func() bool {
		l := rec.ledger("j")
		return l.Cron == j.Cron && l.From.Equal(t0.Add(13*time.Second)) && l.Last.Equal(t0.Add(10*time.Second))
	})
	step(t, clock, rec, time.Second, []string{"j:set", "j:set"}) // 14 s, the new cron's first slot after the change
	if got, want := rec.slots("j"), []string{"fired@10s", "fired@14s"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ledger %v; want %v (not the new cron's 12 s, before the change)", got, want)
	}

	// Another change at 15 s, and the leader dies before the new cron's first slot (18 s); the
	// next one takes over at 21 s on the same ledger.
	await.True(t, 5*time.Second, "producer waiting", func() bool { return clock.waiting() > 0 })
	clock.advance(time.Second)
	j.Cron = "*/3 * * * * ?"
	p.Put(context.Background(), j)
	await.True(t, 5*time.Second, "the ledger takes the second change", func() bool { return rec.ledger("j").Cron == j.Cron })
	if !rec.last("j").Equal(t0.Add(14 * time.Second)) {
		t.Fatalf("last slot %v; want 14 s, a real slot", rec.last("j"))
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	p2 := New(rec, &fakeClock{now: t0.Add(21 * time.Second)}, log, rec.firedTimes)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p2.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if err := p2.Put(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	// fireAll: one run per missed slot of the new cron after the change (18 s, 21 s), none of
	// the old one's (16 s, 18 s, 20 s).
	want := []string{"fired@10s", "fired@14s", "fired@18s", "fired@21s"}
	await.True(t, 5*time.Second, "the missed slots since the change decided", func() bool { return reflect.DeepEqual(rec.slots("j"), want) })
	if !rec.last("j").Equal(t0.Add(21 * time.Second)) {
		t.Errorf("last slot %v; want 21 s", rec.last("j"))
	}
}

// The old cron's slots that are due when the change lands (the producer's timer running late)
// are decided then, by the old options, before the change: none is lost.
func TestCronChangeDecidesTheOldCronsDueSlots(t *testing.T) {
	clock := &fakeClock{now: t0}
	rec := &recorder{disabled: map[string]bool{}, ledgers: map[string]state.Ledger{}}
	log := logrus.New()
	log.SetOutput(io.Discard)
	p := New(rec, clock, log, rec.firedTimes)
	j := job("j", "*/10 * * * * ?", "UTC", true)
	if err := p.Put(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	// The producer's loop is not running: its timer is late for 10 s and 20 s when the change
	// lands at 20.4 s.
	clock.advance(20400 * time.Millisecond)
	j.Cron = "*/2 * * * * ?"
	if err := p.Put(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- p.Run(ctx) }()
	defer func() { cancel(); <-done }()
	// fireOnce (misfire): 20 s is the slot on time, 10 s was jumped over and merges into it.
	want := []string{"merged@10s", "fired@20s"}
	await.True(t, 5*time.Second, "the old cron's due slots decided", func() bool { return reflect.DeepEqual(rec.slots("j"), want) })
	if l := rec.ledger("j"); l.Cron != j.Cron || !l.Last.Equal(t0.Add(20*time.Second)) || !l.From.Equal(t0.Add(20400*time.Millisecond)) {
		t.Fatalf("ledger cron %q last %v from %v; want the new cron from 20.4 s, last 20 s", l.Cron, l.Last, l.From)
	}
	step(t, clock, rec, 1600*time.Millisecond, []string{"j:add", "j:add"}) // 22 s: the new cron's
	if got, want := rec.slots("j"), []string{"merged@10s", "fired@20s", "fired@22s"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ledger %v; want %v", got, want)
	}
}

// A job whose cron is taken away (trigger only) has its due slots decided and the ledger told:
// when the same cron comes back it starts afresh, rather than catching up the time it was not
// scheduled as if no instance had led.
func TestCronRemovedThenPutBackDoesNotCatchUp(t *testing.T) {
	p, clock, rec := start(t, t0)
	j := job("j", "*/2 * * * * ?", "UTC", true)
	p.Put(context.Background(), j)
	step(t, clock, rec, 2*time.Second, []string{"j:add"}) // 2 s
	await.True(t, 5*time.Second, "producer waiting", func() bool { return clock.waiting() > 0 })
	clock.advance(time.Second) // 3 s
	off := j
	off.Cron = ""
	p.Put(context.Background(), off)
	await.True(t, 5*time.Second, "the ledger says the job has no cron from 3 s", func() bool {
		l := rec.ledger("j")
		return l.Cron == "" && l.From.Equal(t0.Add(3*time.Second))
	})
	clock.advance(20 * time.Second) // 23 s: ten slots that were not the job's
	p.Put(context.Background(), j)
	step(t, clock, rec, time.Second, []string{"j:add", "j:add"}) // 24 s, on time
	if got, want := rec.slots("j"), []string{"fired@2s", "fired@24s"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ledger %v; want %v", got, want)
	}
}

// A write ZooKeeper refuses is tried again, before the slots decided after it: the ledger never
// moves back and no slot is lost.
func TestFailedWritesAreTriedAgainInOrder(t *testing.T) {
	p, clock, rec := start(t, t0)
	rec.mu.Lock()
	rec.failures = 2
	rec.mu.Unlock()
	p.Put(context.Background(), job("j", "*/2 * * * * ?", "UTC", true))
	for range 3 {
		await.True(t, 5*time.Second, "producer waiting", func() bool { return clock.waiting() > 0 })
		clock.advance(2 * time.Second)
	}
	want := []string{"fired@2s", "fired@4s", "fired@6s"}
	await.True(t, 10*time.Second, "every slot written once", func() bool { return reflect.DeepEqual(rec.slots("j"), want) })
	if !rec.last("j").Equal(t0.Add(6 * time.Second)) {
		t.Errorf("last slot %v; want 6 s", rec.last("j"))
	}
}

// The slots of a disabled job are skipped, with the reason, and the ledger moves on: enabling it
// later does not catch them up.
func TestDisabledJobsSlotsAreSkippedInTheLedger(t *testing.T) {
	p, clock, rec := start(t, t0)
	rec.disabled["off"] = true
	p.Put(context.Background(), job("off", "*/2 * * * * ?", "UTC", true))
	step(t, clock, rec, 2*time.Second, nil)
	await.True(t, 5*time.Second, "the slot skipped", func() bool { return reflect.DeepEqual(rec.slots("off"), []string{"skipped@2s"}) })
	if reason := rec.ledger("off").Fires[0].Reason; reason != ReasonDisabled {
		t.Errorf("reason %q; want %q", reason, ReasonDisabled)
	}
}

// A job disabled between the producer's read of its disable state and its write queues no
// run: the write fails, and the slot is recorded as skipped on the next try.
func TestASlotRacingADisableQueuesNoRun(t *testing.T) {
	p, clock, rec := start(t, t0)
	rec.mu.Lock()
	rec.disableAtWrite = "racing"
	rec.mu.Unlock()
	p.Put(context.Background(), job("racing", "*/2 * * * * ?", "UTC", true))
	await.True(t, 5*time.Second, "producer waiting", func() bool { return clock.waiting() > 0 })
	clock.advance(2 * time.Second)
	await.True(t, 10*time.Second, "the slot skipped", func() bool { return reflect.DeepEqual(rec.slots("racing"), []string{"skipped@2s"}) })
	if adds := rec.got(); len(adds) != 0 {
		t.Fatalf("runs queued %v; want none for a job disabled as its slot was written", adds)
	}
}

func TestOptions(t *testing.T) {
	j := job("j", "* * * * * ?", "UTC", true)
	j.StartingDeadline = 30
	if o := Options(j); o.Policy != schedule.FireOnce || o.Deadline != 30*time.Second {
		t.Errorf("Options = %+v", o)
	}
}

// A Change writes the old cron's due slots before its update; an update that fails leaves
// the old cron in effect, and one that succeeds fires the new cron from the change.
func TestChangeWritesTheOldCronsSlotsFirstAndKeepsItOnAFailedUpdate(t *testing.T) {
	p, clock, rec := start(t, t0)
	ctx := context.Background()
	j := job("j", "*/10 * * * * ?", "UTC", true)
	p.Put(ctx, j)
	await.True(t, 5*time.Second, "producer waiting", func() bool { return clock.waiting() > 0 })
	clock.advance(10500 * time.Millisecond) // 10.5 s: the slot at 10 s is due, the timer not yet run
	next := j
	next.Cron = "*/2 * * * * ?"
	var seen []string
	failed := errors.New("the update's multi was refused")
	err := p.Change(ctx, next, func(from time.Time) error {
		seen = rec.slots("j") // what was written before the update
		return failed
	})
	if !errors.Is(err, failed) || !reflect.DeepEqual(seen, []string{"fired@10s"}) {
		t.Fatalf("Change = %v, the ledger before the update %v; want the update's error, after fired@10s", err, seen)
	}
	step(t, clock, rec, 9500*time.Millisecond, []string{"j:add", "j:add"}) // 20 s: the old cron's slot
	var from time.Time
	if err := p.Change(ctx, next, func(f time.Time) error { from = f; return nil }); err != nil || !from.Equal(t0.Add(20*time.Second)) {
		t.Fatalf("Change = %v from %v; want nil from 20 s", err, from)
	}
	step(t, clock, rec, 2*time.Second, []string{"j:add", "j:add", "j:add"}) // 22 s: the new cron's
	if got, want := rec.slots("j"), []string{"fired@10s", "fired@20s", "fired@22s"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ledger %v; want %v", got, want)
	}
}

// A cron change writes the job's config and ledger while the other jobs' timer goes on: its
// writes may wait for ZooKeeper (the client reconnecting, up to a session timeout), and a fire
// decided that much later could be skipped by its job's starting deadline.
func TestAChangeWaitingForZooKeeperHoldsUpNoOtherJobsFire(t *testing.T) {
	p, clock, rec := start(t, t0)
	ctx := context.Background()
	p.Put(ctx, job("other", "*/2 * * * * ?", "UTC", true))
	j := job("j", "*/10 * * * * ?", "UTC", true)
	p.Put(ctx, j)
	await.True(t, 5*time.Second, "producer waiting", func() bool { return clock.waiting() > 0 })
	next := j
	next.Cron = "*/3 * * * * ?"
	writing, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	let := func() { once.Do(func() { close(release) }) }
	defer let() // a failed check must not leave the producer blocked for the cleanup
	changed := make(chan error, 1)
	go func() {
		changed <- p.Change(ctx, next, func(time.Time) error {
			close(writing)
			<-release // the config's write waits for ZooKeeper
			return nil
		})
	}()
	<-writing
	clock.advance(2 * time.Second)
	await.True(t, 5*time.Second, "the other job fired while the change waits", func() bool {
		return reflect.DeepEqual(rec.got(), []string{"other:add"})
	})
	let()
	if err := <-changed; err != nil {
		t.Fatalf("Change: %v", err)
	}
	step(t, clock, rec, time.Second, []string{"other:add", "j:add"}) // 3 s: the new cron's first slot
}
