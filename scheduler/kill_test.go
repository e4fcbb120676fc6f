package scheduler

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/scheduler/producer"
	"github.com/ejcloud/ejcloud/taskid"
)

// Real Mesos forgets a KILL for a task on an unreachable agent: when the agent comes back, the
// task runs on, and the master reports it RUNNING. A task this leader killed — for a
// replacement, an update that restarts the job's tasks, or a disable — is then killed again,
// until it ends; a task it did not kill, reported running, is left alone. (A disabled job's
// task would be killed by plan.Decide anyway.)
func TestAKilledTaskReportedRunningIsKilledAgain(t *testing.T) {
	t.Parallel()
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

// An update that restarts a job's tasks is written, and its kills are lost: the leader that
// sent them lost the leadership, or the tasks' agent was unreachable and Mesos forgot them. The
// next leader, which never heard of the kills, hears the tasks running after its
// reconciliation and kills them, from the job's restart list; a task launched after the update
// runs on. A later update that restarts nothing leaves the list alone.
func TestANewLeaderKillsTheTasksAnUpdateRestarted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := newReplaceWorld(t, ctx, func(j *config.Job) { j.Misfire = true })
	old := w.leader(t, ctx)
	w.firstRun(t, ctx, old)
	running, err := w.base.RunningOf(ctx, w.job)
	if err != nil || len(running) != 2 {
		t.Fatalf("%d tasks running (%v); want 2", len(running), err)
	}
	j, err := w.base.Job(ctx, w.job)
	if err != nil {
		t.Fatal(err)
	}
	j.ScriptCommandLine = "echo new"
	old.prod = producer.New(old.store, nil, old.log, nil)
	serving(t, ctx, old, func() {
		if err := old.inst.UpdateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
	})
	if _, killed := w.fake.launchesAndKills(); killed != 2 {
		t.Fatalf("the update killed %d tasks; want 2", killed)
	}
	// Not restarting: a cron change keeps the list.
	j.Cron = "0 0 0 1 1 ? 2098"
	serving(t, ctx, old, func() {
		if err := old.inst.UpdateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
	})

	ld := w.leader(t, ctx)
	if err := ld.store.PruneRestarts(ctx); err != nil {
		t.Fatal(err)
	}
	for k, r := range running {
		id, err := taskid.Parse(r.TaskID)
		if err != nil {
			t.Fatal(err)
		}
		ld.update(ctx, mesos.TaskStatus{TaskID: mesos.TaskID{Value: r.TaskID}, State: mesos.TASK_RUNNING.Enum(),
			AgentID: &mesos.AgentID{Value: id.AgentID}, Source: mesos.SOURCE_MASTER.Enum(), Reason: mesos.REASON_RECONCILIATION.Enum()})
		if _, killed := w.fake.launchesAndKills(); killed != 2+k+1 {
			t.Fatalf("the new leader, told task %d of the old config runs: %d kills in all; want %d", k, killed, 2+k+1)
		}
	}
	// The tasks end; a run of the new config is launched, and is not killed.
	for _, r := range running {
		id, _ := taskid.Parse(r.TaskID)
		ld.update(ctx, mesos.TaskStatus{TaskID: mesos.TaskID{Value: r.TaskID}, State: mesos.TASK_KILLED.Enum(),
			AgentID: &mesos.AgentID{Value: id.AgentID}, Source: mesos.SOURCE_EXECUTOR.Enum()})
	}
	w.trigger(t, ctx, ld)
	ld.cycle(ctx, burstOffers(0))
	fresh, err := w.base.RunningOf(ctx, w.job)
	if err != nil || len(fresh) != 2 {
		t.Fatalf("%d tasks of the new config running (%v); want 2", len(fresh), err)
	}
	_, before := w.fake.launchesAndKills()
	id, _ := taskid.Parse(fresh[0].TaskID)
	ld.update(ctx, mesos.TaskStatus{TaskID: mesos.TaskID{Value: fresh[0].TaskID}, State: mesos.TASK_RUNNING.Enum(),
		AgentID: &mesos.AgentID{Value: id.AgentID}, Source: mesos.SOURCE_MASTER.Enum(), Reason: mesos.REASON_RECONCILIATION.Enum()})
	if _, killed := w.fake.launchesAndKills(); killed != before {
		t.Fatalf("a task of the new config was killed")
	}
	// Its tasks ended, the list goes at the next takeover.
	gone, _ := taskid.Parse(running[0].TaskID)
	if restarted, err := w.base.Restarted(ctx, gone); err != nil || !restarted {
		t.Fatalf("before the prune, Restarted(%v) = %v, %v; want true", gone, restarted, err)
	}
	if err := w.leader(t, ctx).store.PruneRestarts(ctx); err != nil {
		t.Fatal(err)
	}
	if restarted, err := w.base.Restarted(ctx, gone); err != nil || restarted {
		t.Fatalf("after the prune, Restarted(%v) = %v, %v; want false", gone, restarted, err)
	}
}

