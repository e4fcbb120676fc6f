package scheduler

import (
	"context"
	"time"

	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"
	"github.com/sirupsen/logrus"
)

// An explicit reconciliation is a run, not one call (MESOS.md §4.3): the master answers only
// for the tasks it knows of, and after a master failover it says nothing of the tasks on
// agents that have not re-registered yet, nor of a task whose ACCEPT was lost. The tasks not
// heard of since the run began are asked about again, with truncated exponential backoff,
// until every one has been, or has left the running queue. A new run replaces the last.

// reconRetryMin and reconRetryMax bound the wait before a run asks again.
const (
	reconRetryMin = 5 * time.Second
	reconRetryMax = 2 * time.Minute
)

// reconRun is owned by the event loop. Its zero value is no run.
type reconRun struct {
	pending map[string]string // task id → agent id: asked about, not heard of since
	next    time.Time         // when to ask again
	wait    time.Duration     // the backoff after next
}

// start begins a run for tasks (task id → agent id), just asked about.
func (r *reconRun) start(tasks map[string]string, now time.Time) {
	r.pending = make(map[string]string, len(tasks))
	for tid, agent := range tasks {
		r.pending[tid] = agent
	}
	r.next, r.wait = now.Add(reconRetryMin), min(2*reconRetryMin, reconRetryMax)
}

// add puts tasks (task id → agent id), just asked about, into the run, starting one if none
// is going.
func (r *reconRun) add(tasks map[string]string, now time.Time) {
	if len(r.pending) == 0 {
		r.start(tasks, now)
		return
	}
	for tid, agent := range tasks {
		r.pending[tid] = agent
	}
}

// heard settles a task: Mesos spoke of it, whatever it said.
func (r *reconRun) heard(tid string) { delete(r.pending, tid) }

// retryReconcile asks again about the tasks of the run still not heard of, once its backoff
// has passed, forgetting those no longer in the running queue.
func (ld *leader) retryReconcile(ctx context.Context, now time.Time) {
	r := &ld.recon
	if len(r.pending) == 0 || now.Before(r.next) {
		return
	}
	running, err := ld.store.Running(ctx)
	if err != nil {
		r.next = now.Add(reconRetryMin) // the queue cannot be read: try again later
		return
	}
	still := make(map[string]bool, len(running))
	for _, e := range running {
		still[e.TaskID] = true
	}
	for tid := range r.pending {
		if !still[tid] {
			delete(r.pending, tid)
		}
	}
	if len(r.pending) == 0 {
		return
	}
	ld.log.WithFields(logrus.Fields{"tasks": len(r.pending), "next_in": r.wait}).Info("tasks not heard of since the reconciliation began; asking Mesos again")
	ld.call(ctx, calls.Reconcile(calls.ReconcileTasks(r.pending)))
	r.next, r.wait = now.Add(r.wait), min(2*r.wait, reconRetryMax)
}
