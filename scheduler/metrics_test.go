package scheduler

import (
	"testing"
	"time"
)

// fireTimes keeps one cron time per queued run: the oldest of fires that merged into one run,
// none for runs gone from the queue, and those written after the queue was read.
func TestFireTimesFollowTheReadyCounts(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	var f fireTimes
	f.fired("merged", []time.Time{at(1)})
	f.fired("merged", []time.Time{at(2)}) // without misfire: the count stays 1
	f.fired("misfire", []time.Time{at(1), at(2)})
	f.fired("deleted", []time.Time{at(1)})
	mark := f.mark()
	f.fired("misfire", []time.Time{at(3)}) // written after the read below
	f.fired("deleted", []time.Time{at(4)}) // re-registered and fired after the read
	f.settle(mark, map[string]int{"merged": 1, "misfire": 2})

	want := map[string][]time.Time{"merged": {at(1)}, "misfire": {at(1), at(2), at(3)}, "deleted": {at(4)}}
	for job, times := range want {
		for _, w := range times {
			if got, ok := f.launched(job); !ok || !got.Equal(w) {
				t.Fatalf("%s: launched %v %v; want %v", job, got, ok, w)
			}
		}
		if got, ok := f.launched(job); ok {
			t.Fatalf("%s: a time %v beyond its runs", job, got)
		}
	}
	if _, ok := f.launched("triggered"); ok {
		t.Fatal("a run the cron did not fire has a fire time")
	}
}
