package scheduler

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"

	"github.com/ejcloud/ejcloud/executor"
	"github.com/ejcloud/ejcloud/state"
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
// write waiting for the reconnect) must not let the leases lapse. It reads the running tasks
// from the model, and that read can wait for ZooKeeper too (the model settles a node a failed
// call left in doubt first, whatever the read's context): a read not back within a renewal
// period is left to finish, and the executors read last are renewed meanwhile.
func (ld *leader) keepLeases(ctx context.Context, out *acknowledger) {
	ld.renewLeases(ctx, out, ld.leasedExecutors)
}

type leased struct {
	execs []taskid.Executor
	err   error
}

func (ld *leader) renewLeases(ctx context.Context, out *acknowledger, read func(context.Context) ([]taskid.Executor, error)) {
	lease := ld.cfg.TaskLease
	every := leaseRenewal(lease)
	var execs []taskid.Executor
	var reading chan leased // the read in flight, if any: its goroutine ends with the read
	heldUp := false
	for {
		// At once first: the executors may have waited through a leaderless gap.
		if reading == nil {
			reading = make(chan leased, 1)
			go func(got chan<- leased) {
				now, err := read(ctx)
				got <- leased{now, err}
			}(reading)
		}
		var late <-chan time.Time
		if lease > 0 { // "LEASE 0s" goes once, to the executors read: it waits for the read
			late = time.After(every)
		}
		select {
		case r := <-reading:
			reading, heldUp = nil, false
			if r.err != nil && ctx.Err() == nil {
				ld.log.WithError(r.err).Warn("cannot read the running tasks; renewing the task lease of the executors read last")
			} else if r.err == nil {
				execs = r.execs
			}
		case <-late:
			if !heldUp {
				heldUp = true
				ld.log.Warn("the read of the running tasks is held up (the model waits for ZooKeeper); renewing the task lease of the executors read last")
			}
		case <-ctx.Done():
			return
		}
		if ctx.Err() != nil {
			return
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
			// wait for the lease. Any other failure fails the read: a partial list would
			// leave executors out of the renewals that follow.
			j, err := ld.store.Job(ctx, r.Meta.JobName)
			switch {
			case err == nil:
				app = j.AppName
			case !errors.Is(err, state.ErrNotFound):
				return nil, err
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
