package scheduler

import (
	"context"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/scheduler/producer"
	"github.com/ejcloud/ejcloud/taskid"
)

// Real Mesos forgets a KILL for a task on an unreachable agent: when the agent comes back, the
// task runs on, and the master reports it RUNNING. A task this leader killed — for a
// replacement, an update that restarts the job's tasks, or a disable — is then killed again,
// until it ends; a task it did not kill, reported running, is left alone. (A disabled job's
// task would be killed by plan.Decide anyway.)
func TestAKilledTaskReportedRunningIsKilledAgain(t *testing.T) {
	for _, tc := range []struct {
		name string
		kill func(t *testing.T, ctx context.Context, w replaceWorld, ld *leader)
	}{
		{"replaced", func(t *testing.T, ctx context.Context, w replaceWorld, ld *leader) {
			w.trigger(t, ctx, ld)
			ld.replaceQueued(ctx)
		}},
		{"restarted by an update", func(t *testing.T, ctx context.Context, w replaceWorld, ld *leader) {
			j, err := w.base.Job(ctx, w.job)
			if err != nil {
				t.Fatal(err)
			}
			j.ScriptCommandLine = "echo new"
			ld.prod = producer.New(ld.store, nil, ld.log, nil) // the update reschedules the job
			serving(t, ctx, ld, func() {
				if err := ld.inst.UpdateJob(ctx, j); err != nil {
					t.Fatal(err)
				}
			})
		}},
		{"disabled", func(t *testing.T, ctx context.Context, w replaceWorld, ld *leader) {
			serving(t, ctx, ld, func() {
				if err := ld.inst.DisableJob(ctx, w.job); err != nil {
					t.Fatal(err)
				}
			})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			w := newReplaceWorld(t, ctx, func(j *config.Job) { j.Misfire = true })
			ld := w.leader(t, ctx)
			w.firstRun(t, ctx, ld)
			running, err := w.base.RunningOf(ctx, w.job)
			if err != nil || len(running) != 2 {
				t.Fatalf("%d tasks running (%v); want 2", len(running), err)
			}
			reported := func(task string, state mesos.TaskState, reason mesos.TaskStatus_Reason) {
				id, err := taskid.Parse(task)
				if err != nil {
					t.Fatal(err)
				}
				ld.update(ctx, mesos.TaskStatus{TaskID: mesos.TaskID{Value: task}, State: state.Enum(),
					AgentID: &mesos.AgentID{Value: id.AgentID}, Source: mesos.SOURCE_MASTER.Enum(), Reason: reason.Enum()})
			}
			kills := func(what string, want int) {
				t.Helper()
				if _, killed := w.fake.launchesAndKills(); killed != want {
					t.Fatalf("%s: %d kills; want %d", what, killed, want)
				}
			}
			reported(running[0].TaskID, mesos.TASK_RUNNING, mesos.REASON_RECONCILIATION)
			kills("a task not killed, reported running", 0)
			tc.kill(t, ctx, w, ld)
			kills("the kill", 2)
			// The kills were lost with the agent's unreachability; it comes back.
			reported(running[1].TaskID, mesos.TASK_RUNNING, mesos.REASON_AGENT_REREGISTERED)
			kills("a killed task reported running again", 3)
			// Once it ends, it is forgotten: the book of kills holds only tasks that run.
			reported(running[1].TaskID, mesos.TASK_KILLED, mesos.REASON_EXECUTOR_TERMINATED)
			if _, held := ld.killed[running[1].TaskID]; held || len(ld.killed) != 1 {
				t.Fatalf("killed tasks held after one ended: %v; want only the other", ld.killed)
			}
		})
	}
}

// serving runs f while ld's event loop serves a subscription, and stops the loop after it.
func serving(t *testing.T, ctx context.Context, ld *leader, f func()) {
	t.Helper()
	sctx, stop := context.WithCancel(ctx)
	served := make(chan error, 1)
	go func() { served <- ld.serve(sctx, make(chan error)) }()
	for ld.needsMesos() != nil { // the loop has begun serving
		select {
		case <-ctx.Done():
			t.Fatal("the loop did not begin serving")
		case <-time.After(time.Millisecond):
		}
	}
	f()
	stop()
	<-served
}
