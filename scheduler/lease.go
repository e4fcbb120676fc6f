package scheduler

import (
	"context"
	"sort"
	"time"

	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"

	"github.com/ejcloud/ejcloud/executor"
	"github.com/ejcloud/ejcloud/taskid"
)

// The task lease (--task-lease; executor/lease.go says why). While it is set, every task
// carries it in its TaskInfo label ejcloud.lease, which arms the executor at the LAUNCH, and
// the leader sends MESSAGE "LEASE <lease>" to every executor that runs a task of the running
// queue, eight times a lease: an executor that hears nothing from the scheduler for a whole
// lease is cut off from the master, and kills its tasks before --unreachable-timeout can
// relaunch them elsewhere. Without a lease, a task without the label, and "LEASE 0s" sent to
// the executors of the running tasks once a subscription, end the fencing of executors an
// earlier leader armed.

// leaseRenewal is how often the lease is renewed: eight times a lease, so that a lease lapses
// only after a leaderless gap (a takeover, ZooKeeper restarting) of seven eighths of it, and
// a renewal the master drops (to an agent re-registering) costs nothing.
func leaseRenewal(lease time.Duration) time.Duration { return max(lease/8, 10*time.Millisecond) }

// leaseMessage is the MESSAGE payload for a lease of d.
func leaseMessage(d time.Duration) []byte { return []byte(executor.LeaseMessage + " " + d.String()) }

// keepLeases renews the lease until ctx ends (the subscription's), or, without a lease, sends
// "LEASE 0s" once. It runs beside the event loop, not on it: a loop blocked on ZooKeeper (a
// write waiting for the reconnect) must not let the leases lapse, and it reads the running
// tasks from the model, which the API reads too.
func (ld *leader) keepLeases(ctx context.Context, out *acknowledger) {
	lease := ld.cfg.TaskLease
	every := leaseRenewal(lease)
	var execs []taskid.Executor
	for {
		// At once first: the executors may have waited through a leaderless gap.
		rctx, cancel := context.WithTimeout(ctx, every)
		now, err := ld.leasedExecutors(rctx)
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			ld.log.WithError(err).Warn("cannot read the running tasks; renewing the task lease of the executors read last")
		default:
			execs = now
		}
		msg := leaseMessage(lease)
		for _, ex := range execs {
			out.send(ctx, calls.Message(ex.AgentID, ex.String(), msg))
		}
		if lease == 0 {
			return
		}
		select {
		case <-time.After(every):
		case <-ctx.Done():
			return
		}
	}
}

// leasedExecutors are the executors of the running queue's tasks, in a stable order.
func (ld *leader) leasedExecutors(ctx context.Context) ([]taskid.Executor, error) {
	running, err := ld.store.Running(ctx)
	if err != nil {
		return nil, err
	}
	apps := map[string]string{} // job → app: one config read per job
	seen := map[taskid.Executor]bool{}
	var out []taskid.Executor
	for _, r := range running {
		app, ok := apps[r.Meta.JobName]
		if !ok {
			// A job deleted while its tasks run: they are being killed, and a KILL does not
			// wait for the lease.
			if j, err := ld.store.Job(ctx, r.Meta.JobName); err == nil {
				app = j.AppName
			}
			apps[r.Meta.JobName] = app
		}
		id, err := taskid.Parse(r.TaskID)
		if app == "" || err != nil {
			continue
		}
		ex := taskid.Executor{AppName: app, AgentID: id.AgentID}
		if !seen[ex] {
			seen[ex] = true
			out = append(out, ex)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}
