package state_test

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/taskid"
)

func TestStopMark(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	must(t, s.CreateApp(ctx, testApp("app")), "CreateApp")
	must(t, s.CreateJob(ctx, testJob("job", "app")), "CreateJob")
	launch := func(item int) taskid.ID {
		id := taskid.New(taskid.Meta{JobName: "job", Item: item}, taskid.Ready, "S0")
		must(t, s.RecordLaunch(ctx, state.Launch{Tasks: []taskid.ID{id}}), "RecordLaunch")
		return id
	}
	since := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	first := state.Stop{Reason: "unknown jobClass", Message: `unknown jobClass "x"`, State: "TASK_ERROR", Since: since}

	if _, ok, err := s.Stopped(ctx, "job"); err != nil || ok {
		t.Fatalf("Stopped before any stop = %v, %v; want not stopped", ok, err)
	}
	id := launch(0)
	first.TaskID = id.String()
	got, err := s.EndTaskAndStop(ctx, id, first)
	must(t, err, "EndTaskAndStop")
	if !got.Removed || got.Requeued || !got.Stopped {
		t.Fatalf("EndTaskAndStop = %+v; want removed and stopped", got)
	}
	if r, _ := s.RunningOf(ctx, "job"); len(r) != 0 {
		t.Fatalf("running = %v; want the task ended", r)
	}
	if fos, _ := s.Failovers(ctx); len(fos) != 0 {
		t.Fatalf("failover = %v; a stopped job's shard must not be queued", fos)
	}
	mark, ok, err := s.Stopped(ctx, "job")
	if err != nil || !ok || mark != first {
		t.Fatalf("Stopped = %+v, %v, %v; want %+v", mark, ok, err, first)
	}

	// A second shard failing the same way ends, and the first reason stays.
	id2 := launch(1)
	got, err = s.EndTaskAndStop(ctx, id2, state.Stop{Reason: "other", TaskID: id2.String()})
	must(t, err, "EndTaskAndStop second")
	if !got.Removed || got.Stopped {
		t.Fatalf("EndTaskAndStop of a stopped job = %+v; want removed, mark kept", got)
	}
	if mark, _, _ := s.Stopped(ctx, "job"); mark != first {
		t.Fatalf("mark = %+v; want the first one kept", mark)
	}
	// A duplicate update changes nothing.
	if got, err := s.EndTaskAndStop(ctx, id, first); err != nil || got.Removed || got.Stopped {
		t.Fatalf("duplicate EndTaskAndStop = %+v, %v; want nothing done", got, err)
	}
	if names, err := s.StoppedJobs(ctx); err != nil || len(names) != 1 || !names["job"] {
		t.Fatalf("StoppedJobs = %v, %v; want job", names, err)
	}

	cleared, err := s.ClearStop(ctx, "job")
	if err != nil || !cleared {
		t.Fatalf("ClearStop = %v, %v; want cleared", cleared, err)
	}
	if cleared, err := s.ClearStop(ctx, "job"); err != nil || cleared {
		t.Fatalf("second ClearStop = %v, %v; want nothing to clear", cleared, err)
	}
	if _, ok, _ := s.Stopped(ctx, "job"); ok {
		t.Fatal("job still stopped after ClearStop")
	}

	// Deleting the job takes its mark with it.
	id3 := launch(2)
	_, err = s.EndTaskAndStop(ctx, id3, first)
	must(t, err, "EndTaskAndStop third")
	must(t, s.DeleteJob(ctx, "job"), "DeleteJob")
	if names, _ := s.StoppedJobs(ctx); len(names) != 0 {
		t.Fatalf("StoppedJobs after DeleteJob = %v; want none", names)
	}
}

