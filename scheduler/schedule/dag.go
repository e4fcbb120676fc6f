package schedule

import (
	"slices"
	"time"
)

// Cycle returns a dependency cycle through job, given every job's dependsOn with job's own
// (proposed) list in it, as the path job → … → job; nil when there is none. Registration refuses
// a job that would close one: its dependencies could never all have run first.
func Cycle(deps map[string][]string, job string) []string {
	// Depth-first from job's dependencies; a path that comes back to job is the cycle. Jobs seen
	// once need no second visit: from them job is not reachable, or the first visit found it.
	seen := map[string]bool{}
	var path []string
	var walk func(n string) bool
	walk = func(n string) bool {
		path = append(path, n)
		for _, d := range slices.Sorted(slices.Values(deps[n])) {
			if d == job {
				path = append(path, d)
				return true
			}
			if seen[d] {
				continue
			}
			seen[d] = true
			if walk(d) {
				return true
			}
		}
		path = path[:len(path)-1]
		return false
	}
	if walk(job) {
		return path
	}
	return nil
}

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
