package state_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/taskid"
)

func TestConcurrentMisfireIncrementsAreNeverLost(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	const n = 100
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- s.AddReady(ctx, "job", true) }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		must(t, err, "AddReady")
	}
	r, err := s.ReadyOf(ctx, "job")
	must(t, err, "ReadyOf")
	if r.Count != n {
		t.Fatalf("after %d concurrent misfire increments the ready count is %d; want %d", n, r.Count, n)
	}
}

func TestAddReadyWithoutMisfireSetsOne(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	for range 3 {
		must(t, s.AddReady(ctx, "job", false), "AddReady")
	}
	if r, _ := s.ReadyOf(ctx, "job"); r.Count != 1 {
		t.Fatalf("three fires without misfire: count %d; want 1", r.Count)
	}
	must(t, s.AddReady(ctx, "job", true), "AddReady misfire")
	must(t, s.AddReady(ctx, "job", false), "AddReady no misfire")
	if r, _ := s.ReadyOf(ctx, "job"); r.Count != 1 {
		t.Fatalf("a fire without misfire sets the count to 1, got %d", r.Count)
	}
	must(t, s.RemoveReady(ctx, "job"), "RemoveReady")
	must(t, s.RemoveReady(ctx, "job"), "RemoveReady twice")
	if r, _ := s.ReadyOf(ctx, "job"); r.Count != 0 {
		t.Fatalf("after RemoveReady count %d; want 0", r.Count)
	}
}

func TestQueueSizeLimitRefusesAndReports(t *testing.T) {
	t.Parallel()
	log := newLogger()
	s := newStore(t, func(c *state.Config) { c.QueueSizeLimit = 2; c.Logger = log.Logger })
	ctx := ctxT(t)
	must(t, s.AddReady(ctx, "a", true), "AddReady a")
	must(t, s.AddReady(ctx, "b", true), "AddReady b")
	err := s.AddReady(ctx, "c", true)
	mustIs(t, err, state.ErrQueueFull, "third job into a ready queue of size 2")
	select {
	case e := <-log.hook.entries:
		if e.Data["limit"] != 2 {
			t.Fatalf("warning %q has fields %v; want the limit", e.Message, e.Data)
		}
	default:
		t.Fatal("a refused add must log a warning")
	}
	if r, _ := s.ReadyOf(ctx, "c"); r.Count != 0 {
		t.Fatalf("refused add was written: %+v", r)
	}
	must(t, s.AddReady(ctx, "a", true), "incrementing an existing entry adds no node and is allowed")

	for i, job := range []string{"f1", "f2"} {
		_, err := s.AddFailover(ctx, taskid.New(taskid.Meta{JobName: job, Item: i}, taskid.Ready, "S0"))
		must(t, err, "AddFailover")
	}
	_, err = s.AddFailover(ctx, taskid.New(taskid.Meta{JobName: "f3", Item: 0}, taskid.Ready, "S0"))
	mustIs(t, err, state.ErrQueueFull, "third job into a failover queue of size 2")

	for _, app := range []string{"x", "y", "z"} {
		must(t, s.CreateApp(ctx, testApp(app)), "CreateApp")
	}
	must(t, s.DisableApp(ctx, "x"), "DisableApp x")
	must(t, s.DisableApp(ctx, "y"), "DisableApp y")
	mustIs(t, s.DisableApp(ctx, "z"), state.ErrQueueFull, "third disabled app with limit 2")
}

func TestRecordLaunchWritesAheadInOneMulti(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	must(t, s.AddReady(ctx, "twice", true), "AddReady")
	must(t, s.AddReady(ctx, "twice", true), "AddReady")
	must(t, s.AddReady(ctx, "once", true), "AddReady")
	failed := taskid.New(taskid.Meta{JobName: "fo", Item: 2}, taskid.Ready, "S0")
	_, err := s.AddFailover(ctx, failed)
	must(t, err, "AddFailover")

	ready, _ := s.Ready(ctx)
	fos, _ := s.Failovers(ctx)
	tasks := []taskid.ID{
		taskid.New(taskid.Meta{JobName: "twice", Item: 0}, taskid.Ready, "S0"),
		taskid.New(taskid.Meta{JobName: "twice", Item: 1}, taskid.Ready, "S1"),
		taskid.New(taskid.Meta{JobName: "once", Item: 0}, taskid.Ready, "S0"),
		taskid.New(taskid.Meta{JobName: "fo", Item: 2}, taskid.Failover, "S1"),
	}
	before := s.RoundTrips()
	must(t, s.RecordLaunch(ctx, state.Launch{Tasks: tasks, Ready: ready, Failover: fos}), "RecordLaunch")
	t.Logf("RecordLaunch of %d tasks took %d ZooKeeper round trips", len(tasks), s.RoundTrips()-before)

	running, _ := s.Running(ctx)
	if len(running) != 4 {
		t.Fatalf("running after launch = %+v; want 4 tasks", running)
	}
	for _, r := range running {
		id, err := taskid.Parse(r.TaskID)
		if err != nil || id.Meta != r.Meta {
			t.Fatalf("running node %v holds %q", r.Meta, r.TaskID)
		}
	}
	if r, _ := s.ReadyOf(ctx, "twice"); r.Count != 1 {
		t.Fatalf("ready count of a job launched once from 2 = %d; want 1", r.Count)
	}
	if r, _ := s.ReadyOf(ctx, "once"); r.Count != 0 {
		t.Fatalf("ready entry at 1 must be deleted on launch, got %+v", r)
	}
	if fos, _ := s.Failovers(ctx); len(fos) != 0 {
		t.Fatalf("failover entries after relaunch = %+v; want none", fos)
	}
}