// A write of fires that clears the stop mark (an operator's trigger) does it in the same multi:
// a refused write keeps the mark, a written one removes it with the run it queues.
func TestFiresThatClearTheStopMark(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	must(t, s.CreateApp(ctx, testApp("app")), "CreateApp")
	must(t, s.CreateJob(ctx, testJob("job", "app")), "CreateJob")
	id := taskid.New(taskid.Meta{JobName: "job", Item: 0}, taskid.Ready, "S0")
	must(t, s.RecordLaunch(ctx, state.Launch{Tasks: []taskid.ID{id}}), "RecordLaunch")
	_, err := s.EndTaskAndStop(ctx, id, state.Stop{Reason: "unknown jobClass", TaskID: id.String()})
	must(t, err, "EndTaskAndStop")
	trigger := state.Fires{Accumulate: true, Refuse: true, App: "app", ClearStop: true,
		Entries: []state.FireEntry{{Slot: time.Now(), Count: 1, Outcome: state.OutcomeFired, Triggered: true}}}

	must(t, s.DisableJob(ctx, "job"), "DisableJob")
	if _, err := s.RecordFires(ctx, "job", trigger); !errors.Is(err, state.ErrDisabled) {
		t.Fatalf("trigger of a disabled job: %v; want ErrDisabled", err)
	}
	if _, ok, err := s.Stopped(ctx, "job"); err != nil || !ok {
		t.Fatalf("stop mark after a refused trigger: %v, %v; want kept", ok, err)
	}
	cleared, err := s.EnableJob(ctx, "job")
	must(t, err, "EnableJob")
	if _, ok, err := s.Stopped(ctx, "job"); err != nil || ok || !cleared {
		t.Fatalf("stop mark after the enable: %v, %v (cleared %v); want cleared in the enable's multi", ok, err, cleared)
	}
	again := taskid.New(taskid.Meta{JobName: "job", Item: 0}, taskid.Ready, "S1")
	must(t, s.RecordLaunch(ctx, state.Launch{Tasks: []taskid.ID{again}}), "RecordLaunch")
	_, err = s.EndTaskAndStop(ctx, again, state.Stop{Reason: "unknown jobClass", TaskID: again.String()})
	must(t, err, "EndTaskAndStop")
	_, err = s.RecordFires(ctx, "job", trigger)
	must(t, err, "RecordFires")
	if _, ok, err := s.Stopped(ctx, "job"); err != nil || ok {
		t.Fatalf("stop mark after the trigger: %v, %v; want cleared", ok, err)
	}
	if r, err := s.ReadyOf(ctx, "job"); err != nil || r.Count != 1 {
		t.Fatalf("ready %+v (%v); want the triggered run", r, err)
	}
	_, err = s.RecordFires(ctx, "job", trigger) // no mark: nothing to clear, the run is queued
	must(t, err, "RecordFires without a mark")
	if r, err := s.ReadyOf(ctx, "job"); err != nil || r.Count != 2 {
		t.Fatalf("ready %+v (%v); want two runs", r, err)
	}
}

// Enabling an app removes its marker and the stop marks of its jobs, not other apps', in one
// multi, and says whose it cleared.
func TestEnableAppClearsItsJobsStops(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	for _, app := range []string{"app", "other"} {
		must(t, s.CreateApp(ctx, testApp(app)), "CreateApp")
	}
	for i, j := range []struct{ name, app string }{{"a", "app"}, {"b", "app"}, {"c", "app"}, {"x", "other"}} {
		must(t, s.CreateJob(ctx, testJob(j.name, j.app)), "CreateJob")
		if j.name == "c" {
			continue // not stopped
		}
		id := taskid.New(taskid.Meta{JobName: j.name, Item: 0}, taskid.Ready, fmt.Sprintf("S%d", i))
		must(t, s.RecordLaunch(ctx, state.Launch{Tasks: []taskid.ID{id}}), "RecordLaunch")
		_, err := s.EndTaskAndStop(ctx, id, state.Stop{Reason: "unknown jobClass", TaskID: id.String()})
		must(t, err, "EndTaskAndStop")
	}
	must(t, s.DisableApp(ctx, "app"), "DisableApp")
	cleared, err := s.EnableApp(ctx, "app")
	must(t, err, "EnableApp")
	if !slices.Equal(cleared, []string{"a", "b"}) {
		t.Fatalf("EnableApp cleared the stops of %v; want [a b]", cleared)
	}
	stopped, err := s.StoppedJobs(ctx)
	must(t, err, "StoppedJobs")
	if !maps.Equal(stopped, map[string]bool{"x": true}) {
		t.Fatalf("stopped jobs %v after the enable; want x's only", stopped)
	}
	if off, err := s.AppDisabled(ctx, "app"); err != nil || off {
		t.Fatalf("app disabled %v (%v) after the enable", off, err)
	}
}
