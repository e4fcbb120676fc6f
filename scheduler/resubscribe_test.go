package scheduler

import (
	"testing"
	"time"
)

// A subscription lost after a while is taken up again at once, and the backoff starts afresh;
// one lost soon after SUBSCRIBED backs off, doubling to 30 s, so that a master that takes the
// framework and drops it again is not subscribed to (and reconciled with) in a tight loop.
func TestResubscribeWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name             string
		lasted, backoff  time.Duration
		wantWait, wantBo time.Duration
	}{
		{"a stable subscription lost", time.Hour, 8 * time.Second, 0, firstBackoff},
		{"lost just after subscribing", 50 * time.Millisecond, firstBackoff, firstBackoff, time.Second},
		{"lost again just after subscribing", 50 * time.Millisecond, time.Second, time.Second, 2 * time.Second},
		{"the backoff's cap", time.Second, 30 * time.Second, 30 * time.Second, 30 * time.Second},
	} {
		wait, next := resubscribeWait(tc.lasted, tc.backoff)
		if wait != tc.wantWait || next != tc.wantBo {
			t.Errorf("%s: wait %v, then backoff %v; want %v and %v", tc.name, wait, next, tc.wantWait, tc.wantBo)
		}
	}
}
