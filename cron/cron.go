// Package cron parses Quartz cron expressions (the syntax Elastic-Job users write) and computes
// their fire times. It validates every field itself, then hands a normalised expression to
// github.com/hashicorp/cronexpr, whose behaviour on malformed input is undefined and whose
// conventions differ from Quartz: it reads six fields as "min … year" and numbers days of the
// week from 0 = Sunday, where Quartz reads six fields as "sec … day-of-week" and numbers them
// from 1 = Sunday. Ranges and steps are written out as lists of values, as Quartz takes them
// (a range may wrap around), and fire times are found by matching wall clocks in UTC, then
// placed in the job's zone (Schedule.Next): cronexpr's own walk of a zone's clock goes wrong
// across daylight-saving changes.
package cron

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/cronexpr"
)

// ErrInvalid is wrapped by every parse error.
var ErrInvalid = errors.New("invalid cron expression")

// Schedule is a parsed expression.
type Schedule struct {
	text string
	expr *cronexpr.Expression
	// fromLast, if not negative, is n of a day-of-month "L-n": the n-th day before the month's
	// last, which cronexpr cannot express. expr then matches every day, and Next keeps the
	// days that are that one.
	fromLast int
}

// String returns the expression as it was given.
func (s *Schedule) String() string { return s.text }

// Next returns the first fire time strictly after t, evaluated in t's location, or the zero
// time when the expression never fires again.
//
// The expression is matched against wall clocks, as Quartz matches it against a Calendar's
// fields, and each matching wall clock becomes an instant in t's location. cronexpr walks the
// clock of that location itself, and across a daylight-saving change it went wrong: on a day
// whose midnight is skipped (Beirut, Havana, Santiago, Cairo) it ran into the next day without
// checking the day again, so a Saturday job also fired on Sunday; a time in an hour that is
// repeated fired twice; and some past changes made it loop for ever. Walked in UTC, which has
// no changes, the fields are matched exactly; then a wall clock the change skips (02:30 where
// clocks go from 02:00 to 03:00) does not fire, and one the change repeats fires once, at its
// later instant (standard time), as Quartz, through Java's Calendar, fires it.
func (s *Schedule) Next(t time.Time) time.Time {
	loc := t.Location()
	w := wall(t)
	for {
		w = s.expr.Next(w)
		if w.IsZero() {
			return time.Time{}
		}
		if s.fromLast >= 0 {
			// The first instant of the day wanted, this month's or the next's, less a
			// nanosecond: cronexpr's Next is strictly after it.
			last := time.Date(w.Year(), w.Month()+1, 0, 0, 0, 0, 0, time.UTC).Day()
			switch day := last - s.fromLast; {
			case w.Day() < day:
				w = time.Date(w.Year(), w.Month(), day, 0, 0, 0, -1, time.UTC)
				continue
			case w.Day() > day:
				w = time.Date(w.Year(), w.Month()+1, 1, 0, 0, 0, -1, time.UTC)
				continue
			}
		}
		if at, ok := instant(w, loc); ok && at.After(t) {
			return at
		}
	}
}

// NextN returns up to n fire times after t, evaluated in t's location.
func (s *Schedule) NextN(t time.Time, n int) []time.Time {
	out := make([]time.Time, 0, n)
	for len(out) < n {
		t = s.Next(t)
		if t.IsZero() {
			break
		}
		out = append(out, t)
	}
	return out
}

// wall is t's wall clock in its location, as a time in UTC.
func wall(t time.Time) time.Time {
	return time.Date(t.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.UTC)
}

