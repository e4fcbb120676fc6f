package scheduler

import (
	"context"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/taskid"
)

func TestBackoffDelay(t *testing.T) {
	t.Parallel()
	tests := []struct {
		min, max time.Duration
		n        int
		want     time.Duration
	}{
		{time.Second, 5 * time.Minute, 1, time.Second},
		{time.Second, 5 * time.Minute, 2, 2 * time.Second},
		{time.Second, 5 * time.Minute, 5, 16 * time.Second},
		{time.Second, 5 * time.Minute, 9, 256 * time.Second},
		{time.Second, 5 * time.Minute, 10, 5 * time.Minute},
		{time.Second, 5 * time.Minute, 1000, 5 * time.Minute}, // no overflow
		{time.Second, time.Second, 3, time.Second},
		{300 * time.Millisecond, time.Second, 3, time.Second},
	}
	for _, tc := range tests {
		if got := backoffDelay(tc.min, tc.max, tc.n); got != tc.want {
			t.Errorf("backoffDelay(%v, %v, %d) = %v; want %v", tc.min, tc.max, tc.n, got, tc.want)
		}
	}
}

func status(s mesos.TaskState, src mesos.TaskStatus_Source, reason *mesos.TaskStatus_Reason, msg string) mesos.TaskStatus {
	st := mesos.TaskStatus{State: s.Enum(), Source: src.Enum(), Reason: reason}
	if msg != "" {
		st.Message = &msg
	}
	return st
}

func TestClassify(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		st     mesos.TaskStatus
		class  failureClass
		reason string
	}{
		{"unknown jobClass from the executor", status(mesos.TASK_ERROR, mesos.SOURCE_EXECUTOR, nil,
			`unknown jobClass "com.example.Missing" for SIMPLE job "j": this executor has no job registered under that name`), unhealable, "unknown jobClass"},
		{"unknown jobType", status(mesos.TASK_ERROR, mesos.SOURCE_EXECUTOR, nil, `unknown jobType "X"`), unhealable, "unknown jobType"},
		{"unparsable task data", status(mesos.TASK_ERROR, mesos.SOURCE_EXECUTOR, nil, "invalid task data: TaskInfo.data is empty"), unhealable, "invalid task data"},
		{"daemon without a schedule", status(mesos.TASK_ERROR, mesos.SOURCE_EXECUTOR, nil, `daemon job "d" has no usable schedule: cron "", zone "UTC"`), unhealable, "unusable daemon schedule"},
		{"process that cannot start", status(mesos.TASK_ERROR, mesos.SOURCE_EXECUTOR, nil, "start /bin/sh: resource temporarily unavailable"), retryable, "executor error"},
		{"invalid task from the master", status(mesos.TASK_ERROR, mesos.SOURCE_MASTER, mesos.REASON_TASK_INVALID.Enum(), "Task uses no resources"), unhealable, "invalid task"},
		{"unauthorized task", status(mesos.TASK_ERROR, mesos.SOURCE_MASTER, mesos.REASON_TASK_UNAUTHORIZED.Enum(), "Not authorized to launch as user 'x'"), unhealable, "task not authorized"},
		{"executor of an older app config", status(mesos.TASK_ERROR, mesos.SOURCE_MASTER, mesos.REASON_TASK_INVALID.Enum(),
			"ExecutorInfo is not compatible with existing ExecutorInfo with same ExecutorID"), retryable, "task refused for now"},
		{"offer too small", status(mesos.TASK_ERROR, mesos.SOURCE_MASTER, mesos.REASON_TASK_INVALID.Enum(),
			"Total resources cpus:1 required by task and its executor is more than available cpus:0.5"), retryable, "task refused for now"},
		{"fetch failure (mesos-local)", status(mesos.TASK_FAILED, mesos.SOURCE_AGENT, mesos.REASON_CONTAINER_LAUNCH_FAILED.Enum(),
			"Failed to launch container: fetch http://127.0.0.1:1/x.tar.gz: connection refused"), fetchFailed, "executor cannot be fetched"},
		{"fetch failure (Mesos)", status(mesos.TASK_FAILED, mesos.SOURCE_AGENT, mesos.REASON_CONTAINER_LAUNCH_FAILED.Enum(),
			"Failed to launch container: Failed to fetch all URIs for container 'c': exited with status 1"), fetchFailed, "executor cannot be fetched"},
		{"other container launch failure", status(mesos.TASK_FAILED, mesos.SOURCE_AGENT, mesos.REASON_CONTAINER_LAUNCH_FAILED.Enum(),
			"Failed to launch container: exec format error"), retryable, "failed (container_launch_failed)"},
		{"executor killed", status(mesos.TASK_FAILED, mesos.SOURCE_AGENT, mesos.REASON_EXECUTOR_TERMINATED.Enum(), "Executor terminated"), retryable, "failed (executor_terminated)"},
		{"agent lost", status(mesos.TASK_LOST, mesos.SOURCE_MASTER, mesos.REASON_AGENT_REMOVED.Enum(), ""), retryable, "lost (agent_removed)"},
		{"gone", status(mesos.TASK_GONE, mesos.SOURCE_MASTER, nil, ""), retryable, "gone"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := classify(tc.st)
			if f.class != tc.class || f.reason != tc.reason {
				t.Fatalf("classify = class %d, reason %q; want %d, %q", f.class, f.reason, tc.class, tc.reason)
			}
		})
	}
}

