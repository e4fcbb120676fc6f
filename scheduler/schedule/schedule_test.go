package schedule

import (
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/cron"
)

func parse(t testing.TB, expr string) *cron.Schedule {
	t.Helper()
	c, err := cron.Parse(expr)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

var t0 = time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)

func at(sec float64) time.Time { return t0.Add(time.Duration(sec * float64(time.Second))) }

// show renders a decision compactly: "fired@20 merged@2-18x9(reason)".
func show(d Decision) string {
	var parts []string
	for _, s := range d.Slots {
		p := fmt.Sprintf("%s@%v", s.Outcome, s.First.Sub(t0).Seconds())
		if !s.Last.Equal(s.First) {
			p += fmt.Sprintf("-%v", s.Last.Sub(t0).Seconds())
		}
		if s.Count != 1 {
			p += fmt.Sprintf("x%d", s.Count)
		}
		if s.Reason != "" {
			p += "(" + strings.SplitN(s.Reason, " ", 2)[0] + ")"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, " ")
}

// A 20 s leaderless window of a cron that fires every 2 s, the ledger's last slot at 0 s: what
// each policy and deadline makes of the ten slots that fell.
func TestPlanTakeover(t *testing.T) {
	every2 := parse(t, "*/2 * * * * ?")
	cases := []struct {
		name  string
		o     Options
		want  string
		fires int
	}{
		{"skip", Options{Policy: Skip}, "skipped@2-20x10(missed)", 0},
		{"fireOnce", Options{Policy: FireOnce}, "merged@2-18x9(missed) fired@20", 1},
		{"fireAll", Options{Policy: FireAll}, "fired@2 fired@4 fired@6 fired@8 fired@10 fired@12 fired@14 fired@16 fired@18 fired@20", 10},
		{"fireAll capped", Options{Policy: FireAll, Cap: 3}, "skipped@2-14x7(beyond) fired@16 fired@18 fired@20", 3},
		{"fireOnce with a deadline", Options{Policy: FireOnce, Deadline: 5 * time.Second}, "skipped@2-14x7(missed) merged@16-18x2(missed) fired@20", 1},
		{"fireAll with a deadline", Options{Policy: FireAll, Deadline: 5 * time.Second}, "skipped@2-14x7(missed) fired@16 fired@18 fired@20", 3},
		{"skip with a deadline", Options{Policy: Skip, Deadline: 5 * time.Second}, "skipped@2-14x7(missed) skipped@16-20x3(missed)", 0},
		{"a deadline shorter than the last slot's age", Options{Policy: FireOnce, Deadline: 100 * time.Millisecond}, "skipped@2-20x10(missed)", 0},
		{"a deadline longer than the window", Options{Policy: FireAll, Deadline: time.Hour, Cap: 2}, "skipped@2-16x8(beyond) fired@18 fired@20", 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Plan(every2, time.UTC, at(0), at(20.3), c.o, false)
			if got := show(d); got != c.want {
				t.Errorf("slots: %s\nwant:  %s", got, c.want)
			}
			if len(d.Fires) != c.fires {
				t.Errorf("%d fires; want %d", len(d.Fires), c.fires)
			}
			if !d.Last.Equal(at(20)) {
				t.Errorf("last handled %v; want %v", d.Last, at(20))
			}
			total := 0
			for _, s := range d.Slots {
				total += s.Count
			}
			if total != 10 {
				t.Errorf("%d slots decided; want each of the 10 once", total)
			}
		})
	}
	if d := Plan(every2, time.UTC, at(0), at(20.3), Options{Policy: Skip}, false); d.Slots[0].Reason != ReasonPolicySkip {
		t.Errorf("skip's reason %q; want %q", d.Slots[0].Reason, ReasonPolicySkip)
	}
	if d := Plan(every2, time.UTC, at(0), at(20.3), Options{Policy: FireOnce, Deadline: 5 * time.Second}, false); d.Slots[0].Reason != ReasonDeadline {
		t.Errorf("the deadline's reason %q; want %q", d.Slots[0].Reason, ReasonDeadline)
	}
}

