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
	t.Parallel()
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

// A reconciliation's answer has no uuid: Mesos never sends it again. One that could not be
// recorded (ZooKeeper out of reach) leaves its task unsettled, and the run asks about it
// again; it was taken as heard before it was recorded, and the task stayed running in
// ZooKeeper until the next periodic reconciliation (never, with --reconcile-interval 0).
func TestAnAnswerNotRecordedIsAskedForAgain(t *testing.T) {
	t.Parallel()
	w := newGroupWorld(t)
	ctx := context.Background()
	w.ld.reconcileExplicit(ctx)
	if len(w.ld.recon.pending) != 3 {
		t.Fatalf("%d tasks pending; want the 3 running", len(w.ld.recon.pending))
	}
	w.proxy.Cut()
	cut, cancel := context.WithTimeout(ctx, 3*time.Second)
	w.ld.updates(cut, []mesos.TaskStatus{fromMaster(w.tasks[0], mesos.TASK_GONE, mesos.REASON_RECONCILIATION)})
	cancel()
	w.proxy.Restore()
	if running, _ := w.queues(t); !slices.Contains(running, w.tasks[0].String()) {
		t.Fatalf("running %v: the answer was recorded after all; the test needs it not to be", running)
	}
	w.mesos.mu.Lock()
	before := len(w.mesos.reconciled)
	w.mesos.mu.Unlock()
	w.ld.retryReconcile(ctx, time.Now().Add(time.Hour))
	w.mesos.mu.Lock()
	again := slices.Clone(w.mesos.reconciled[before:])
	w.mesos.mu.Unlock()
	if !slices.Contains(again, w.tasks[0].String()) {
		t.Fatalf("asked again about %v; want %s, whose answer was not recorded", again, w.tasks[0])
	}
}