func TestRelaunches(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	shard := taskid.Meta{JobName: "j", Item: 0}
	lost := failure{class: retryable, reason: "lost", detail: "TASK_LOST"}
	fetch := failure{class: fetchFailed, reason: "executor cannot be fetched"}
	type step struct {
		do   string // fail, fetch, run, ran
		task string
		at   time.Duration
		// after the step
		wantFailures int
		wantDue      time.Duration // the shard is not due before t0+wantDue, due at it
		wantStop     bool          // a fetch failure now would stop the job
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"doubling to the cap", []step{
			{do: "fail", task: "a", at: 0, wantFailures: 1, wantDue: time.Second},
			{do: "fail", task: "b", at: time.Second, wantFailures: 2, wantDue: 3 * time.Second},
			{do: "fail", task: "c", at: 3 * time.Second, wantFailures: 3, wantDue: 7 * time.Second},
			{do: "fail", task: "d", at: 7 * time.Second, wantFailures: 4, wantDue: 11 * time.Second}, // capped at 4 s
			{do: "fail", task: "e", at: 11 * time.Second, wantFailures: 5, wantDue: 15 * time.Second},
		}},
		{"a short run does not reset", []step{
			{do: "fail", task: "a", at: 0, wantFailures: 1, wantDue: time.Second},
			{do: "run", task: "b", at: time.Second},
			{do: "fail", task: "b", at: 2 * time.Second, wantFailures: 2, wantDue: 4 * time.Second},
		}},
		{"a long run resets", []step{
			{do: "fail", task: "a", at: 0, wantFailures: 1, wantDue: time.Second},
			{do: "fail", task: "b", at: time.Second, wantFailures: 2, wantDue: 3 * time.Second},
			{do: "run", task: "c", at: 3 * time.Second},
			{do: "fail", task: "c", at: 3*time.Second + backoffResetAfter, wantFailures: 1, wantDue: 4*time.Second + backoffResetAfter},
		}},
		{"a finished run resets", []step{
			{do: "fail", task: "a", at: 0, wantFailures: 1, wantDue: time.Second},
			{do: "ran", task: "b", at: 2 * time.Second},
			{do: "fail", task: "c", at: 3 * time.Second, wantFailures: 1, wantDue: 4 * time.Second},
		}},
		{"fetch failures in a row stop", []step{
			{do: "fetch", task: "a", at: 0, wantFailures: 1, wantDue: time.Second},
			{do: "fetch", task: "b", at: time.Second, wantFailures: 2, wantDue: 3 * time.Second},
			{do: "fetch", task: "c", at: 3 * time.Second, wantFailures: 3, wantDue: 7 * time.Second},
			{do: "fetch", task: "d", at: 7 * time.Second, wantFailures: 4, wantDue: 11 * time.Second, wantStop: true},
		}},
		{"a run between fetch failures breaks the row", []step{
			{do: "fetch", task: "a", at: 0, wantFailures: 1, wantDue: time.Second},
			{do: "fetch", task: "b", at: time.Second, wantFailures: 2, wantDue: 3 * time.Second},
			{do: "fetch", task: "c", at: 3 * time.Second, wantFailures: 3, wantDue: 7 * time.Second},
			{do: "run", task: "d", at: 7 * time.Second},
			{do: "fail", task: "d", at: 8 * time.Second, wantFailures: 4, wantDue: 12 * time.Second},
			{do: "fetch", task: "e", at: 12 * time.Second, wantFailures: 5, wantDue: 16 * time.Second},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRelaunches(time.Second, 4*time.Second)
			for i, s := range tc.steps {
				now := t0.Add(s.at)
				switch s.do {
				case "fail", "fetch":
					f := lost
					if s.do == "fetch" {
						f = fetch
					}
					n, _ := r.failed(shard, s.task, f, true, now)
					if n != s.wantFailures {
						t.Fatalf("step %d: %d failures in a row; want %d", i, n, s.wantFailures)
					}
					due := t0.Add(s.wantDue)
					if r.due(shard, due.Add(-time.Millisecond)) || !r.due(shard, due) {
						t.Fatalf("step %d: due at the wrong time; want at +%v", i, s.wantDue)
					}
					if r.wake(due.Add(-time.Millisecond)) || !r.wake(due) || r.wake(due) {
						t.Fatalf("step %d: want one wake, when the backoff runs out", i)
					}
					if got := r.stops(shard, fetch); got != s.wantStop {
						t.Fatalf("step %d: a fetch failure now stops = %v; want %v", i, got, s.wantStop)
					}
				case "run":
					r.running(shard, s.task, now)
				case "ran":
					r.ran(shard)
				}
			}
		})
	}
	t.Run("unhealable stops at once, retryable never", func(t *testing.T) {
		r := newRelaunches(time.Second, time.Minute)
		if !r.stops(shard, failure{class: unhealable}) || r.stops(shard, lost) {
			t.Fatal("wrong stop decision")
		}
	})
	t.Run("waiting lists backed-off shards until due; forgetJob forgets them", func(t *testing.T) {
		r := newRelaunches(time.Second, time.Minute)
		r.failed(shard, "a", lost, true, t0)
		r.failed(taskid.Meta{JobName: "k", Item: 1}, "b", lost, false, t0) // not queued: nothing waits
		if w := r.waiting("", t0); len(w) != 1 || w[0].JobName != "j" || w[0].DelaySeconds != 1 || w[0].Failures != 1 {
			t.Fatalf("waiting = %+v; want shard j/0 with 1 s", w)
		}
		if w := r.waiting("j", t0.Add(time.Second)); len(w) != 0 {
			t.Fatalf("waiting once due = %+v; want none", w)
		}
		r.forgetJob("j")
		if !r.due(shard, t0) {
			t.Fatal("a forgotten shard must be due at once")
		}
	})
}