// While the producer runs, the latest slot is on time and fires whatever the policy; slots a
// sleeping timer jumped over are decided by the policy.
func TestPlanLive(t *testing.T) {
	every := parse(t, "* * * * * ?")
	cases := []struct {
		name     string
		from     float64
		now      float64
		o        Options
		want     string
		last     float64
		lastSame bool
	}{
		{"nothing due", 0, 0.9, Options{Policy: Skip}, "", 0, true},
		{"on time", 0, 1.01, Options{Policy: Skip}, "fired@1", 1, false},
		{"on time, late by 0.9 s", 0, 1.9, Options{Policy: FireOnce}, "fired@1", 1, false},
		{"a jump, skip", 0, 5.2, Options{Policy: Skip}, "skipped@1-4x4(missed) fired@5", 5, false},
		{"a jump, fireOnce", 0, 5.2, Options{Policy: FireOnce}, "merged@1-4x4(missed) fired@5", 5, false},
		{"a jump, fireAll", 0, 5.2, Options{Policy: FireAll}, "fired@1 fired@2 fired@3 fired@4 fired@5", 5, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			d := Plan(every, time.UTC, at(c.from), at(c.now), c.o, true)
			if got := show(d); got != c.want {
				t.Errorf("slots: %q\nwant:  %q", got, c.want)
			}
			if !d.Last.Equal(at(c.last)) {
				t.Errorf("last handled %v; want %v", d.Last, at(c.last))
			}
		})
	}
	d := Plan(every, time.UTC, at(0), at(5.2), Options{Policy: FireOnce}, true)
	if r := d.Slots[0].Reason; !strings.Contains(r, "clock jump") || !strings.Contains(r, at(5).Format(time.RFC3339)) {
		t.Errorf("a jump's merge reason %q; want the clock jump and the slot it merged into", r)
	}
}

// countingCron counts the slots asked of a Cron.
type countingCron struct {
	Cron
	n int
}

func (c *countingCron) Next(t time.Time) time.Time {
	c.n++
	return c.Cron.Next(t)
}

// A two-month outage of an every-second cron (5 million slots) is decided in a few runs, with
// the first and last slot of each exact, by asking the cron for no more slots than the count
// limit and the runs' ends need (it was bounded by the wall clock, 2 s for four plans, which a
// busy machine or a slower, zone-exact Next could pass without walking one slot more).
func TestPlanLongOutage(t *testing.T) {
	every := parse(t, "* * * * * ?")
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := time.Date(2026, 3, 1, 0, 0, 0, 500e6, time.UTC)
	for _, o := range []Options{{Policy: Skip}, {Policy: FireOnce}, {Policy: FireAll}, {Policy: FireAll, Deadline: time.Hour}} {
		counted := &countingCron{Cron: every}
		d := Plan(counted, time.UTC, from, now, o, false)
		// The count limit, the slots within the deadline (each a fire of its own) and a few
		// per fire and run end.
		if most := CountLimit + int(o.Deadline/time.Second) + 4*DefaultCap; counted.n > most {
			t.Errorf("%+v: the plan asked the cron for %d slots; want at most %d (the count limit, the deadline's slots and the fires), not the outage's 5 million", o, counted.n, most)
		}
		if len(d.Slots) > DefaultCap+2 {
			t.Errorf("%+v: %d runs of slots; want at most %d", o, len(d.Slots), DefaultCap+2)
		}
		if first := d.Slots[0]; !first.First.Equal(from.Add(time.Second)) || first.Count != CountLimit || !first.AtLeast {
			t.Errorf("%+v: first run %+v; want from %v, counted to the limit", o, first, from.Add(time.Second))
		}
		if !d.Last.Equal(now.Truncate(time.Second)) || !d.Slots[len(d.Slots)-1].Last.Equal(d.Last) {
			t.Errorf("%+v: last %v; want %v", o, d.Last, now.Truncate(time.Second))
		}
		if o.Policy == FireAll && len(d.Fires) != DefaultCap {
			t.Errorf("%+v: %d fires; want the cap, %d", o, len(d.Fires), DefaultCap)
		}
		for i := 1; i < len(d.Slots); i++ { // the runs are contiguous: no slot twice, none left out
			if want := every.Next(d.Slots[i-1].Last); !d.Slots[i].First.Equal(want) {
				t.Errorf("%+v: run %d starts %v; want %v", o, i, d.Slots[i].First, want)
			}
		}
	}
}

// Before agrees with walking the cron forward, for expressions dense and sparse, in zones with
// daylight saving time.
func TestBeforeMatchesEnumeration(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	day := 24 * time.Hour
	// Each with a look-back that surely holds a slot, for the brute force.
	exprs := []struct {
		expr string
		back time.Duration
	}{{"* * * * * ?", time.Minute}, {"*/7 * * * * ?", time.Minute}, {"0 30 2 * * ?", 3 * day},
		{"0 15 10 ? * 6L", 40 * day}, {"0 0 12 LW * ?", 40 * day}, {"0 0 12 ? * 2#1", 40 * day}, {"0 0/5 9-17 ? * MON-FRI", 5 * day}}
	rng := rand.New(rand.NewSource(19))
	for _, e := range exprs {
		expr := e.expr
		c := parse(t, expr)
		for _, loc := range []*time.Location{time.UTC, ny} {
			start := time.Date(2026, 1, 1, 0, 0, 0, 0, loc)
			for range 40 {
				x := start.Add(time.Duration(rng.Int63n(int64(400 * day))))
				if rng.Intn(2) == 0 {
					x = x.Truncate(time.Second)
				}
				// Brute force: walk from far enough back.
				var want time.Time
				for s := c.Next(x.Add(-e.back)); !s.IsZero() && s.Before(x); s = c.Next(s) {
					want = s
				}
				if got := Before(c, x); !got.Equal(want) {
					t.Errorf("%q in %s: Before(%v) = %v; want %v", expr, loc, x, got, want)
				}
			}
		}
	}
}

