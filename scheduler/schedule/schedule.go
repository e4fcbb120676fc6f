// Package schedule decides what happens to a job's cron slots (issue 19): which fire, which merge
// into another run and which are skipped, and why. It is pure: the producer gives it the job's
// cron, the last slot the fire ledger says was handled and the time, and writes what it decides.
//
//	producer: ledger's last slot, now → schedule.Plan → Decision{Slots, Fires, Last} → one multi (ready + ledger)
//
// A long outage of a frequent cron is not enumerated slot by slot: a run of slots with one
// outcome is one Slots value (first, last, count), and its count is found by walking the cron
// only up to a budget (CountLimit); the first and last slot of every run are exact.
package schedule

import (
	"time"
)

// Cron is a parsed cron expression: the first slot strictly after t, in t's location, or the
// zero time when there is none. cron.Schedule is one.
type Cron interface {
	Next(t time.Time) time.Time
}

// Policy says what a takeover does with the slots that fell while no instance led.
type Policy string

// The misfire policies.
const (
	// FireOnce runs once for all the missed slots: the latest fires, the others merge into it.
	FireOnce Policy = "fireOnce"
	// FireAll runs once per missed slot, up to Options.Cap of the latest.
	FireAll Policy = "fireAll"
	// Skip runs none of them (Elastic-Job-Cloud 2.1.5's behaviour).
	Skip Policy = "skip"
)

// Valid reports whether p is one of the policies.
func (p Policy) Valid() bool { return p == FireOnce || p == FireAll || p == Skip }

// Outcome is what became of a slot; every slot ends in exactly one.
type Outcome string

// The outcomes.
const (
	Fired   Outcome = "fired"   // it made a run (queued, then launched)
	Merged  Outcome = "merged"  // it joined a run made by another slot or already queued
	Skipped Outcome = "skipped" // it made no run; Reason says why
)

// Reasons a slot is skipped or merged.
const (
	ReasonPolicySkip = "missed while no instance led (misfirePolicy skip)"
	ReasonDeadline   = "missed by more than startingDeadline"
	ReasonCap        = "beyond the fireAll catch-up cap"
	ReasonMergedOnce = "missed while no instance led; merged into the catch-up run (misfirePolicy fireOnce)"
	ReasonClockJump  = "missed while the producer's timer slept (clock jump)"
)

// DefaultCap is how many missed slots fireAll runs at most when the job sets no cap.
const DefaultCap = 100

// CountLimit is how many slots of one run are counted one by one; a run with more has
// Slots.AtLeast set and Count = CountLimit.
const CountLimit = 100_000

// Options are a job's misfire options.
type Options struct {
	Policy Policy
	// Deadline: a missed slot older than this (now − slot > Deadline) is skipped. 0: no deadline.
	Deadline time.Duration
	// Cap bounds fireAll's catch-up runs; 0 means DefaultCap.
	Cap int
}

// Slots is a run of consecutive slots with one outcome.
type Slots struct {
	First, Last time.Time
	Count       int
	AtLeast     bool // Count is a lower bound: the run had more than CountLimit slots
	Outcome     Outcome
	Reason      string
	// CatchUp marks a missed slot fireAll runs: it adds a run even where a slot on time would
	// merge into one already queued (misfire off).
	CatchUp bool
}

// Decision is what Plan decided for the slots in (from, now].
type Decision struct {
	Slots []Slots     // every slot, in order, in runs
	Fires []time.Time // the slots that make a run, in order (each is a Fired slot)
	Last  time.Time   // the latest slot decided; from when there was none
}

// Plan decides every slot of c in (from, now], evaluated in loc. live says the producer was
// running when the latest slot fell: that slot is on time and fires whatever the policy, and
// the slots before it were missed by a timer that slept (a clock jump). Otherwise every slot
// was missed while no instance led, and the policy decides them all.
func Plan(c Cron, loc *time.Location, from, now time.Time, o Options, live bool) Decision {
	from, now = from.In(loc), now.In(loc)
	d := Decision{Last: from}
	first := c.Next(from)
	if first.IsZero() || first.After(now) {
		return d
	}
	latest := AtOrBefore(c, now)
	d.Last = latest
	if !live {
		d.missed(c, first, latest, now, o, time.Time{})
		return d
	}
	if first.Before(latest) {
		d.missed(c, first, Before(c, latest), now, o, latest)
	}
	d.add(Slots{First: latest, Last: latest, Count: 1, Outcome: Fired})
	d.Fires = append(d.Fires, latest)
	return d
}

