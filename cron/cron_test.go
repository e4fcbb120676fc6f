package cron

import (
	"errors"
	"testing"
	"time"
)

var start = time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)

func TestNextMatchesQuartz(t *testing.T) {
	tests := []struct {
		name, expr string
		want       []time.Time
	}{
		{"last Friday (SPEC vector)", "0 15 10 ? * 6L", []time.Time{time.Date(2026, 11, 27, 10, 15, 0, 0, time.UTC), time.Date(2026, 12, 25, 10, 15, 0, 0, time.UTC)}},
		{"first Monday (SPEC vector)", "0 0 12 ? * 2#1", []time.Time{time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)}},
		{"last weekday of the month (SPEC vector)", "0 0 12 LW * ?", []time.Time{time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC), time.Date(2026, 12, 31, 12, 0, 0, 0, time.UTC)}},
		{"every 2 seconds (SPEC vector)", "*/2 * * * * ?", []time.Time{start.Add(2 * time.Second), start.Add(4 * time.Second), start.Add(6 * time.Second)}},
		{"six fields have no year", "0 0 10 * * ?", []time.Time{time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)}},
		{"seven fields have a year", "0 0 10 1 1 ? 2028", []time.Time{time.Date(2028, 1, 1, 10, 0, 0, 0, time.UTC)}},
		{"Quartz 1 is Sunday", "0 0 9 ? * 1", []time.Time{time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC), time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)}},
		{"Quartz 7 is Saturday", "0 0 9 ? * 7", []time.Time{time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)}},
		{"day names", "0 0 9 ? * MON-TUE", []time.Time{time.Date(2026, 11, 23, 9, 0, 0, 0, time.UTC), time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC), time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)}},
		{"L alone in day-of-week is Saturday", "0 0 9 ? * L", []time.Time{time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)}},
		{"day-of-week step from Sunday", "0 0 9 ? * */3", []time.Time{time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC), time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC), time.Date(2026, 11, 28, 9, 0, 0, 0, time.UTC)}},
		{"start/step", "5/20 * * * * ?", []time.Time{start.Add(5 * time.Second), start.Add(25 * time.Second), start.Add(45 * time.Second), start.Add(65 * time.Second)}},
		{"last day of month", "0 0 0 L * ?", []time.Time{time.Date(2026, 11, 30, 0, 0, 0, 0, time.UTC)}},
		{"nearest weekday", "0 0 0 15W * ?", []time.Time{time.Date(2026, 12, 15, 0, 0, 0, 0, time.UTC)}},
		{"month names and lists", "0 0 0 1 JAN,MAR ?", []time.Time{time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC)}},
		{"never fires again", "0 0 0 1 1 ? 2020", nil},
		// Ranges as Quartz's addToSet takes them (audited against Quartz 2.2.1).
		{"a range of one day is that day", "0 0 9 ? * SUN-SUN", []time.Time{time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC), time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)}},
		{"a range of one day, stepped", "0 0 9 ? * 1-1/3", []time.Time{time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC), time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)}},
		{"a range of one day in a list", "0 0 9 ? * 1-1,3", []time.Time{time.Date(2026, 11, 22, 9, 0, 0, 0, time.UTC), time.Date(2026, 11, 24, 9, 0, 0, 0, time.UTC), time.Date(2026, 11, 29, 9, 0, 0, 0, time.UTC)}},
		{"the weekend wraps around", "0 0 10 ? * SAT-SUN", []time.Time{time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC), time.Date(2026, 11, 28, 10, 0, 0, 0, time.UTC), time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)}},
		{"a night window wraps around", "0 0 22-2 * * ?", []time.Time{start.Add(time.Hour), start.Add(2 * time.Hour), start.Add(22 * time.Hour), start.Add(23 * time.Hour), start.Add(24 * time.Hour)}},
		{"a wrapped range's step carries across", "0 0 22-4/3 * * ?", []time.Time{start.Add(time.Hour), start.Add(4 * time.Hour), start.Add(22 * time.Hour), start.Add(25 * time.Hour)}},
		{"months wrap around", "0 0 0 1 NOV-FEB ?", []time.Time{time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 2, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 11, 1, 0, 0, 0, 0, time.UTC)}},
		{"three days before the last (L-3)", "0 0 0 L-3 * ?", []time.Time{time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC), time.Date(2026, 12, 28, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 28, 0, 0, 0, 0, time.UTC), time.Date(2027, 2, 25, 0, 0, 0, 0, time.UTC)}},
		{"L-0 is the last day", "0 30 6 L-0 * ?", []time.Time{time.Date(2026, 11, 30, 6, 30, 0, 0, time.UTC), time.Date(2026, 12, 31, 6, 30, 0, 0, time.UTC)}},
		{"L-n on its day, every 20 minutes", "0 0/20 23 L-1 * ?", []time.Time{time.Date(2026, 11, 29, 23, 0, 0, 0, time.UTC), time.Date(2026, 11, 29, 23, 20, 0, 0, time.UTC), time.Date(2026, 11, 29, 23, 40, 0, 0, time.UTC), time.Date(2026, 12, 30, 23, 0, 0, 0, time.UTC)}},
		{"L-30 only in 31-day months", "0 0 0 L-30 * ?", []time.Time{time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC)}},
		{"a day-of-week step of 7 is its start", "0 0 10 ? * */7", []time.Time{time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC), time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Parse(tc.expr)
			if err != nil {
				t.Fatalf("Parse(%q): %v", tc.expr, err)
			}
			got := s.NextN(start, len(tc.want)+boolInt(tc.want == nil))
			if len(got) != len(tc.want) {
				t.Fatalf("NextN(%q) = %v; want %v", tc.expr, got, tc.want)
			}
			for i := range got {
				if !got[i].Equal(tc.want[i]) {
					t.Fatalf("NextN(%q) = %v; want %v", tc.expr, got, tc.want)
				}
			}
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestNextIsEvaluatedInTheGivenZone(t *testing.T) {
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	s, err := Parse("0 0 10 * * ?")
	if err != nil {
		t.Fatal(err)
	}
	got := s.Next(start.In(shanghai))
	want := time.Date(2026, 11, 22, 10, 0, 0, 0, shanghai) // 02:00 UTC
	if !got.Equal(want) {
		t.Fatalf("Next in Asia/Shanghai = %v; want %v", got, want)
	}
}

// Across daylight-saving changes, fire times are Quartz 2.2.1's (the audit ran both side by
// side): a day whose midnight is skipped is still checked against the day fields, a wall clock
// that is repeated fires once, at its later instant, and one that is skipped does not fire.
// cronexpr, walking the zone's clock, fired the Sunday after a Saturday job in Beirut and the
// 01:30 of New York's fall-back day twice.
func TestNextAcrossDaylightSavingChangesMatchesQuartz(t *testing.T) {
	at := func(zone string, y int, m time.Month, d, h, min int, offset string) time.Time {
		loc, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatal(err)
		}
		want := time.Date(y, m, d, h, min, 0, 0, loc)
		if offset != "" { // the instant with this offset, of the two a repeated hour has
			for _, x := range []time.Time{want, want.Add(-time.Hour), want.Add(time.Hour)} {
				if x.In(loc).Format("-0700") == offset && x.In(loc).Hour() == h {
					want = x.In(loc)
				}
			}
		}
		return want
	}
	for _, tc := range []struct {
		name, zone, expr string
		from             time.Time
		want             []time.Time
	}{
		{"Saturdays where midnight is skipped", "Asia/Beirut", "0 0 12 ? * SAT", time.Date(2027, 3, 25, 0, 0, 0, 0, time.UTC),
			[]time.Time{at("Asia/Beirut", 2027, 3, 27, 12, 0, ""), at("Asia/Beirut", 2027, 4, 3, 12, 0, ""), at("Asia/Beirut", 2027, 4, 10, 12, 0, "")}},
		{"the 13th where midnight is skipped", "America/Havana", "0 0 12 13 * ?", time.Date(2027, 3, 1, 0, 0, 0, 0, time.UTC),
			[]time.Time{at("America/Havana", 2027, 3, 13, 12, 0, ""), at("America/Havana", 2027, 4, 13, 12, 0, ""), at("America/Havana", 2027, 5, 13, 12, 0, "")}},
		{"Thursdays where midnight is skipped", "Africa/Cairo", "0 0 12 ? * THU", time.Date(2026, 4, 20, 0, 0, 0, 0, time.UTC),
			[]time.Time{at("Africa/Cairo", 2026, 4, 23, 12, 0, ""), at("Africa/Cairo", 2026, 4, 30, 12, 0, ""), at("Africa/Cairo", 2026, 5, 7, 12, 0, "")}},
		{"Saturdays in Santiago", "America/Santiago", "0 0 12 ? * SAT", time.Date(2027, 9, 1, 0, 0, 0, 0, time.UTC),
			[]time.Time{at("America/Santiago", 2027, 9, 4, 12, 0, ""), at("America/Santiago", 2027, 9, 11, 12, 0, ""), at("America/Santiago", 2027, 9, 18, 12, 0, "")}},
		{"a repeated 01:30 fires once, at standard time", "America/New_York", "0 30 1 * * ?", time.Date(2027, 11, 6, 12, 0, 0, 0, time.UTC),
			[]time.Time{at("America/New_York", 2027, 11, 7, 1, 30, "-0500"), at("America/New_York", 2027, 11, 8, 1, 30, "")}},
		{"a skipped 02:30 does not fire", "America/New_York", "0 30 2 * * ?", time.Date(2027, 3, 13, 12, 0, 0, 0, time.UTC),
			[]time.Time{at("America/New_York", 2027, 3, 15, 2, 30, "")}},
		{"Lord Howe's half-hour change keeps 02:30", "Australia/Lord_Howe", "0 30 2 * * ?", time.Date(2026, 10, 2, 0, 0, 0, 0, time.UTC),
			[]time.Time{at("Australia/Lord_Howe", 2026, 10, 3, 2, 30, ""), at("Australia/Lord_Howe", 2026, 10, 4, 2, 30, "+1100"), at("Australia/Lord_Howe", 2026, 10, 5, 2, 30, "")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			loc, _ := time.LoadLocation(tc.zone)
			s, err := Parse(tc.expr)
			if err != nil {
				t.Fatal(err)
			}
			got := s.NextN(tc.from.In(loc), len(tc.want))
			if len(got) != len(tc.want) {
				t.Fatalf("NextN = %v; want %v", got, tc.want)
			}
			for i := range got {
				if !got[i].Equal(tc.want[i]) {
					t.Fatalf("NextN = %v; want %v", got, tc.want)
				}
			}
		})
	}
}