// TASK_STARTING and TASK_KILLING (2.1.5 crashed on them) are heard: acknowledged, and nothing
// else changes — the task stays its shard's running task, nothing is killed or relaunched.
func TestStartingAndKillingUpdatesAreAcknowledgedAndChangeNothing(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := newReplaceWorld(t, ctx, nil)
	ld := w.leader(t, ctx)
	w.firstRun(t, ctx, ld)
	running, err := w.base.RunningOf(ctx, w.job)
	if err != nil || len(running) != 2 {
		t.Fatalf("%d tasks running (%v); want 2", len(running), err)
	}
	launched, killed := w.fake.launchesAndKills()
	for i, s := range []mesos.TaskState{mesos.TASK_STARTING, mesos.TASK_KILLING} {
		id, _ := taskid.Parse(running[0].TaskID)
		ld.update(ctx, mesos.TaskStatus{TaskID: mesos.TaskID{Value: running[0].TaskID}, State: s.Enum(), AgentID: &mesos.AgentID{Value: id.AgentID},
			Source: mesos.SOURCE_EXECUTOR.Enum(), UUID: []byte(fmt.Sprintf("u%015d", i))})
		if n := w.fake.count(); n != i+1 {
			t.Fatalf("%v: %d updates acknowledged; want %d", s, n, i+1)
		}
	}
	if l, k := w.fake.launchesAndKills(); l != launched || k != killed {
		t.Fatalf("%d launches and %d kills after the updates; want %d and %d", l, k, launched, killed)
	}
	if r, err := w.base.RunningOf(ctx, w.job); err != nil || len(r) != 2 || r[0].TaskID != running[0].TaskID {
		t.Fatalf("running %v (%v); want the same two tasks", r, err)
	}
	if f, err := w.base.Failovers(ctx); err != nil || len(f) != 0 {
		t.Fatalf("failover queue %v (%v); want empty", f, err)
	}
}

// A disable that comes while an offer cycle is under way — the cycle read the queues before
// the disable marker and launches a failover relaunch after it — kills what the cycle
// launched: the running queue is read on the event loop, after the cycle. Read at once, it
// held nothing of the job yet, and the relaunch ran until it reported RUNNING.
func TestADisableDuringAnOfferCycleKillsWhatTheCycleLaunched(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base, jobs := burstJobs(t, ctx, 1, 1, func(j *config.Job) { j.Failover = true })
	job := jobs[0]
	fake := &ackRecorder{}
	ld := testLeader(benchModel(t, ctx, base), fake)
	ld.inst.ld = ld
	if err := ld.store.AddReady(ctx, job, false); err != nil {
		t.Fatal(err)
	}
	ld.cycle(ctx, burstOffers(0))
	running, err := base.RunningOf(ctx, job)
	if err != nil || len(running) != 1 {
		t.Fatalf("running %v (%v); want the run's one task", running, err)
	}
	id, _ := taskid.Parse(running[0].TaskID)
	ld.update(ctx, fromMaster(id, mesos.TASK_LOST, mesos.REASON_AGENT_REMOVED)) // failed over
	ld.relaunch = newRelaunches(time.Nanosecond, time.Nanosecond)

	disabled := make(chan error, 1)
	ld.inst.hooks.packed = func() {
		ld.inst.hooks.packed = nil
		go func() { disabled <- ld.inst.DisableJob(ctx, job) }()
		// On the loop's goroutine: no t.Fatal here; a marker that never shows fails below.
		for ctx.Err() == nil {
			if off, err := ld.store.JobOrAppDisabled(ctx, config.Job{JobName: job, AppName: "app"}); err == nil && off {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	serving(t, ctx, ld, func() {
		ld.events <- scheduler.Event{Type: scheduler.Event_OFFERS, Offers: &scheduler.Event_Offers{Offers: burstOffers(1)}}
		if err := <-disabled; err != nil {
			t.Fatal(err)
		}
		await.True(t, 10*time.Second, "the cycle's relaunch", func() bool { launched, _ := fake.launchesAndKills(); return launched == 2 })
	})
	relaunched, err := base.RunningOf(ctx, job)
	if err != nil || len(relaunched) != 1 {
		t.Fatalf("running %v (%v); want the relaunch the cycle made", relaunched, err)
	}
	fake.mu.Lock()
	kills := slices.Clone(fake.kills)
	fake.mu.Unlock()
	if !slices.Equal(kills, []string{relaunched[0].TaskID}) {
		t.Fatalf("killed %v; want the relaunch %s", kills, relaunched[0].TaskID)
	}
}
