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

func TestParseRejects(t *testing.T) {
	for _, expr := range []string{
		"", "* * * * *", "* * * * * ? * *",
		"0 0 0 * * *", "0 0 0 ? * ?", // exactly one '?'
		"60 * * * * ?", "* 60 * * * ?", "* * 24 * * ?", "* * * 0 * ?", "* * * 32 * ?",
		"* * * * 13 ?", "* * * ? * 0", "* * * ? * 8", "* * * * * ? 1969", "* * * * * ? 2100",
		"? * * * * ?", "* ? * ? * *", "a * * * * ?", "*/0 * * * * ?", "*/61 * * * * ?",
		"5-1 * * * * ?", "1,,2 * * * * ?", "0 0 0 L-3 * ?", "0 0 0 ? * 2#6", "0 0 0 ? * 2#x",
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