// Fire times strictly increase, and each is a wall clock the expression matches, in every
// zone, across every change of the years the scheduler will see.
func TestNextIncreasesAndMatchesTheWallClockInEveryZone(t *testing.T) {
	exprs := []string{"0 0/15 * * * ?", "0 30 1 * * ?", "0 0 0 * * ?", "0 0 12 ? * SAT", "0 0 0 L * ?", "0 0 2 ? * 1#2", "0 15 1 L-2 * ?"}
	zones := []string{"America/New_York", "Asia/Beirut", "America/Havana", "America/Santiago", "Africa/Cairo", "Australia/Lord_Howe",
		"America/Asuncion", "Asia/Tehran", "Europe/London", "UTC", "Asia/Shanghai"}
	for _, expr := range exprs {
		s, err := Parse(expr)
		if err != nil {
			t.Fatal(err)
		}
		for _, zone := range zones {
			loc, err := time.LoadLocation(zone)
			if err != nil {
				t.Fatal(err)
			}
			from := time.Date(2017, 1, 1, 0, 0, 0, 0, loc)
			end := from.AddDate(0, 0, 120)
			if expr != exprs[0] {
				end = from.AddDate(12, 0, 0)
			}
			for prev := from; prev.Before(end); {
				next := s.Next(prev)
				if !next.After(prev) {
					t.Fatalf("%q in %s: Next(%v) = %v, not after it", expr, zone, prev, next)
				}
				// The wall clock of next is the first the expression matches after prev's.
				if w := s.expr.Next(wall(prev)); wall(next).Before(w) {
					t.Fatalf("%q in %s: Next(%v) = %v, whose wall clock comes before the first match %v", expr, zone, prev, next, w)
				}
				if at, ok := instant(wall(next), loc); !ok || !at.Equal(next) {
					t.Fatalf("%q in %s: Next(%v) = %v, not the latest instant of its wall clock", expr, zone, prev, next)
				}
				prev = next
			}
		}
	}
}

