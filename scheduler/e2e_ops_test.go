package scheduler

import (
	"context"
	"syscall"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/internal/await"
)

// Disable kills the job's tasks and keeps it from running; enable brings it back; deleting the
// app stops its executors.
func TestDisableEnableAndDeleteApp(t *testing.T) {
	t.Parallel()
	s := newSystem(t, 1)
	ctx := context.Background()
	j := s.holdJob("ops", 2, "")
	s.register(j)
	s.trigger("ops")
	await.True(t, 30*time.Second, "both shards running", func() bool { return len(s.runs("ops")) == 2 })
	if err := s.sched.inst.DisableJob(ctx, "ops"); err != nil {
		t.Fatal(err)
	}
	await.True(t, 30*time.Second, "disabling killed the tasks", func() bool { return s.runningCount("ops") == 0 })
	if err := s.store.AddReady(ctx, "ops", true); err != nil {
		t.Fatal(err)
	}
	s.release("ops")
	if n := len(s.runs("ops")["0"]); n != 1 {
		t.Fatalf("shard 0 ran %d times", n)
	}
	if err := s.sched.inst.EnableJob(ctx, "ops"); err != nil {
		t.Fatal(err)
	}
	await.True(t, 30*time.Second, "the pending run runs once enabled", func() bool { return len(s.runs("ops")["0"]) == 2 })
	agent := s.runs("ops")["0"][0]
	pids := s.executorPIDs(agent)
	if len(pids) != 1 {
		t.Fatalf("executors: %v", pids)
	}
	if err := s.sched.inst.DeleteApp(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	await.True(t, 30*time.Second, "the app's executor stopped", func() bool { return syscall.Kill(pids[0], 0) != nil })
	if jobs, _ := s.store.Jobs(ctx); len(jobs) != 0 {
		t.Fatalf("jobs left after deleting their app: %v", jobs)
	}
}

// An app deleted without its executors being told (behind the leader's back here; a STOP that
// Mesos dropped, or a deletion between subscriptions, alike) has its idle executors stopped
// by the next sweep: Mesos never stops an idle executor, which would hold its resources.
func TestExecutorsOfAnAppDeletedBehindTheLeadersBackAreStopped(t *testing.T) {
	t.Parallel()
	s := newSystem(t, 1, func(c *Config) { c.ReconcileInterval = time.Second })
	ctx := context.Background()
	s.register(s.scriptJob("idle", 1, ""))
	s.trigger("idle")
	await.True(t, 30*time.Second, "the shard ran and ended", func() bool {
		return len(s.runs("idle")["0"]) == 1 && s.runningCount("idle") == 0
	})
	pids := s.executorPIDs(s.runs("idle")["0"][0])
	if len(pids) != 1 {
		t.Fatalf("executors: %v", pids)
	}
	if _, err := s.store.DeleteApp(ctx, "app"); err != nil {
		t.Fatal(err)
	}
	await.True(t, 30*time.Second, "the deleted app's idle executor stopped", func() bool { return syscall.Kill(pids[0], 0) != nil })
}
