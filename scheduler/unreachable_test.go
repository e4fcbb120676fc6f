package scheduler

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	dto "github.com/prometheus/client_model/go"

	"github.com/ejcloud/ejcloud/eventtrace"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/taskid"
)

// fromMaster is an update the master sends: no uuid, so nothing to acknowledge.
func fromMaster(id taskid.ID, s mesos.TaskState, reason mesos.TaskStatus_Reason) mesos.TaskStatus {
	return mesos.TaskStatus{TaskID: mesos.TaskID{Value: id.String()}, State: s.Enum(), AgentID: &mesos.AgentID{Value: id.AgentID},
		Source: mesos.SOURCE_MASTER.Enum(), Reason: reason.Enum()}
}

// A busy leader reads its event stream late: when a task's unreachable timeout passes, its
// agent may have come back already and reported the task finished in updates the leader has
// not read. (The 600-job soak relaunched a thousand shards that had run, the leader 11 s
// behind the stream.) So the timeout asks Mesos first, and the answer, which comes after those
// updates, decides: a task that finished is not relaunched; one Mesos still calls unreachable
// is lost and its shard goes to failover.
//
// The task results and ejcloud_status_updates_total count each shard's end once: the finished
// task (its update sent again too), and the lost one (traced and counted as TASK_LOST from the
// scheduler); not the reconciliation's TASK_GONE of the finished task, nor its TASK_UNREACHABLE
// of the other.
func TestAnUnreachableTaskIsLostOnlyOnceMesosConfirmsIt(t *testing.T) {
	t.Parallel()
	w, tr := newTracedGroupWorld(t)
	ctx := context.Background()
	w.ld.cfg.UnreachableTimeout = 0 // every unreachable task is past it
	w.ld.updates(ctx, []mesos.TaskStatus{
		fromMaster(w.tasks[0], mesos.TASK_UNREACHABLE, mesos.REASON_AGENT_REMOVED),
		fromMaster(w.tasks[1], mesos.TASK_UNREACHABLE, mesos.REASON_AGENT_REMOVED),
	})
	w.ld.timeUnreachable(ctx)
	running, failover := w.queues(t)
	if len(running) != 3 || len(failover) != 0 {
		t.Fatalf("at the timeout, before Mesos answered: running %v, failover %v; want all 3 running, none in failover", running, failover)
	}
	w.mesos.mu.Lock()
	asked := slices.Sorted(slices.Values(w.mesos.reconciled))
	w.mesos.mu.Unlock()
	if want := []string{w.tasks[0].String(), w.tasks[1].String()}; !slices.Equal(asked, want) {
		t.Fatalf("reconciliation asked for %v; want %v", asked, want)
	}

	// In the stream, before the answers: the agent is back, and task 0 finished while cut off.
	w.ld.updates(ctx, []mesos.TaskStatus{
		upd(w.tasks[0], mesos.TASK_FINISHED, "u0"),
		upd(w.tasks[0], mesos.TASK_FINISHED, "u0"),                           // sent again: its acknowledgement was lost
		fromMaster(w.tasks[0], mesos.TASK_GONE, mesos.REASON_RECONCILIATION), // finished and acknowledged: forgotten
		fromMaster(w.tasks[1], mesos.TASK_UNREACHABLE, mesos.REASON_RECONCILIATION),
	})
	running, failover = w.queues(t)
	if fmt.Sprint(running) != fmt.Sprint([]string{w.tasks[2].String()}) || fmt.Sprint(failover) != "[fo@-@1]" {
		t.Fatalf("after the answers: running %v, failover %v; want only task 2 running and [fo@-@1] (task 0 finished, task 1 lost)", running, failover)
	}
	if s, f := tr.results.Pending(eventtrace.Minute); s != 1 || f != 1 {
		t.Errorf("task results %d/%d; want 1 success (task 0) and 1 failure (task 1 lost)", s, f)
	}
	if err := tr.w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if lost, err := tr.db.StatusTraces(ctx, eventtrace.Query{Filters: map[string]string{"state": "TASK_LOST"}}); err != nil || lost.Total != 1 || lost.Rows[0].TaskID != w.tasks[1].String() {
		t.Errorf("TASK_LOST traces %+v (%v); want task 1's", lost, err)
	}
	if finished, err := tr.db.StatusTraces(ctx, eventtrace.Query{Filters: map[string]string{"state": "TASK_FINISHED"}}); err != nil || finished.Total != 1 {
		t.Errorf("TASK_FINISHED traces %+v (%v); want one, the update sent again not traced again", finished, err)
	}
	for state, want := range map[string]float64{"TASK_UNREACHABLE": 2, "TASK_FINISHED": 1, "TASK_LOST": 1, "TASK_GONE": 0} {
		var m dto.Metric
		if err := w.ld.inst.metrics.updates.WithLabelValues(state).Write(&m); err != nil || m.GetCounter().GetValue() != want {
			t.Errorf("ejcloud_status_updates_total{state=%q} = %v; want %v", state, m.GetCounter().GetValue(), want)
		}
	}
	w.ld.timeUnreachable(ctx)
	w.mesos.mu.Lock()
	defer w.mesos.mu.Unlock()
	if len(w.mesos.reconciled) != 2 {
		t.Errorf("reconciliations asked after both were settled: %v; want no more", w.mesos.reconciled[2:])
	}
}

