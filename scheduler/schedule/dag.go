package schedule

import "time"

// LogicalTime is the slot of a dependency that a run of slot t waits for: the dependency's
// latest slot at or before t (in the dependency's zone), or zero when it has none.
func LogicalTime(dep Cron, depZone *time.Location, t time.Time) time.Time {
	return AtOrBefore(dep, t.In(depZone))
}

// Backoff is the wait before retry attempt (2 is the first retry): base, doubled per further
// attempt, at most max (when max > 0).
func Backoff(attempt int, base, max time.Duration) time.Duration {
	d := base
	for i := 2; i < attempt; i++ {
		d *= 2
		if max > 0 && d >= max {
			return max
		}
		if d <= 0 { // overflow
			return max
		}
	}
	if max > 0 && d > max {
		return max
	}
	return d
}
