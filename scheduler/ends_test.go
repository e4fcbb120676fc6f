package scheduler

import (
	"context"
	"slices"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/taskdata"
	"github.com/ejcloud/ejcloud/taskend"
)

func TestEndUnknownOnlyForAnExecutorsDeathReportedByItsAgent(t *testing.T) {
	t.Parallel()
	agent := &mesos.AgentID{Value: "S1"}
	for _, tc := range []struct {
		name   string
		state  mesos.TaskState
		source mesos.TaskStatus_Source
		reason mesos.TaskStatus_Reason
		agent  *mesos.AgentID
		want   bool
	}{
		{"executor killed", mesos.TASK_FAILED, mesos.SOURCE_AGENT, mesos.REASON_EXECUTOR_TERMINATED, agent, true},
		{"not back after an agent restart", mesos.TASK_GONE, mesos.SOURCE_AGENT, mesos.REASON_EXECUTOR_REREGISTRATION_TIMEOUT, agent, true},
		{"lost with its executor (older agents)", mesos.TASK_LOST, mesos.SOURCE_AGENT, mesos.REASON_EXECUTOR_TERMINATED, agent, true},
		{"container out of memory", mesos.TASK_FAILED, mesos.SOURCE_AGENT, mesos.REASON_CONTAINER_LIMITATION_MEMORY, agent, true},
		{"the executor's own failure", mesos.TASK_FAILED, mesos.SOURCE_EXECUTOR, mesos.REASON_EXECUTOR_TERMINATED, agent, false},
		{"a reconciliation answer", mesos.TASK_FAILED, mesos.SOURCE_MASTER, mesos.REASON_RECONCILIATION, agent, false},
		{"never registered: nothing ran", mesos.TASK_FAILED, mesos.SOURCE_AGENT, mesos.REASON_EXECUTOR_REGISTRATION_TIMEOUT, agent, false},
		{"the launch failed", mesos.TASK_FAILED, mesos.SOURCE_AGENT, mesos.REASON_CONTAINER_LAUNCH_FAILED, agent, false},
		{"dropped", mesos.TASK_DROPPED, mesos.SOURCE_AGENT, mesos.REASON_EXECUTOR_TERMINATED, agent, false},
		{"finished", mesos.TASK_FINISHED, mesos.SOURCE_AGENT, mesos.REASON_EXECUTOR_TERMINATED, agent, false},
		{"no agent to ask", mesos.TASK_FAILED, mesos.SOURCE_AGENT, mesos.REASON_EXECUTOR_TERMINATED, nil, false},
	} {
		st := mesos.TaskStatus{State: tc.state.Enum(), Source: tc.source.Enum(), Reason: tc.reason.Enum(), AgentID: tc.agent}
		if got := endUnknown(st); got != tc.want {
			t.Errorf("%s: endUnknown = %v; want %v", tc.name, got, tc.want)
		}
	}
}

func TestEndedAsSaysWhatTheRunDidAndIsAcknowledgedAsTheAgentsUpdate(t *testing.T) {
	t.Parallel()
	msg := "Executor terminated"
	agentSaid := mesos.TaskStatus{TaskID: mesos.TaskID{Value: "t1"}, AgentID: &mesos.AgentID{Value: "S1"}, UUID: []byte("u1"),
		State: mesos.TASK_FAILED.Enum(), Source: mesos.SOURCE_AGENT.Enum(), Reason: mesos.REASON_EXECUTOR_TERMINATED.Enum(), Message: &msg}
	for _, tc := range []struct {
		rec       taskend.Record
		state     mesos.TaskState
		jobFailed bool
	}{
		{taskend.Record{Exited: true}, mesos.TASK_FINISHED, false},
		{taskend.Record{Exited: true, Code: 3}, mesos.TASK_FAILED, true},
		{taskend.Record{Code: 9}, mesos.TASK_FAILED, false}, // killed, perhaps with its executor: failed over
	} {
		got := endedAs(agentSaid, tc.rec)
		d, _ := taskdata.DecodeStatus(got.Data)
		if got.GetState() != tc.state || d.JobFailed != tc.jobFailed {
			t.Errorf("%v: %v jobFailed %v; want %v jobFailed %v", tc.rec, got.GetState(), d.JobFailed, tc.state, tc.jobFailed)
		}
		if string(got.UUID) != "u1" || got.AgentID.Value != "S1" || got.TaskID.Value != "t1" {
			t.Errorf("%v: %v no longer acknowledges the agent's update", tc.rec, got.String())
		}
	}
	if agentSaid.GetState() != mesos.TASK_FAILED || agentSaid.GetReason() != mesos.REASON_EXECUTOR_TERMINATED {
		t.Errorf("endedAs changed the agent's update: %v", agentSaid.String())
	}
}

// A read of a run's end given up because its subscription's stream ended does not keep the
// task's updates from being recorded on the next subscription: Mesos sends the agent's
// update again, and it is checked afresh, recorded and acknowledged.
func TestAnEndCheckGivenUpWithItsStreamDoesNotHoldTheTasksUpdates(t *testing.T) {
	t.Parallel()
	w := newGroupWorld(t)
	id := w.tasks[0]
	st := upd(id, mesos.TASK_FAILED, "u-agent")
	st.Source, st.Reason = mesos.SOURCE_AGENT.Enum(), mesos.REASON_EXECUTOR_TERMINATED.Enum()

	// Every read slot is taken, so the check waits for one until its stream ends.
	for range cap(w.ld.endChecks) {
		w.ld.endChecks <- struct{}{}
	}
	stream, end := context.WithCancel(context.Background())
	w.ld.updates(stream, []mesos.TaskStatus{st})
	end()
	for range cap(w.ld.endChecks) {
		<-w.ld.endChecks
	}

	// The next subscription; Mesos resends the update.
	w.ld.sub = &subscription{caller: w.mesos, frameworkID: "fw-test"}
	ctx := context.Background()
	w.ld.updates(ctx, []mesos.TaskStatus{st})
	select {
	case f := <-w.ld.exec: // the check hands the update back to the event loop
		f(ctx)
	case <-time.After(2 * endCheckTimeout):
		t.Fatalf("the resent update of %s was not checked: it is dropped for good", id)
	}
	await.True(t, 10*time.Second, "the update acknowledged", func() bool { return w.mesos.count() == 1 })
	if running, failover := w.queues(t); slices.Contains(running, id.String()) || len(failover) != 1 {
		t.Fatalf("running %v, failover %v; want the task failed over", running, failover)
	}
}