func TestBeforeEdges(t *testing.T) {
	yearly := parse(t, "0 0 0 1 1 ? 2030")
	slot := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	if got := Before(yearly, time.Date(2029, 6, 1, 0, 0, 0, 0, time.UTC)); !got.IsZero() {
		t.Errorf("before the only slot: %v; want none", got)
	}
	if got := Before(yearly, slot); !got.IsZero() {
		t.Errorf("Before is strict: %v; want none", got)
	}
	if got := AtOrBefore(yearly, slot); !got.Equal(slot) {
		t.Errorf("AtOrBefore(the slot) = %v; want it", got)
	}
	if got := Before(yearly, time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC)); !got.Equal(slot) {
		t.Errorf("69 years on: %v; want %v", got, slot)
	}
	// Plan of a cron with no slot left: nothing, and the ledger stays where it was.
	if d := Plan(yearly, time.UTC, slot, slot.AddDate(5, 0, 0), Options{Policy: FireAll}, false); len(d.Slots) != 0 || !d.Last.Equal(slot) {
		t.Errorf("a spent cron: %+v", d)
	}
}

func TestLogicalTime(t *testing.T) {
	hourly, every10 := parse(t, "0 0 * * * ?"), parse(t, "0 */10 * * * ?")
	shanghai, _ := time.LoadLocation("Asia/Shanghai")
	cases := []struct {
		dep  Cron
		zone *time.Location
		slot time.Time
		want time.Time
	}{
		{hourly, time.UTC, t0.Add(25 * time.Minute), t0},
		{hourly, time.UTC, t0, t0}, // at or before: the same instant counts
		{every10, time.UTC, t0.Add(59 * time.Minute), t0.Add(50 * time.Minute)},
		{hourly, shanghai, t0.Add(25 * time.Minute), t0},
	}
	for _, c := range cases {
		if got := LogicalTime(c.dep, c.zone, c.slot); !got.Equal(c.want) {
			t.Errorf("LogicalTime(%v) = %v; want %v", c.slot, got, c.want)
		}
	}
}

func TestBackoff(t *testing.T) {
	cases := []struct {
		attempt   int
		base, max time.Duration
		want      time.Duration
	}{
		{2, time.Second, 0, time.Second},
		{3, time.Second, 0, 2 * time.Second},
		{4, time.Second, 0, 4 * time.Second},
		{4, time.Second, 3 * time.Second, 3 * time.Second},
		{200, time.Second, time.Minute, time.Minute},
		{2, 5 * time.Second, time.Second, time.Second},
	}
	for _, c := range cases {
		if got := Backoff(c.attempt, c.base, c.max); got != c.want {
			t.Errorf("Backoff(%d, %v, %v) = %v; want %v", c.attempt, c.base, c.max, got, c.want)
		}
	}
}