// The unreachable timeout counts from when Mesos found the task unreachable (its
// unreachable_time), not from when this leader first heard of it: a leader taking over 20
// minutes into a partition asks about the task at once, and one that ends as lost forgets it
// (its DAEMON heartbeat state among the rest).
func TestTheUnreachableTimeoutCountsFromMesossUnreachableTime(t *testing.T) {
	t.Parallel()
	w := newGroupWorld(t)
	ctx := context.Background()
	w.ld.cfg.UnreachableTimeout = 15 * time.Minute
	// The master's clock runs an hour behind the scheduler's: only its own two times are compared.
	master := time.Now().Add(-time.Hour)
	sent := float64(master.UnixNano()) / 1e9
	old := fromMaster(w.tasks[0], mesos.TASK_UNREACHABLE, mesos.REASON_AGENT_REMOVED)
	old.UnreachableTime, old.Timestamp = &mesos.TimeInfo{Nanoseconds: master.Add(-20 * time.Minute).UnixNano()}, &sent
	fresh := fromMaster(w.tasks[1], mesos.TASK_UNREACHABLE, mesos.REASON_AGENT_REMOVED)
	fresh.UnreachableTime, fresh.Timestamp = &mesos.TimeInfo{Nanoseconds: master.Add(-time.Minute).UnixNano()}, &sent
	w.ld.setIdle(w.tasks[0].String(), true, false)
	w.ld.updates(ctx, []mesos.TaskStatus{old, fresh})
	w.ld.timeUnreachable(ctx)
	w.mesos.mu.Lock()
	asked := slices.Clone(w.mesos.reconciled)
	w.mesos.mu.Unlock()
	if want := []string{w.tasks[0].String()}; !slices.Equal(asked, want) {
		t.Fatalf("asked Mesos about %v; want only the task unreachable for 20 minutes, %v", asked, want)
	}
	w.ld.updates(ctx, []mesos.TaskStatus{fromMaster(w.tasks[0], mesos.TASK_UNREACHABLE, mesos.REASON_RECONCILIATION)})
	if running, failover := w.queues(t); slices.Contains(running, w.tasks[0].String()) || fmt.Sprint(failover) != "[fo@-@0]" {
		t.Fatalf("running %v, failover %v; want task 0 lost and failed over", running, failover)
	}
	w.ld.mu.Lock()
	idle := len(w.ld.idle)
	w.ld.mu.Unlock()
	if idle != 0 {
		t.Errorf("%d heartbeat states kept after the task was lost; want none", idle)
	}
}

// newTracedGroupWorld is newGroupWorld whose leader traces into an SQLite database of the test.
func newTracedGroupWorld(t *testing.T) (*groupWorld, *tracer) {
	t.Helper()
	w := newGroupWorld(t)
	tr, err := openTracer(context.Background(), Config{EventTraceDB: "sqlite://" + filepath.Join(t.TempDir(), "t.db")}, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tr.close)
	w.ld.inst.trace = tr
	return w, tr
}

// A task lost at its unreachable timeout whose end was recorded meanwhile (its running node
// gone) was not lost: no TASK_LOST is counted for it.
func TestATaskEndedMeanwhileIsNotCountedLost(t *testing.T) {
	t.Parallel()
	w := newGroupWorld(t)
	ctx := context.Background()
	if _, err := w.other.EndTask(ctx, w.tasks[0], state.NoFollowUp); err != nil {
		t.Fatal(err)
	}
	w.ld.lost(ctx, w.tasks[0].String())
	var m dto.Metric
	if err := w.ld.inst.metrics.updates.WithLabelValues("TASK_LOST").Write(&m); err != nil || m.GetCounter().GetValue() != 0 {
		t.Errorf("ejcloud_status_updates_total{state=\"TASK_LOST\"} = %v (%v); want 0: the task had ended", m.GetCounter().GetValue(), err)
	}
}
