// Package await waits in tests for a condition to hold, under a deadline, instead of sleeping
// for a fixed time and hoping.
package await

import (
	"testing"
	"time"
)

// True polls cond every 20 ms until it holds, and fails the test if it does not within d.
func True(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
