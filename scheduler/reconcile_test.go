package scheduler

import (
	"context"
	"slices"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
)

// An explicit reconciliation asks again, with truncated exponential backoff, about the tasks
// Mesos has not spoken of since it began (a master after failover says nothing of tasks on
// agents not yet back), and stops asking about each once Mesos has, or once it has left the
// running queue.
func TestReconciliationAsksAgainUntilEveryTaskIsHeardOf(t *testing.T) {
	w := newGroupWorld(t)
	ctx := context.Background()
	asked := func() []string {
		w.mesos.mu.Lock()
		defer w.mesos.mu.Unlock()
		out := slices.Sorted(slices.Values(w.mesos.reconciled))
		w.mesos.reconciled = nil
		return out
	}
	ids := func(is ...int) []string {
		var out []string
		for _, i := range is {
			out = append(out, w.tasks[i].String())
		}
		return slices.Sorted(slices.Values(out))
	}
	w.ld.reconcileExplicit(ctx)
	start := time.Now() // the run's backoff counts from a moment just before
	if got := asked(); !slices.Equal(got, ids(0, 1, 2)) {
		t.Fatalf("first ask: %v; want every running task", got)
	}
	// The master answers for task 0 only; task 1's agent reports it finished.
	w.ld.updates(ctx, []mesos.TaskStatus{fromMaster(w.tasks[0], mesos.TASK_RUNNING, mesos.REASON_RECONCILIATION)})
	w.ld.updates(ctx, []mesos.TaskStatus{upd(w.tasks[1], mesos.TASK_FINISHED, "u1")})

	w.ld.retryReconcile(ctx, start.Add(reconRetryMin/2))
	if got := asked(); len(got) != 0 {
		t.Fatalf("asked %v before the backoff passed", got)
	}
	at := start.Add(reconRetryMin)
	for i, wait := range []time.Duration{10 * time.Second, 20 * time.Second, 40 * time.Second, 80 * time.Second, reconRetryMax, reconRetryMax} {
		w.ld.retryReconcile(ctx, at)
		if got := asked(); !slices.Equal(got, ids(2)) {
			t.Fatalf("ask %d: %v; want only task 2, not heard of", i+2, got)
		}
		w.ld.retryReconcile(ctx, at.Add(wait-time.Millisecond))
		if got := asked(); len(got) != 0 {
			t.Fatalf("ask %d: asked again %v within its backoff of %v", i+2, got, wait)
		}
		at = at.Add(wait)
	}
	w.ld.updates(ctx, []mesos.TaskStatus{fromMaster(w.tasks[2], mesos.TASK_RUNNING, mesos.REASON_RECONCILIATION)})
	w.ld.retryReconcile(ctx, at.Add(time.Hour))
	if got := asked(); len(got) != 0 {
		t.Fatalf("asked %v after every task was heard of", got)
	}
}