// instant is the latest instant whose wall clock in loc is w (a time in UTC), if there is one.
// Two are in an hour a daylight-saving change repeats; none in one it skips.
func instant(w time.Time, loc *time.Location) (time.Time, bool) {
	if loc == time.UTC {
		return w, true
	}
	// An instant x has wall clock w when x = w − offset(x). The offsets that may hold near w are
	// those in force a few hours either side of it: changes are an hour or two at most.
	guess := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), w.Nanosecond(), loc)
	var best time.Time
	for _, near := range []time.Time{guess, guess.Add(-3 * time.Hour), guess.Add(3 * time.Hour)} {
		_, off := near.Zone()
		x := w.Add(-time.Duration(off) * time.Second).In(loc)
		if wall(x).Equal(w) && x.After(best) {
			best = x
		}
	}
	return best, !best.IsZero()
}

type field struct {
	name     string
	min, max int
	names    map[string]int // three-letter names, upper case
	// shift is added to every value when translating to cronexpr's numbering.
	shift int
}

var (
	months = map[string]int{"JAN": 1, "FEB": 2, "MAR": 3, "APR": 4, "MAY": 5, "JUN": 6, "JUL": 7, "AUG": 8, "SEP": 9, "OCT": 10, "NOV": 11, "DEC": 12}
	days   = map[string]int{"SUN": 1, "MON": 2, "TUE": 3, "WED": 4, "THU": 5, "FRI": 6, "SAT": 7}

	second     = &field{name: "second", min: 0, max: 59}
	minute     = &field{name: "minute", min: 0, max: 59}
	hour       = &field{name: "hour", min: 0, max: 23}
	dayOfMonth = &field{name: "day-of-month", min: 1, max: 31}
	month      = &field{name: "month", min: 1, max: 12, names: months}
	dayOfWeek  = &field{name: "day-of-week", min: 1, max: 7, names: days, shift: -1}
	year       = &field{name: "year", min: 1970, max: 2099}
)

// Parse parses a Quartz expression: "sec min hour day-of-month month day-of-week [year]", with
// exactly one of day-of-month and day-of-week set to "?", as Quartz requires.
func Parse(text string) (*Schedule, error) {
	fs := strings.Fields(text)
	if len(fs) != 6 && len(fs) != 7 {
		return nil, fmt.Errorf("%w %q: want 6 or 7 fields (sec min hour day-of-month month day-of-week [year]), got %d", ErrInvalid, text, len(fs))
	}
	domQ, dowQ := fs[3] == "?", fs[5] == "?"
	if domQ == dowQ {
		return nil, fmt.Errorf("%w %q: exactly one of day-of-month and day-of-week must be '?'", ErrInvalid, text)
	}
	out := make([]string, 7)
	out[6] = "*"
	fromLast := -1
	if d, ok := strings.CutPrefix(strings.ToUpper(fs[3]), "L-"); ok {
		// Quartz takes "L-n" alone in its field, n from 0 to 30 (L-nW it takes too: not here).
		n, err := strconv.Atoi(d)
		if err != nil || d == "" || d[0] == '+' || n < 0 || n > 30 {
			return nil, fmt.Errorf("%w %q: day-of-month field %q: the offset after 'L-' must be 0 to 30 (L-nW is not supported)", ErrInvalid, text, fs[3])
		}
		fromLast, fs[3] = n, "*"
	}
	specs := []*field{second, minute, hour, dayOfMonth, month, dayOfWeek, year}
	for i, f := range fs {
		norm, err := specs[i].normalise(f)
		if err != nil {
			return nil, fmt.Errorf("%w %q: %v", ErrInvalid, text, err)
		}
		out[i] = norm
	}
	expr, err := cronexpr.Parse(strings.Join(out, " "))
	if err != nil {
		return nil, fmt.Errorf("%w %q: %v", ErrInvalid, text, err)
	}
	return &Schedule{text: text, expr: expr, fromLast: fromLast}, nil
}

// normalise validates one field and rewrites it with numbers in cronexpr's numbering.
func (f *field) normalise(s string) (string, error) {
	if s == "?" {
		if f != dayOfMonth && f != dayOfWeek {
			return "", fmt.Errorf("'?' is only allowed in day-of-month and day-of-week")
		}
		return "?", nil
	}
	elems := strings.Split(strings.ToUpper(s), ",")
	for i, e := range elems {
		n, err := f.element(e)
		if err != nil {
			return "", fmt.Errorf("%s field %q: %v", f.name, s, err)
		}
		elems[i] = n
	}
	return strings.Join(elems, ","), nil
}