// An unhealable failure (an unknown jobClass) stops the job, unless the task ran a config an
// update has replaced since: its restart list names it, and its failure, arriving after the
// update cleared the stop, says nothing of the config now. Before, it stopped the fixed job.
func TestAFailureOfAReplacedConfigDoesNotStopTheJob(t *testing.T) {
	t.Parallel()
	w := newGroupWorld(t)
	ctx := context.Background()
	j, err := w.ld.store.Job(ctx, "fo")
	if err != nil {
		t.Fatal(err)
	}
	j.JobType, j.JobClass, j.ScriptCommandLine = config.Simple, "fixed.Job", "" // the fix: the tasks running now are restarted
	if _, err := w.ld.store.UpdateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	unknownClass := func(id taskid.ID, uuid string) mesos.TaskStatus {
		st := upd(id, mesos.TASK_ERROR, uuid)
		msg := "unknown jobClass \"broken.Job\""
		st.Message = &msg
		return st
	}
	// Task 0 ran the replaced config.
	w.ld.updates(ctx, []mesos.TaskStatus{unknownClass(w.tasks[0], "e0")})
	if _, stopped, err := w.ld.store.Stopped(ctx, "fo"); err != nil || stopped {
		t.Fatalf("stopped %v (%v) by a task of the replaced config; want not stopped", stopped, err)
	}
	// A task launched after the update runs the config now: its unknown jobClass stops the job.
	w.ld.updates(ctx, []mesos.TaskStatus{upd(w.tasks[1], mesos.TASK_KILLED, "k1")})
	fresh := taskid.New(taskid.Meta{JobName: "fo", Item: 1}, taskid.Failover, "S0")
	if err := w.ld.store.RecordLaunch(ctx, state.Launch{Tasks: []taskid.ID{fresh}}); err != nil {
		t.Fatal(err)
	}
	w.ld.updates(ctx, []mesos.TaskStatus{unknownClass(fresh, "e1")})
	if _, stopped, err := w.ld.store.Stopped(ctx, "fo"); err != nil || !stopped {
		t.Fatalf("stopped %v (%v) by a task of the config now; want stopped", stopped, err)
	}
}
