package scheduler

import (
	"context"

	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/mesos/mesos-go/api/v1/lib/encoding"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
)

// wire is an event stream whose events the test hands over one by one; Close ends it as the
// watchdog's close of the HTTP body would.
type wire struct {
	events chan scheduler.Event
	closed chan struct{}
	once   sync.Once
}

func newWire(n int) *wire {
	return &wire{events: make(chan scheduler.Event, n), closed: make(chan struct{})}
}

func (w *wire) Decode(u encoding.Unmarshaler) error {
	select {
	case ev := <-w.events:
		*u.(*scheduler.Event) = ev
		return nil
	case <-w.closed:
		return io.ErrUnexpectedEOF
	}
}

func (w *wire) Close() error {
	w.once.Do(func() { close(w.closed) })
	return nil
}

func (w *wire) isClosed() bool {
	select {
	case <-w.closed:
		return true
	default:
		return false
	}
}

// The watchdog closes a stream the master has gone silent on for five heartbeat intervals
// (a half-open connection), and only then: time the leader's own event loop spends busy, with
// events waiting that it has not taken, is not the master's silence. Before, a loop stalled
// for five intervals (a slow ZooKeeper) closed a healthy stream and subscribed again.
func TestTheWatchdogCountsTheMastersSilenceOnly(t *testing.T) {
	t.Parallel()
	const hb = 10 * time.Millisecond
	heartbeat := scheduler.Event{Type: scheduler.Event_HEARTBEAT}
	for _, tc := range []struct {
		name       string
		onWire     int  // heartbeats waiting on the wire
		wantClosed bool // the stream is closed while the loop takes nothing
	}{
		{name: "the master is silent", onWire: 0, wantClosed: true},
		{name: "the loop is busy", onWire: 3, wantClosed: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newWire(tc.onWire)
			for range tc.onWire {
				w.events <- heartbeat
			}
			sub := &subscription{resp: w, heartbeat: hb}
			out := make(chan scheduler.Event) // nobody reads it yet: the loop is busy
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			done := make(chan error, 1)
			go func() { done <- sub.events(ctx, out) }()

			// A stream that must be closed gets 5 s; one that must not, sixty intervals, twelve
			// times the watchdog's five: without the fix it is closed after five.
			wait := 60 * hb
			if tc.wantClosed {
				wait = 5 * time.Second
			}
			closed := false
			select {
			case <-w.closed:
				closed = true
			case <-time.After(wait):
			}
			if closed != tc.wantClosed {
				t.Fatalf("closed within %v while the loop took nothing: %v, want %v", wait, closed, tc.wantClosed)
			}
			if tc.wantClosed {
				if err := <-done; err == nil || errors.Is(err, context.Canceled) {
					t.Fatalf("events ended with %v, want the stream's error", err)
				}
				return
			}
			for i := range tc.onWire {
				select {
				case ev := <-out:
					if ev.Type != scheduler.Event_HEARTBEAT {
						t.Fatalf("event %d is %v", i, ev.Type)
					}
				case err := <-done:
					t.Fatalf("events ended with %v before handing over event %d", err, i)
				}
			}
			// The wire is silent now, so the watchdog closes it after five more intervals.
			select {
			case err := <-done:
				if err == nil || errors.Is(err, context.Canceled) || !w.isClosed() {
					t.Fatalf("events ended with %v (closed %v), want the stream's error", err, w.isClosed())
				}
			case <-time.After(5 * time.Second):
				t.Fatal("a silent stream was not closed in 5 s")
			}
		})
	}
}
