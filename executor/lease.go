package executor

import (
	"fmt"
	"strings"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/sirupsen/logrus"
)

// LeaseMessage is the framework MESSAGE by which a scheduler started with --task-lease renews
// its lease on this executor's tasks: "LEASE <duration>", e.g. "LEASE 6s"; "LEASE 0s" ends
// the lease (fencing off).
//
// Why: a scheduler treats a task whose agent stayed unreachable past --unreachable-timeout as
// lost and relaunches it (SPEC §5.7), while the partitioned agent, unseen, may still be running
// it: the shard would run twice. A renewal can reach the executor only through the master and
// the agent, so an executor that has had none for a whole lease is cut off from the master,
// and its tasks may be relaunched elsewhere. It then kills them (SIGKILL, no grace) and reports
// them TASK_FAILED, before any relaunch can start: the scheduler keeps the lease shorter than
// the unreachable timeout, which only starts once the master has marked the agent unreachable.
// This is Nomad's stop_after_client_disconnect, with the scheduler's messages as the heartbeat.
const LeaseMessage = "LEASE"

// LeaseLabel is the TaskInfo label that carries the lease with the task ("6s"): a LAUNCH sets
// the executor's lease to it, and a task without it ends fencing. So a new executor is armed
// from its first task on, before any renewal could reach it (the master drops messages to an
// executor that is still starting).
const LeaseLabel = "ejcloud.lease"

// launchLease reads the lease a task carries: 0 when it carries none.
func launchLease(ti mesos.TaskInfo) (time.Duration, error) {
	for _, l := range ti.GetLabels().GetLabels() {
		if l.Key == LeaseLabel {
			d, err := time.ParseDuration(l.GetValue())
			if err != nil || d < 0 {
				return 0, fmt.Errorf("bad %s label %q: want a duration of 0s or more", LeaseLabel, l.GetValue())
			}
			return d, nil
		}
	}
	return 0, nil
}

// parseLease reads a LEASE message; ok is false for any other message.
func parseLease(data []byte) (term time.Duration, ok bool, err error) {
	arg, ok := strings.CutPrefix(string(data), LeaseMessage+" ")
	if !ok {
		return 0, false, nil
	}
	term, err = time.ParseDuration(arg)
	if err != nil || term < 0 {
		return 0, true, fmt.Errorf("bad lease %q: want a duration of 0s or more", arg)
	}
	return term, true, nil
}

// renewLease takes a LEASE message: the tasks are fenced if nothing more is heard from the
// scheduler for term; a term of 0 ends fencing.
func (e *Executor) renewLease(term time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if term != e.leaseTerm {
		e.log.WithField("lease", term).Info("scheduler lease on the tasks set")
	}
	e.leaseTerm = term
	e.extendLease()
}

// launched takes the lease of a task launched: a LAUNCH came through the master too.
func (e *Executor) launched(ti mesos.TaskInfo) {
	term, err := launchLease(ti)
	if err != nil {
		e.log.WithError(err).WithField("task", ti.TaskID.Value).Warn("ignoring the task's lease")
		return
	}
	e.renewLease(term)
}

// extendLease restarts the lease's clock. Caller holds e.mu.
func (e *Executor) extendLease() {
	e.leaseGen++
	if e.leaseTimer != nil {
		e.leaseTimer.Stop()
		e.leaseTimer = nil
	}
	if e.leaseTerm <= 0 {
		return
	}
	gen, term := e.leaseGen, e.leaseTerm
	e.leaseTimer = time.AfterFunc(term, func() { e.leaseLapsed(gen, term) })
}

// leaseLapsed fences every task, unless the lease was renewed since timer gen was set.
func (e *Executor) leaseLapsed(gen int, term time.Duration) {
	e.mu.Lock()
	if gen != e.leaseGen {
		e.mu.Unlock()
		return
	}
	e.leaseTimer = nil
	tasks := make([]*task, 0, len(e.tasks))
	for _, t := range e.tasks {
		tasks = append(tasks, t)
	}
	e.mu.Unlock()
	if len(tasks) == 0 {
		return
	}
	e.log.WithFields(logrus.Fields{"lease": term, "tasks": len(tasks)}).
		Warn("no word from the scheduler for a whole lease: the agent may be cut off from the master, and the tasks relaunched elsewhere; killing them")
	for _, t := range tasks {
		t.fence(term)
	}
}