func TestRecordLaunchWithAStaleVersionChangesNothing(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	must(t, s.AddReady(ctx, "job", true), "AddReady")
	must(t, s.AddReady(ctx, "job", true), "AddReady")
	failed := taskid.New(taskid.Meta{JobName: "fo", Item: 0}, taskid.Ready, "S0")
	_, err := s.AddFailover(ctx, failed)
	must(t, err, "AddFailover")
	ready, _ := s.Ready(ctx)
	fos, _ := s.Failovers(ctx)

	must(t, s.AddReady(ctx, "job", true), "a fire between the read and the launch") // bumps the version

	tasks := []taskid.ID{
		taskid.New(taskid.Meta{JobName: "job", Item: 0}, taskid.Ready, "S0"),
		taskid.New(taskid.Meta{JobName: "fo", Item: 0}, taskid.Failover, "S0"),
	}
	err = s.RecordLaunch(ctx, state.Launch{Tasks: tasks, Ready: ready, Failover: fos})
	mustIs(t, err, state.ErrConflict, "RecordLaunch with a stale ready version")
	var op *state.OpError
	if !errors.As(err, &op) || op.Path != s.Namespace()+"/state/ready/job" {
		t.Fatalf("error %v does not name the ready node", err)
	}
	if running, _ := s.Running(ctx); len(running) != 0 {
		t.Fatalf("a failed launch multi created running nodes: %+v", running)
	}
	if r, _ := s.ReadyOf(ctx, "job"); r.Count != 3 {
		t.Fatalf("ready count after a failed launch = %d; want 3", r.Count)
	}
	if fos, _ := s.Failovers(ctx); len(fos) != 1 {
		t.Fatalf("failover entries after a failed launch = %+v; want the one entry", fos)
	}
}

// A launch planned on a job's config that an update replaced since is refused: the update's
// kills read the running tasks when it is written, before this launch, and would miss its
// tasks, which would run the replaced config for good (a DAEMON's old script or cron).
func TestRecordLaunchRefusesAConfigReplacedSinceItsPlan(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	must(t, s.CreateApp(ctx, testApp("app")), "CreateApp")
	must(t, s.CreateJob(ctx, testJob("job", "app")), "CreateJob")
	for _, tc := range []struct {
		name    string
		between func()
		want    error
	}{
		{"the config as planned", func() {}, nil},
		{"an update between the plan and the launch", func() {
			j := testJob("job", "app")
			j.ScriptCommandLine = "echo new"
			_, err := s.UpdateJob(ctx, j)
			must(t, err, "UpdateJob")
		}, state.ErrConflict},
	} {
		_, versions, err := s.JobsNamed(ctx, []string{"job"})
		must(t, err, "JobsNamed")
		tc.between()
		id := taskid.New(taskid.Meta{JobName: "job", Item: 0}, taskid.Ready, "S0")
		err = s.RecordLaunch(ctx, state.Launch{Tasks: []taskid.ID{id}, Configs: []state.JobAt{{JobName: "job", Version: versions["job"]}}})
		if tc.want == nil {
			must(t, err, tc.name)
			_, err := s.EndTask(ctx, id, state.NoFollowUp) // the shard is free again
			must(t, err, "EndTask")
			continue
		}
		mustIs(t, err, tc.want, tc.name)
		if running, _ := s.RunningOf(ctx, "job"); len(running) != 0 {
			t.Fatalf("%s: running %+v; want nothing written", tc.name, running)
		}
	}
}

