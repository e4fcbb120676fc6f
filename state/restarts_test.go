package state_test

import (
	"errors"
	"testing"

	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/taskid"
)

// An update that changes what a task is made of lists, in its own multi, the job's tasks
// running then; an update that fails or restarts nothing lists none. A list goes when none of
// its tasks runs any more (PruneRestarts), or with its job.
func TestARestartingUpdateListsTheRunningTasks(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	must(t, s.CreateApp(ctx, testApp("app")), "CreateApp")
	j := testJob("job", "app")
	must(t, s.CreateJob(ctx, j), "CreateJob")
	run := func(item int) taskid.ID {
		id := taskid.New(taskid.Meta{JobName: "job", Item: item}, taskid.Ready, "S0")
		must(t, s.RecordLaunch(ctx, state.Launch{Tasks: []taskid.ID{id}}), "RecordLaunch")
		return id
	}
	restarted := func(id taskid.ID, want bool) {
		t.Helper()
		if got, err := s.Restarted(ctx, id); err != nil || got != want {
			t.Fatalf("Restarted(%v) = %v, %v; want %v", id, got, err, want)
		}
	}
	r0, r1 := run(0), run(1)

	moved := j
	moved.AppName, moved.MemoryMB = "gone", 64
	if _, err := s.UpdateJob(ctx, moved); !errors.Is(err, state.ErrAppNotFound) {
		t.Fatalf("UpdateJob to a missing app: %v; want ErrAppNotFound", err)
	}
	restarted(r0, false)
	rescheduled := j
	rescheduled.Cron = "0 0 * * * ?"
	_, err := s.UpdateJob(ctx, rescheduled)
	must(t, err, "UpdateJob of the cron")
	restarted(r0, false)

	bigger := rescheduled
	bigger.MemoryMB = 64
	_, err = s.UpdateJob(ctx, bigger)
	must(t, err, "UpdateJob of the memory")
	r2 := run(2)
	restarted(r0, true)
	restarted(r1, true)
	restarted(r2, false)

	_, err = s.EndTask(ctx, r0, state.NoFollowUp)
	must(t, err, "EndTask r0")
	must(t, s.PruneRestarts(ctx), "PruneRestarts")
	restarted(r1, true)
	_, err = s.EndTask(ctx, r1, state.NoFollowUp)
	must(t, err, "EndTask r1")
	must(t, s.PruneRestarts(ctx), "PruneRestarts")
	restarted(r1, false)

	// Another restarting update lists r2, and the list goes with the job.
	smaller := bigger
	smaller.MemoryMB = 48
	_, err = s.UpdateJob(ctx, smaller)
	must(t, err, "UpdateJob with r2 running")
	restarted(r2, true)
	must(t, s.DeleteJob(ctx, "job"), "DeleteJob")
	restarted(r2, false)
}
