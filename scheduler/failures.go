package scheduler

import (
	"strings"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
)

// failureClass says whether relaunching a shard after an infrastructure failure can help.
type failureClass int

const (
	// retryable failures (a lost agent, a killed executor, …) are relaunched, backed off.
	retryable failureClass = iota
	// fetchFailed: the agent could not fetch the app's executor. A server may come back, so it
	// is retried, until fetchFailuresToStop launches of a shard in a row failed so.
	fetchFailed
	// unhealable failures fail again on every relaunch: the job is stopped.
	unhealable
)

// fetchFailuresToStop is how many launches of a shard in a row may fail to fetch the executor
// before its job is stopped. With the default backoff the fifth comes about 15 s after the
// first: long enough to ride out a restart of the artifact server, short of a minute.
const fetchFailuresToStop = 5

// failure is the classification of a status update that ended a task by an infrastructure
// failure.
type failure struct {
	class  failureClass
	reason string // short, for the stop mark, the API and /metrics: "unknown jobClass"
	detail string // state, Mesos reason and message, for the logs
}

// executorErrors are the TASK_ERROR messages of ejcloud-executor (executor/task.go) for a task
// it can never run, by prefix. Its other TASK_ERRORs (a process that cannot be started) may
// pass, so they are retried.
var executorErrors = []struct{ prefix, reason string }{
	{"unknown jobClass", "unknown jobClass"},
	{"unknown jobType", "unknown jobType"},
	{"invalid task data", "invalid task data"},
	{"daemon job", "unusable daemon schedule"}, // "daemon job %q has no usable schedule: …"
}

// masterRetryable are the TASK_ERROR messages of the master's task validation (MESOS.md §1.9)
// that depend on the moment rather than on the task: the ExecutorInfo of an executor that
// still runs an older app config, and the resources of the offer it was launched on.
var masterRetryable = []string{
	"ExecutorInfo is not compatible",
	"more than available",
}

// classify tells what retrying can do about a task that ended with st, an infrastructure
// failure (SPEC §5.7: FAILED without the job-failure marker, ERROR, LOST, DROPPED, GONE, …).
func classify(st mesos.TaskStatus) failure {
	msg := st.GetMessage()
	f := failure{class: retryable, detail: st.GetState().String()}
	if st.Reason != nil {
		f.detail += " " + st.Reason.String()
	}
	if msg != "" {
		f.detail += ": " + msg
	}
	switch st.GetState() {
	case mesos.TASK_ERROR:
		for _, e := range executorErrors {
			if strings.HasPrefix(msg, e.prefix) {
				f.class, f.reason = unhealable, e.reason
				return f
			}
		}
		if st.GetSource() == mesos.SOURCE_EXECUTOR {
			f.reason = "executor error"
			return f
		}
		// The master refused the task (MESOS.md §1.9.3): the task description itself is
		// wrong, or the framework may not launch it; the same task is refused again.
		for _, m := range masterRetryable {
			if strings.Contains(msg, m) {
				f.reason = "task refused for now"
				return f
			}
		}
		f.class, f.reason = unhealable, "invalid task"
		if st.GetReason() == mesos.REASON_TASK_UNAUTHORIZED {
			f.reason = "task not authorized"
		}
		return f
	case mesos.TASK_FAILED:
		// Mesos: "Failed to launch container: Failed to fetch all URIs for container …";
		// mesos-local: "Failed to launch container: fetch <uri>: …" (MESOS.md §7.3).
		if st.GetReason() == mesos.REASON_CONTAINER_LAUNCH_FAILED && strings.Contains(strings.ToLower(msg), "fetch") {
			f.class, f.reason = fetchFailed, "executor cannot be fetched"
			return f
		}
	}
	f.reason = strings.ToLower(strings.TrimPrefix(st.GetState().String(), "TASK_"))
	if st.Reason != nil {
		f.reason += " (" + strings.ToLower(strings.TrimPrefix(st.Reason.String(), "REASON_")) + ")"
	}
	return f
}