func TestRecordLaunchRefusesAShardThatIsRunning(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	first := taskid.New(taskid.Meta{JobName: "job", Item: 0}, taskid.Ready, "S0")
	must(t, s.RecordLaunch(ctx, state.Launch{Tasks: []taskid.ID{first}}), "first launch")
	must(t, s.AddReady(ctx, "job", false), "AddReady")
	ready, _ := s.Ready(ctx)
	second := []taskid.ID{
		taskid.New(taskid.Meta{JobName: "job", Item: 1}, taskid.Ready, "S0"),
		taskid.New(taskid.Meta{JobName: "job", Item: 0}, taskid.Ready, "S1"),
	}
	err := s.RecordLaunch(ctx, state.Launch{Tasks: second, Ready: ready})
	mustIs(t, err, state.ErrExists, "launching a shard that is already running")
	running, _ := s.RunningOf(ctx, "job")
	if len(running) != 1 || running[0].TaskID != first.String() {
		t.Fatalf("running = %+v; want only the first task", running)
	}
	if r, _ := s.ReadyOf(ctx, "job"); r.Count != 1 {
		t.Fatalf("ready count = %d; want 1 (nothing launched)", r.Count)
	}
}

func TestEndTask(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	launch := func(job string, item int) taskid.ID {
		id := taskid.New(taskid.Meta{JobName: job, Item: item}, taskid.Ready, "S0")
		must(t, s.RecordLaunch(ctx, state.Launch{Tasks: []taskid.ID{id}}), "RecordLaunch")
		return id
	}

	t.Run("finished task leaves no trace", func(t *testing.T) {
		id := launch("fin", 0)
		got, err := s.EndTask(ctx, id, state.NoFollowUp)
		must(t, err, "EndTask")
		if !got.Removed || got.Requeued {
			t.Fatalf("EndTask = %+v; want removed only", got)
		}
		if r, _ := s.RunningOf(ctx, "fin"); len(r) != 0 {
			t.Fatalf("running = %v", r)
		}
	})
	t.Run("infrastructure failure queues the shard once", func(t *testing.T) {
		id := launch("lost", 1)
		got, err := s.EndTask(ctx, id, state.Failover)
		must(t, err, "EndTask")
		if !got.Removed || !got.Requeued {
			t.Fatalf("EndTask = %+v; want removed and requeued", got)
		}
		fos, _ := s.Failovers(ctx)
		if len(fos) != 1 || fos[0].TaskID != id.String() || fos[0].Meta != id.Meta {
			t.Fatalf("failover = %+v; want the failed task", fos)
		}
		again, err := s.EndTask(ctx, id, state.Failover)
		must(t, err, "EndTask again")
		if again.Removed || again.Requeued {
			t.Fatalf("a duplicate update must change nothing, got %+v", again)
		}
		// A second task of the same shard fails while the first is still queued.
		id2 := launch("lost", 1)
		got, err = s.EndTask(ctx, id2, state.Failover)
		must(t, err, "EndTask second")
		if !got.Removed || got.Requeued {
			t.Fatalf("EndTask of an already queued shard = %+v; want removed, not requeued", got)
		}
	})
	t.Run("update for an older task of the shard is ignored", func(t *testing.T) {
		old := taskid.New(taskid.Meta{JobName: "stale", Item: 0}, taskid.Ready, "S9")
		cur := launch("stale", 0)
		got, err := s.EndTask(ctx, old, state.Failover)
		must(t, err, "EndTask")
		if got.Removed {
			t.Fatal("an update for a task that no longer runs removed the current task")
		}
		if r, _ := s.RunningOf(ctx, "stale"); len(r) != 1 || r[0].TaskID != cur.String() {
			t.Fatalf("running = %+v; want the current task", r)
		}
	})
	t.Run("killed daemon is scheduled again", func(t *testing.T) {
		id := launch("daemon", 0)
		got, err := s.EndTask(ctx, id, state.Rerun)
		must(t, err, "EndTask")
		if !got.Removed || !got.Requeued {
			t.Fatalf("EndTask = %+v", got)
		}
		if r, _ := s.ReadyOf(ctx, "daemon"); r.Count != 1 {
			t.Fatalf("ready count = %d; want 1", r.Count)
		}
	})
}

func TestEndTaskStillRemovesTheTaskWhenTheFailoverQueueIsFull(t *testing.T) {
	t.Parallel()
	s := newStore(t, func(c *state.Config) { c.QueueSizeLimit = 1 })
	ctx := ctxT(t)
	_, err := s.AddFailover(ctx, taskid.New(taskid.Meta{JobName: "other", Item: 0}, taskid.Ready, "S0"))
	must(t, err, "AddFailover")
	id := taskid.New(taskid.Meta{JobName: "job", Item: 0}, taskid.Ready, "S0")
	must(t, s.RecordLaunch(ctx, state.Launch{Tasks: []taskid.ID{id}}), "RecordLaunch")
	got, err := s.EndTask(ctx, id, state.Failover)
	must(t, err, "EndTask")
	if !got.Removed || got.Requeued {
		t.Fatalf("EndTask with a full failover queue = %+v; want removed, not requeued", got)
	}
}

