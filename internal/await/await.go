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
	Explained(t, d, what, cond, nil)
}

// Explained is True whose failure also says what explain returns then: what was seen instead.
func Explained(t testing.TB, d time.Duration, what string, cond func() bool, explain func() string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			if explain != nil {
				t.Fatalf("%s: not true within %v; %s", what, d, explain())
			}
			t.Fatalf("%s: not true within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
