package executor

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	mesosexec "github.com/mesos/mesos-go/api/v1/lib/executor"
)

func TestRetryAfterDoublesFrom250msTo5s(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		failures int
		want     time.Duration
	}{
		{1, 250 * time.Millisecond}, {2, 500 * time.Millisecond}, {3, time.Second}, {4, 2 * time.Second},
		{5, 4 * time.Second}, {6, 5 * time.Second}, {7, 5 * time.Second}, {1000, 5 * time.Second},
	} {
		if got := retryAfter(tc.failures); got != tc.want {
			t.Errorf("retryAfter(%d) = %v; want %v", tc.failures, got, tc.want)
		}
	}
}

// upd is an update of task with a uuid that names it in the test ("a1" is task a's first).
func upd(name string) mesosexec.Call_Update {
	return mesosexec.Call_Update{Status: mesos.TaskStatus{TaskID: mesos.TaskID{Value: name[:1]}, UUID: []byte(name), State: mesos.TASK_RUNNING.Enum()}}
}

// The outbox is driven by a script of steps; after each, next must offer the named update
// (or none) and the wait until one falls due.
func TestOutboxOrderAndRetries(t *testing.T) {
	t.Parallel()
	refused := errors.New("503 Agent has not finished recovery")
	t0 := time.Unix(1000, 0)
	type step struct {
		at       time.Duration // since t0
		do       string        // "add x", "ok x", "refuse x", "ack x", "subscribed x,y", "" (just look)
		next     string        // the update next offers, "" for none
		wait     time.Duration // when next offers none: -1 if nothing waits
		untaken  int
		describe string
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"one update: sent, taken, acknowledged", []step{
			{0, "add a1", "a1", 0, 1, "a new update is due at once"},
			{0, "ok a1", "", -1, 0, "taken: it waits for its ACKNOWLEDGED, not to be sent"},
			{0, "ack a1", "", -1, 0, "acknowledged: gone"},
		}},
		{"a refused update backs off, doubling to 5 s", []step{
			{0, "add a1", "a1", 0, 1, ""},
			{0, "refuse a1", "", 250 * time.Millisecond, 1, "first retry after 250 ms"},
			{250 * time.Millisecond, "", "a1", 0, 1, "due again"},
			{250 * time.Millisecond, "refuse a1", "", 500 * time.Millisecond, 1, ""},
			{750 * time.Millisecond, "refuse a1", "", time.Second, 1, ""},
			{1750 * time.Millisecond, "refuse a1", "", 2 * time.Second, 1, ""},
			{3750 * time.Millisecond, "refuse a1", "", 4 * time.Second, 1, ""},
			{7750 * time.Millisecond, "refuse a1", "", 5 * time.Second, 1, "capped at 5 s"},
			{12750 * time.Millisecond, "refuse a1", "", 5 * time.Second, 1, ""},
			{17750 * time.Millisecond, "ok a1", "", -1, 0, "taken at last"},
		}},
		{"a task's later update waits for its earlier one; other tasks do not", []step{
			{0, "add a1", "a1", 0, 1, ""},
			{0, "add a2", "a1", 0, 2, ""},
			{0, "add b1", "a1", 0, 3, ""},
			{0, "refuse a1", "b1", 0, 3, "a2 may not overtake a1; b1 may go"},
			{0, "ok b1", "", 250 * time.Millisecond, 2, "a2 is not offered while a1 waits"},
			{250 * time.Millisecond, "", "a1", 0, 2, ""},
			{250 * time.Millisecond, "ok a1", "a2", 0, 1, "a1 taken (not yet acknowledged): a2 may go"},
			{250 * time.Millisecond, "ok a2", "", -1, 0, ""},
			{250 * time.Millisecond, "ack a2", "", -1, 0, "acknowledgements may come in any order"},
			{250 * time.Millisecond, "ack a1", "", -1, 0, ""},
		}},
		{"a SUBSCRIBE carries what it carried; later updates are sent after SUBSCRIBED", []step{
			{0, "add a1", "a1", 0, 1, ""},
			{0, "refuse a1", "", 250 * time.Millisecond, 1, ""},
			{100 * time.Millisecond, "subscribed a1", "", -1, 0, "the agent took a1 with the SUBSCRIBE"},
			{100 * time.Millisecond, "add a2", "a2", 0, 1, "made after the SUBSCRIBE: sent at once"},
		}},
		{"SUBSCRIBED resets nothing it did not carry", []step{
			{0, "add a1", "a1", 0, 1, ""},
			{0, "add b1", "a1", 0, 2, ""},
			{0, "subscribed a1", "b1", 0, 1, ""},
			{0, "refuse b1", "", 250 * time.Millisecond, 1, ""},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var o outbox
			find := func(name string) *outgoing {
				for _, it := range o.items {
					if string(it.update.Status.UUID) == name {
						return it
					}
				}
				t.Fatalf("%s is not in the outbox", name)
				return nil
			}
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				verb, arg, _ := strings.Cut(s.do, " ")
				switch verb {
				case "add":
					o.add(upd(arg), now)
				case "ok":
					o.result(find(arg), nil, now)
				case "refuse":
					o.result(find(arg), refused, now)
				case "ack":
					if _, ok := o.acknowledged([]byte(arg)); !ok {
						t.Fatalf("step %d: acknowledged(%s) found nothing", i, arg)
					}
				case "subscribed":
					var carried []mesosexec.Call_Update
					for _, n := range strings.Split(arg, ",") {
						carried = append(carried, find(n).update)
					}
					o.subscribed(carried)
				}
				it, wait := o.next(now)
				got := ""
				if it != nil {
					got = string(it.update.Status.UUID)
				}
				want := fmt.Sprintf("next %q wait %v untaken %d", s.next, s.wait, s.untaken)
				if have := fmt.Sprintf("next %q wait %v untaken %d", got, wait, o.untaken()); have != want {
					t.Fatalf("step %d (%s at %v; %s): %s; want %s", i, s.do, s.at, s.describe, have, want)
				}
			}
		})
	}
}

func TestOutboxAllKeepsTheOrderUpdatesWereMadeIn(t *testing.T) {
	t.Parallel()
	var o outbox
	for _, n := range []string{"a1", "b1", "a2", "c1", "b2"} {
		o.add(upd(n), time.Now())
	}
	o.result(o.items[1], nil, time.Now())
	o.acknowledged([]byte("a1"))
	var got []string
	for _, u := range o.all() {
		got = append(got, string(u.Status.UUID))
	}
	if strings.Join(got, ",") != "b1,a2,c1,b2" {
		t.Fatalf("a SUBSCRIBE would carry %v; want every unacknowledged update, taken or not, in order", got)
	}
}

// Updates of different tasks go out in parallel: one under way is skipped, and holds back only
// its own task's later updates.
func TestOutboxSkipsWhatIsUnderWay(t *testing.T) {
	t.Parallel()
	var o outbox
	now := time.Now()
	for _, n := range []string{"a1", "a2", "b1", "c1"} {
		o.add(upd(n), now)
	}
	var sent []string
	for {
		it, _ := o.next(now)
		if it == nil {
			break
		}
		it.inFlight = true
		sent = append(sent, string(it.update.Status.UUID))
	}
	if strings.Join(sent, ",") != "a1,b1,c1" {
		t.Fatalf("under way at once: %v; want a1,b1,c1 (a2 waits for a1)", sent)
	}
	o.items[0].inFlight = false
	o.result(o.items[0], nil, now)
	if it, _ := o.next(now); it == nil || string(it.update.Status.UUID) != "a2" {
		t.Fatalf("after a1 was taken next = %v; want a2", it)
	}
}