func TestDisableMarkers(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	must(t, s.CreateApp(ctx, testApp("app")), "CreateApp")
	j := testJob("job", "app")
	must(t, s.CreateJob(ctx, j), "CreateJob")
	must(t, s.AddReady(ctx, "job", true), "AddReady")

	mustIs(t, s.DisableJob(ctx, "nope"), state.ErrNotFound, "DisableJob of a missing job")
	must(t, s.DisableJob(ctx, "job"), "DisableJob")
	must(t, s.DisableJob(ctx, "job"), "DisableJob twice")
	if r, _ := s.ReadyOf(ctx, "job"); r.Count != 0 {
		t.Fatalf("disabling a job must drop its ready entry, count %d", r.Count)
	}
	if d, _ := s.JobOrAppDisabled(ctx, j); !d {
		t.Fatal("job not reported disabled")
	}
	_, err := s.EnableJob(ctx, "job")
	must(t, err, "EnableJob")
	if d, _ := s.JobOrAppDisabled(ctx, j); d {
		t.Fatal("job still disabled after EnableJob")
	}

	must(t, s.AddReady(ctx, "job", true), "AddReady")
	must(t, s.DisableApp(ctx, "app"), "DisableApp")
	if d, _ := s.JobOrAppDisabled(ctx, j); !d {
		t.Fatal("a job of a disabled app must be reported disabled")
	}
	if r, _ := s.ReadyOf(ctx, "job"); r.Count != 0 {
		t.Fatalf("disabling an app must drop its jobs' ready entries, count %d", r.Count)
	}
	apps, jobs, err := s.Disabled(ctx)
	must(t, err, "Disabled")
	if !apps["app"] || len(jobs) != 0 {
		t.Fatalf("Disabled = %v, %v", apps, jobs)
	}
	_, err = s.EnableApp(ctx, "app")
	must(t, err, "EnableApp")
	_, err = s.EnableApp(ctx, "nope")
	mustIs(t, err, state.ErrNotFound, "EnableApp of a missing app")
}

func TestFrameworkID(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	if _, err := s.FrameworkID(ctx); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("FrameworkID before any save: %v; want ErrNotFound", err)
	}
	must(t, s.SaveFrameworkID(ctx, "fw-0000"), "SaveFrameworkID")
	must(t, s.SaveFrameworkID(ctx, "fw-0000"), "SaveFrameworkID again")
	if id, err := s.FrameworkID(ctx); err != nil || id != "fw-0000" {
		t.Fatalf("FrameworkID = %q, %v", id, err)
	}
	must(t, s.DeleteFrameworkID(ctx), "DeleteFrameworkID")
	if _, err := s.FrameworkID(ctx); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("FrameworkID after delete: %v", err)
	}
}

// The leader removes the queue entries of a job it found deleted, unless the job is back by
// the time it removes them: a job registered again under the name, and fired or failed since,
// owns the entries. (A version check would not tell: a node created again starts at 0.)
func TestStaleEntriesGoOnlyWhileTheirJobIsDeleted(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	must(t, s.CreateApp(ctx, testApp("app")), "CreateApp")
	must(t, s.CreateJob(ctx, testJob("back", "app")), "CreateJob")
	for _, job := range []string{"gone", "back"} {
		must(t, s.AddReady(ctx, job, false), "AddReady "+job)
		_, err := s.AddFailover(ctx, taskid.New(taskid.Meta{JobName: job, Item: 0}, taskid.Ready, "S0"))
		must(t, err, "AddFailover "+job)
	}
	fo, err := s.Failovers(ctx)
	must(t, err, "Failovers")
	for _, f := range fo {
		must(t, s.RemoveStaleFailover(ctx, f), "RemoveStaleFailover "+f.Meta.JobName)
	}
	for _, job := range []string{"gone", "back"} {
		must(t, s.RemoveStaleReady(ctx, job), "RemoveStaleReady "+job)
	}
	ready, err := s.Ready(ctx)
	must(t, err, "Ready")
	fo, err = s.Failovers(ctx)
	must(t, err, "Failovers")
	if len(ready) != 1 || ready[0].JobName != "back" || len(fo) != 1 || fo[0].Meta.JobName != "back" {
		t.Fatalf("ready %+v, failover %+v; want only the entries of the job that is back", ready, fo)
	}
	if _, err := s.Job(ctx, "gone"); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("Job(gone) = %v; want ErrNotFound: the removal's guard must leave no config behind", err)
	}
}