func (f *field) element(e string) (string, error) {
	switch {
	case e == "":
		return "", errors.New("empty list element")
	case f == dayOfMonth && (e == "L" || e == "LW"):
		return e, nil
	case f == dayOfMonth && strings.HasPrefix(e, "L-"):
		return "", errors.New("an offset from the last day (L-n) must be alone in its field")
	case f == dayOfMonth && strings.HasSuffix(e, "W"):
		v, err := f.value(strings.TrimSuffix(e, "W"))
		return strconv.Itoa(v) + "W", err
	case f == dayOfWeek && e == "L":
		return strconv.Itoa(f.max + f.shift), nil // Quartz: "L" alone is the last day of the week, Saturday
	case f == dayOfWeek && strings.HasSuffix(e, "L"):
		v, err := f.value(strings.TrimSuffix(e, "L"))
		return strconv.Itoa(v+f.shift) + "L", err
	case f == dayOfWeek && strings.Contains(e, "#"):
		d, nth, _ := strings.Cut(e, "#")
		v, err := f.value(d)
		if err != nil {
			return "", err
		}
		k, err := strconv.Atoi(nth)
		if err != nil || k < 1 || k > 5 {
			return "", fmt.Errorf("%q: the week after '#' must be 1 to 5", e)
		}
		return fmt.Sprintf("%d#%d", v+f.shift, k), nil
	}
	base, step, hasStep := strings.Cut(e, "/")
	if base == "*" && !hasStep {
		return "*", nil
	}
	var lo, hi int
	switch {
	case base == "*": // "*/n": from the field's least value
		lo, hi = f.min, f.max
	case strings.Contains(base, "-"):
		a, b, _ := strings.Cut(base, "-")
		var err error
		if lo, err = f.value(a); err != nil {
			return "", err
		}
		if hi, err = f.value(b); err != nil {
			return "", err
		}
		if lo > hi && f == year {
			return "", fmt.Errorf("range %q runs backwards", base)
		}
	default:
		v, err := f.value(base)
		if err != nil {
			return "", err
		}
		lo, hi = v, v
		if hasStep { // Quartz "5/15": from 5 to the end of the field, every 15
			hi = f.max
		}
	}
	n := 1
	if hasStep {
		var err error
		n, err = strconv.Atoi(step)
		if err != nil || n < 1 || n > f.max-f.min+1 {
			return "", fmt.Errorf("%q: the step after '/' must be 1 to %d", e, f.max-f.min+1)
		}
	}
	return f.list(lo, hi, n), nil
}

// list is the values from lo to hi, every step, in cronexpr's numbering, as Quartz's addToSet
// takes them: a range that ends below its start wraps past the field's end ("SAT-SUN", "22-2"),
// its step carried across, and a range of one value is that value ("SUN-SUN": cronexpr widened
// its 0-0 to the whole week). Written out, a list leaves none of this to cronexpr.
func (f *field) list(lo, hi, step int) string {
	span := f.max - f.min + 1
	if hi < lo {
		hi += span
	}
	var vals []string
	for i := lo; i <= hi; i += step {
		vals = append(vals, strconv.Itoa((i-f.min)%span+f.min+f.shift))
	}
	return strings.Join(vals, ",")
}

func (f *field) value(s string) (int, error) {
	if v, ok := f.names[s]; ok {
		return v, nil
	}
	v, err := strconv.Atoi(s)
	if err != nil || s == "" || s[0] == '+' || s[0] == '-' {
		return 0, fmt.Errorf("%q is not a number or name", s)
	}
	if v < f.min || v > f.max {
		return 0, fmt.Errorf("%d is outside %d-%d", v, f.min, f.max)
	}
	return v, nil
}