// A change of cron or zone, then a leader change: the old cron's slots due at the change (the
// producer running late) are decided then, the ledger's mark takes the new cron from the change,
// and a leader that takes over resumes from it. Every slot of the old cron up to the change and
// of the new one after it is decided exactly once, and no other.
func TestCronChangeThenTakeover(t *testing.T) {
	cases := []struct {
		name               string
		oldCron, oldZone   string
		newCron, newZone   string
		last               time.Time // the ledger's last slot before the change
		live               bool      // the producer had decided a slot on time before the change
		change, takeover   time.Time
		o                  Options
		atChange, atResume string
	}{
		{"takeover inside the window, fireAll", "*/10 * * * * ?", "UTC", "*/2 * * * * ?", "UTC", at(10), true, at(13), at(21),
			Options{Policy: FireAll}, "", "fired@14 fired@16 fired@18 fired@20"},
		{"takeover inside the window, fireOnce", "*/10 * * * * ?", "UTC", "*/2 * * * * ?", "UTC", at(10), true, at(13), at(21),
			Options{Policy: FireOnce}, "", "merged@14-18x3(missed) fired@20"},
		{"takeover inside the window, skip", "*/10 * * * * ?", "UTC", "*/2 * * * * ?", "UTC", at(10), true, at(13), at(21),
			Options{Policy: Skip}, "", "skipped@14-20x4(missed)"},
		{"an old slot due at the change, the producer live", "*/10 * * * * ?", "UTC", "*/2 * * * * ?", "UTC", at(10), true, at(20.4), at(23),
			Options{Policy: FireOnce}, "fired@20", "fired@22"},
		{"old slots due at the change, late after a takeover", "*/10 * * * * ?", "UTC", "*/2 * * * * ?", "UTC", at(0), false, at(20.4), at(23),
			Options{Policy: FireOnce}, "merged@10(missed) fired@20", "fired@22"},
		{"old slots due at the change, skip", "*/10 * * * * ?", "UTC", "*/2 * * * * ?", "UTC", at(0), true, at(20.4), at(23),
			Options{Policy: Skip}, "skipped@10(missed) fired@20", "skipped@22(missed)"},
		{"a new cron with no slot before the takeover", "*/2 * * * * ?", "UTC", "0 0 0 1 1 ? 2099", "UTC", at(10), true, at(11), at(30),
			Options{Policy: FireAll}, "", ""},
		{"a zone change: Kathmandu's hours fall at :15 UTC", "0 0 * * * ?", "UTC", "0 0 * * * ?", "Asia/Kathmandu", at(0), true, at(300), at(8400),
			Options{Policy: FireAll}, "", "fired@900 fired@4500 fired@8100"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			oldC, newC := parse(t, c.oldCron), parse(t, c.newCron)
			oldLoc, _ := time.LoadLocation(c.oldZone)
			newLoc, _ := time.LoadLocation(c.newZone)
			// At the change: the old cron's due slots, then the mark.
			d := Plan(oldC, oldLoc, c.last, c.change, c.o, c.live)
			if got := show(d); got != c.atChange {
				t.Errorf("at the change: %s\nwant:          %s", got, c.atChange)
			}
			m := Mark{Cron: c.newCron, Zone: c.newZone, Last: d.Last, From: c.change}
			if !d.Last.IsZero() && (d.Last.After(c.change) || (len(d.Slots) > 0 && !oldC.Next(d.Last.Add(-time.Nanosecond)).Equal(d.Last))) {
				t.Errorf("the ledger's last %v is not a slot of the old cron up to the change", d.Last)
			}
			// The takeover.
			from, missed := Resume(m, c.newCron, c.newZone, c.takeover)
			if !missed || !from.Equal(c.change) {
				t.Fatalf("resumes from %v (missed %v); want the change, %v", from, missed, c.change)
			}
			r := Plan(newC, newLoc, from, c.takeover, c.o, false)
			if got := show(r); got != c.atResume {
				t.Errorf("at the takeover: %s\nwant:            %s", got, c.atResume)
			}
			// Exactly the old cron's slots in (last, change] and the new one's in (change, takeover].
			want := countIn(oldC, oldLoc, c.last, c.change) + countIn(newC, newLoc, c.change, c.takeover)
			got := 0
			for _, s := range append(d.Slots, r.Slots...) {
				got += s.Count
			}
			if got != want {
				t.Errorf("%d slots decided; want %d, each once", got, want)
			}
		})
	}
}

func countIn(c Cron, loc *time.Location, from, to time.Time) int {
	n := 0
	for s := c.Next(from.In(loc)); !s.IsZero() && !s.After(to); s = c.Next(s) {
		n++
	}
	return n
}

// Where a producer begins a job's slots, from its ledger's mark.
func TestResume(t *testing.T) {
	now := at(100)
	cases := []struct {
		name   string
		m      Mark
		from   time.Time
		missed bool
	}{
		{"no ledger", Mark{}, now, false},
		{"the same cron: from the last slot", Mark{Cron: "c", Zone: "UTC", Last: at(10)}, at(10), true},
		{"a change after the last slot: from the change", Mark{Cron: "c", Zone: "UTC", Last: at(10), From: at(13)}, at(13), true},
		{"a slot of the new cron since the change: from it", Mark{Cron: "c", Zone: "UTC", Last: at(14), From: at(13)}, at(14), true},
		{"a change before any slot", Mark{Cron: "c", Zone: "UTC", From: at(13)}, at(13), true},
		{"another cron: from now", Mark{Cron: "other", Zone: "UTC", Last: at(10), From: at(13)}, now, false},
		{"another zone: from now", Mark{Cron: "c", Zone: "Asia/Tokyo", Last: at(10)}, now, false},
	}
	for _, c := range cases {
		from, missed := Resume(c.m, "c", "UTC", now)
		if !from.Equal(c.from) || missed != c.missed {
			t.Errorf("%s: Resume = %v, %v; want %v, %v", c.name, from, missed, c.from, c.missed)
		}
	}
}
