package executor

import (
	"time"

	mesosexec "github.com/mesos/mesos-go/api/v1/lib/executor"
)

// An update the agent did not take is tried again after retryMin, doubling up to retryMax.
// The agent answers 503 for the whole of its recovery (executor_reregistration_timeout, up to
// 15 s in Mesos), so the cap keeps a refused update from waiting long after recovery ends.
const (
	retryMin = 250 * time.Millisecond
	retryMax = 5 * time.Second
)

// retryAfter is the wait before the next attempt of an update refused failures times in a row.
func retryAfter(failures int) time.Duration {
	d := retryMin
	for i := 1; i < failures && d < retryMax; i++ {
		d *= 2
	}
	return min(d, retryMax)
}

// outbox holds the executor's unacknowledged updates, in the order they were made, and says
// which one may be sent when. It is not safe for concurrent use (the Executor's mutex guards it).
//
// An update is "taken" once the agent has it: it answered 202 to its UPDATE, or it travelled
// in a SUBSCRIBE the agent answered with SUBSCRIBED. A taken update only waits for its
// ACKNOWLEDGED; if the subscription is lost first, the next SUBSCRIBE carries it again. An
// update not taken is sent, and re-sent with backoff, until it is; a task's update is never
// sent before the agent has taken the task's earlier ones, so the agent sees each task's
// updates in order.
type outbox struct {
	items []*outgoing
}

type outgoing struct {
	update   mesosexec.Call_Update
	taken    bool
	inFlight bool      // an UPDATE of it is under way
	failures int       // attempts refused in a row
	due      time.Time // not sent before
}

func (o *outbox) add(u mesosexec.Call_Update, now time.Time) {
	o.items = append(o.items, &outgoing{update: u, due: now})
}

// acknowledged forgets the update with uuid and returns it; ok is false if the outbox did not
// have it.
func (o *outbox) acknowledged(uuid []byte) (u mesosexec.Call_Update, ok bool) {
	for i, it := range o.items {
		if string(it.update.Status.UUID) == string(uuid) {
			o.items = append(o.items[:i], o.items[i+1:]...)
			return it.update, true
		}
	}
	return u, false
}

// all is every unacknowledged update, in order: what a SUBSCRIBE carries.
func (o *outbox) all() []mesosexec.Call_Update {
	out := make([]mesosexec.Call_Update, len(o.items))
	for i, it := range o.items {
		out[i] = it.update
	}
	return out
}

// subscribed marks as taken the updates a SUBSCRIBE carried that the agent answered with
// SUBSCRIBED (it processes them before answering).
func (o *outbox) subscribed(carried []mesosexec.Call_Update) {
	in := make(map[string]bool, len(carried))
	for _, u := range carried {
		in[string(u.Status.UUID)] = true
	}
	for _, it := range o.items {
		if in[string(it.update.Status.UUID)] {
			it.taken, it.failures = true, 0
		}
	}
}

// next is the first update that may be sent at now: not taken, not under way, due, and with no
// earlier update of its task still untaken. With none, it returns the wait until one falls due, or -1 when no
// update waits to be sent.
func (o *outbox) next(now time.Time) (*outgoing, time.Duration) {
	blocked := map[string]bool{} // tasks with an earlier update not yet taken
	wait := time.Duration(-1)
	for _, it := range o.items {
		task := it.update.Status.TaskID.Value
		if it.taken || blocked[task] {
			continue
		}
		blocked[task] = true
		if it.inFlight {
			continue
		}
		if !it.due.After(now) {
			return it, 0
		}
		if d := it.due.Sub(now); wait < 0 || d < wait {
			wait = d
		}
	}
	return nil, wait
}

// result records the outcome of sending it at now; after a refusal it returns the wait before
// the next attempt.
func (o *outbox) result(it *outgoing, err error, now time.Time) time.Duration {
	if err == nil {
		it.taken, it.failures = true, 0
		return 0
	}
	it.failures++
	d := retryAfter(it.failures)
	it.due = now.Add(d)
	return d
}

// untaken counts the updates the agent does not have yet.
func (o *outbox) untaken() int {
	n := 0
	for _, it := range o.items {
		if !it.taken {
			n++
		}
	}
	return n
}
