package plan

import (
	mesos "github.com/mesos/mesos-go/api/v1/lib"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/state"
)

// Facts is what the leader knows, from its model, of a status update's task.
type Facts struct {
	State     mesos.TaskState
	JobFailed bool // a TASK_FAILED whose data says the job itself failed (not the infrastructure)
	Job       config.Job
	JobGone   bool // the job was deleted
	Disabled  bool // the job or its app is disabled
	Current   bool // the task is its shard's running task (the running node holds its id)
	Restarted bool // an update of its job that changes what a task is made of came after its launch
	Item      int  // the task's shard
	// Replaced: the task's run was given up for a newer fire (concurrencyPolicy Replace), and
	// the task killed for it: it is not relaunched however it ends, nor left running.
	Replaced bool
	// NeverRan: a TASK_DROPPED whose reason says Mesos never delivered the task (NeverRan).
	NeverRan bool
}

// NeverRan says whether an update says the task never ran: Mesos dropped it before any
// executor had it — its offers void (a stream that ended, a rescind), its executor terminating
// with the last one's updates unacknowledged (the executor id is not free again until they
// are), or lost in transit while its agent restarted. Not every TASK_DROPPED: one for a task
// an agent no longer reports at re-registration (REASON_RECONCILIATION) may have run.
func NeverRan(st mesos.TaskStatus) bool {
	if st.GetState() != mesos.TASK_DROPPED {
		return false
	}
	switch st.GetReason() {
	case mesos.REASON_INVALID_OFFERS, mesos.REASON_EXECUTOR_TERMINATED, mesos.REASON_AGENT_RESTARTED, mesos.REASON_RESOURCES_UNKNOWN:
		return true
	}
	return false
}

// gone reports whether the task's shard no longer exists: an update lowered the job's
// shardingTotalCount (SPEC §1: a shard is in [0, shardingTotalCount)).
func (f Facts) gone() bool { return f.Item >= f.Job.ShardingTotalCount }

// Kind is what an update is, for the leader.
type Kind int

const (
	// Heard: STAGING, STARTING or KILLING — the agent speaks of the task; nothing to write.
	Heard Kind = iota
	// Unreachable: the task counts as running until the unreachable timeout.
	Unreachable
	// Running: the shard's running task runs; nothing to write.
	Running
	// Kill: a running task that is not (or no longer) its shard's, whose job is gone or
	// disabled, or that runs a config an update replaced.
	Kill
	// End: the task ended; its running node goes, with Follow.
	End
)

// Meaning is what an update means (SPEC §5.7).
type Meaning struct {
	Kind   Kind
	Follow state.FollowUp
	// Failed: an infrastructure failure of an existing job; it counts toward the shard's
	// failover backoff and may stop the job.
	Failed bool
}

// Decide says what an update means. A running task whose job is gone or disabled, or that an
// update restarts, is killed: the kill that the delete, disable or update asked for may have
// been lost with a leader, a subscription or an unreachable agent, and the reconciliation
// after every subscription brings each running task here.
// FINISHED and the job's own failures end the task whatever the job says; a killed DAEMON task
// is run again unless disabled; any other end (FAILED,
// ERROR, LOST, DROPPED, GONE, GONE_BY_OPERATOR, UNKNOWN) is an infrastructure failure, and
// the shard of a failover-enabled or DAEMON job is queued for relaunch unless the job or its
// app is disabled or the job is gone. A task that never ran (NeverRan) is queued so too
// whatever the job's failover setting: failover=false keeps a crashed shard from running
// again, and this one has not run at all (were it left, the run would be lost to a transient
// refusal of Mesos). A shard beyond the job's shardingTotalCount (an update lowered it) is
// neither relaunched nor left running.
func Decide(f Facts) Meaning {
	switch f.State {
	case mesos.TASK_STAGING, mesos.TASK_STARTING, mesos.TASK_KILLING:
		return Meaning{Kind: Heard}
	case mesos.TASK_UNREACHABLE:
		return Meaning{Kind: Unreachable}
	case mesos.TASK_RUNNING:
		if f.JobGone || f.Disabled || !f.Current || f.Restarted || f.gone() || f.Replaced {
			return Meaning{Kind: Kill}
		}
		return Meaning{Kind: Running}
	case mesos.TASK_FINISHED:
		return Meaning{Kind: End}
	case mesos.TASK_FAILED:
		if f.JobFailed {
			return Meaning{Kind: End}
		}
	case mesos.TASK_KILLED:
		if !f.JobGone && f.Job.JobExecutionType == config.Daemon && !f.Disabled && !f.gone() {
			return Meaning{Kind: End, Follow: state.Rerun}
		}
		return Meaning{Kind: End}
	}
	m := Meaning{Kind: End, Failed: !f.JobGone}
	if !f.JobGone && (f.Job.Failover || f.Job.JobExecutionType == config.Daemon || f.NeverRan) && !f.Disabled && !f.gone() && !f.Replaced {
		m.Follow = state.Failover
	}
	return m
}

// NeedsJob says whether Decide reads the job's config, disable state and running node for
// this update: FINISHED and the job's own failures end the task whatever the job says.
func NeedsJob(s mesos.TaskState, jobFailed bool) bool {
	switch s {
	case mesos.TASK_STAGING, mesos.TASK_STARTING, mesos.TASK_KILLING, mesos.TASK_UNREACHABLE, mesos.TASK_FINISHED:
		return false
	case mesos.TASK_FAILED:
		return !jobFailed
	}
	return true
}