// missed decides the missed slots [first, last] (both slots of c). onTime is the live slot
// after them, or zero at a takeover.
func (d *Decision) missed(c Cron, first, last, now time.Time, o Options, onTime time.Time) {
	if o.Deadline > 0 {
		// The stale slots are those before now − Deadline: skipped, however many.
		cut := now.Add(-o.Deadline)
		if first.Before(cut) {
			staleLast := Before(c, cut)
			if staleLast.After(last) {
				staleLast = last
			}
			d.add(span(c, first, staleLast, Skipped, ReasonDeadline))
			if !staleLast.Before(last) {
				return
			}
			first = c.Next(staleLast)
		}
	}
	live := !onTime.IsZero()
	reason := ReasonPolicySkip
	if live {
		reason = ReasonClockJump
	}
	switch o.Policy {
	case FireAll:
		limit := o.Cap
		if limit <= 0 {
			limit = DefaultCap
		}
		// The latest limit slots fire; walk back from last rather than forward from first,
		// which may be millions of slots away.
		fire := []time.Time{last}
		for len(fire) < limit {
			p := Before(c, fire[len(fire)-1])
			if p.IsZero() || p.Before(first) {
				break
			}
			fire = append(fire, p)
		}
		oldest := fire[len(fire)-1]
		if oldest.After(first) {
			d.add(span(c, first, Before(c, oldest), Skipped, ReasonCap))
		}
		for i := len(fire) - 1; i >= 0; i-- {
			d.add(Slots{First: fire[i], Last: fire[i], Count: 1, Outcome: Fired, CatchUp: true})
			d.Fires = append(d.Fires, fire[i])
		}
	case FireOnce:
		if live {
			// The on-time slot after them fires, and stands for them.
			d.add(span(c, first, last, Merged, ReasonClockJump+"; merged into the run of "+onTime.Format(time.RFC3339)))
			return
		}
		if last.After(first) {
			d.add(span(c, first, Before(c, last), Merged, ReasonMergedOnce))
		}
		d.add(Slots{First: last, Last: last, Count: 1, Outcome: Fired})
		d.Fires = append(d.Fires, last)
	default: // Skip, and anything unknown: today's behaviour
		d.add(span(c, first, last, Skipped, reason))
	}
}

func (d *Decision) add(s Slots) { d.Slots = append(d.Slots, s) }

// span is the run of c's slots [first, last] with one outcome, counted up to CountLimit.
func span(c Cron, first, last time.Time, o Outcome, reason string) Slots {
	n, more := Count(c, first, last)
	return Slots{First: first, Last: last, Count: n, AtLeast: more, Outcome: o, Reason: reason}
}

// Count counts c's slots in [first, last], where first is a slot, walking at most CountLimit of
// them; more reports that there are more than that.
func Count(c Cron, first, last time.Time) (n int, more bool) {
	for t := first; !t.IsZero() && !t.After(last); t = c.Next(t) {
		if n == CountLimit {
			return n, true
		}
		n++
	}
	return n, false
}

// maxLookBack bounds the search for a previous slot: a cron without a slot in this long has
// none before (a year-bounded expression).
const maxLookBack = 200 * 365 * 24 * time.Hour

// Before returns c's latest slot strictly before x (in x's location), or the zero time if there
// is none. cronexpr has no Prev: the window before x doubles until it holds a slot, then a binary
// search over whole seconds finds the latest one. Quartz slots fall on whole seconds, and Next(t)
// < x holds exactly for the seconds t before that slot, so about 2·log2(window) Next calls.
func Before(c Cron, x time.Time) time.Time {
	loc := x.Location()
	hi := x.Truncate(time.Second)
	if hi.Before(x) {
		hi = hi.Add(time.Second) // the first whole second at or after x
	}
	below := func(sec int64) bool { // Next(sec) < x: a slot lies in (sec, x)
		n := c.Next(time.Unix(sec, 0).In(loc))
		return !n.IsZero() && n.Before(x)
	}
	top := hi.Unix()
	w := int64(1)
	for !below(top - w) {
		if time.Duration(w)*time.Second > maxLookBack {
			return time.Time{}
		}
		w *= 2
	}
	// below(top−w) holds; below(top) does not (Next(top) > top ≥ x). Find the smallest second s
	// with !below(s): the latest slot before x is s itself.
	lo, up := top-w, top
	for up-lo > 1 {
		mid := lo + (up-lo)/2
		if below(mid) {
			lo = mid
		} else {
			up = mid
		}
	}
	return time.Unix(up, 0).In(loc)
}

// AtOrBefore returns c's latest slot at or before t, or the zero time.
func AtOrBefore(c Cron, t time.Time) time.Time {
	return Before(c, t.Add(time.Nanosecond))
}

// Mark is what a job's fire ledger says of its schedule: the cron and zone the job is scheduled
// with, the latest slot handled (Last, always a real slot) and when that cron and zone took
// effect (From, zero when they have not changed since the ledger began).
type Mark struct {
	Cron, Zone string
	Last, From time.Time
}

// Resume says where a producer that starts scheduling a job (a takeover, a new job) begins. With
// a mark of the job's cron and zone it resumes from the later of Last and From, and the slots
// since then fell while no instance led (missed). Otherwise — no mark, one of another cron or
// zone (changed while no instance led, by a version that did not record the change), or one
// with neither time — it begins at now, missing nothing: the mark says nothing of this cron's
// slots.
func Resume(m Mark, cron, zone string, now time.Time) (from time.Time, missed bool) {
	if m.Cron != cron || m.Zone != zone {
		return now, false
	}
	from = m.Last
	if m.From.After(from) {
		from = m.From
	}
	if from.IsZero() {
		return now, false
	}
	return from, true
}