func TestParseRejects(t *testing.T) {
	for _, expr := range []string{
		"", "* * * * *", "* * * * * ? * *",
		"0 0 0 * * *", "0 0 0 ? * ?", // exactly one '?'
		"60 * * * * ?", "* 60 * * * ?", "* * 24 * * ?", "* * * 0 * ?", "* * * 32 * ?",
		"* * * * 13 ?", "* * * ? * 0", "* * * ? * 8", "* * * * * ? 1969", "* * * * * ? 2100",
		"? * * * * ?", "* ? * ? * *", "a * * * * ?", "*/0 * * * * ?", "*/61 * * * * ?",
		"0 0 0 1 1 ? 2030-2028", "1,,2 * * * * ?", "0 0 0 L-31 * ?", "0 0 0 L-3W * ?", "0 0 0 L-3,5 * ?", "0 0 0 L- * ?", "0 0 0 ? * 2#6", "0 0 0 ? * 2#x",
		"-1 * * * * ?", "+1 * * * * ?", "0 0 0 ? * FOO", "0 0 0 32W * ?", "0 0 0 ? * 8L",
	} {
		if s, err := Parse(expr); !errors.Is(err, ErrInvalid) {
			t.Errorf("Parse(%q) = %v, %v; want ErrInvalid", expr, s, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"0 15 10 ? * 6L", "*/2 * * * * ?", "0 0 12 LW * ?", "0 0 12 ? * 2#1 2030"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sched, err := Parse(s)
		if err != nil {
			return
		}
		next := sched.Next(start)
		if !next.IsZero() && !next.After(start) {
			t.Fatalf("Parse(%q).Next(%v) = %v, not after", s, start, next)
		}
	})
}
