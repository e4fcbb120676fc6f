package state_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/state/statetest"
	"github.com/ejcloud/ejcloud/taskid"
)

func TestConcurrentRegistrationsOfOneJobGiveOneSuccess(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	must(t, s.CreateApp(ctx, testApp("app")), "CreateApp")
	const n = 20
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j := testJob("job", "app")
			j.Description = string(rune('a' + i))
			errs[i] = s.CreateJob(ctx, j)
		}()
	}
	wg.Wait()
	ok, exists := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, state.ErrExists):
			exists++
		default:
			t.Fatalf("CreateJob: unexpected error %v", err)
		}
	}
	if ok != 1 || exists != n-1 {
		t.Fatalf("%d concurrent registrations: %d succeeded, %d got ErrExists; want 1 and %d", n, ok, exists, n-1)
	}
	jobs, err := s.Jobs(ctx)
	must(t, err, "Jobs")
	if len(jobs) != 1 {
		t.Fatalf("Jobs = %v; want exactly one", jobs)
	}
}

func TestConcurrentAppCreatesGiveOneSuccess(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- s.CreateApp(ctx, testApp("app")) }()
	}
	a, b := <-errs, <-errs
	if (a == nil) == (b == nil) || !(errors.Is(a, state.ErrExists) || errors.Is(b, state.ErrExists)) {
		t.Fatalf("two creates of one app gave %v and %v; want one nil and one ErrExists", a, b)
	}
}

func TestCreateJobNeedsItsApp(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	err := s.CreateJob(ctx, testJob("job", "missing"))
	mustIs(t, err, state.ErrAppNotFound, "CreateJob for a missing app")
	mustIs(t, err, state.ErrNotFound, "ErrAppNotFound is a kind of ErrNotFound")
	if _, err := s.Job(ctx, "job"); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("a refused job must not be stored: Job = %v", err)
	}
}

func TestAppLifecycle(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	must(t, s.CreateApp(ctx, testApp("b")), "CreateApp b")
	must(t, s.CreateApp(ctx, testApp("a")), "CreateApp a")
	apps, err := s.Apps(ctx)
	must(t, err, "Apps")
	if len(apps) != 2 || apps[0].AppName != "a" || apps[1].AppName != "b" {
		t.Fatalf("Apps = %+v; want a, b", apps)
	}
	got, err := s.UpdateApp(ctx, "a", func(a config.App) (config.App, error) { a.MemoryMB = 512; return a, nil })
	must(t, err, "UpdateApp")
	if back, _ := s.App(ctx, "a"); back != got || back.MemoryMB != 512 || back.BootstrapScript != "bin/start.sh" {
		t.Fatalf("after UpdateApp, App = %+v; want %+v", back, got)
	}
	if _, err := s.UpdateApp(ctx, "nope", func(a config.App) (config.App, error) { return a, nil }); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("UpdateApp of a missing app: %v; want ErrNotFound", err)
	}
	if _, err := s.UpdateApp(ctx, "a", func(a config.App) (config.App, error) { a.AppName = "c"; return a, nil }); err == nil {
		t.Fatal("UpdateApp must refuse a rename")
	}
}

// A DAEMON's ready entry asks for its missing shards to be started; an update that makes the
// job TRANSIENT drops it with the change, else it became a TRANSIENT run nobody asked for. A
// TRANSIENT job's queued runs stay through an update.
func TestAnUpdateFromDaemonDropsItsReadyEntry(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	must(t, s.CreateApp(ctx, testApp("app")), "CreateApp")
	for _, tc := range []struct {
		from      string
		wantReady int
	}{
		{config.Daemon, 0},
		{config.Transient, 1},
	} {
		j := testJob("job-"+tc.from, "app")
		j.JobExecutionType = tc.from
		must(t, s.CreateJob(ctx, j), "CreateJob")
		must(t, s.AddReady(ctx, j.JobName, false), "AddReady")
		j.JobExecutionType = config.Transient
		_, err := s.UpdateJob(ctx, j)
		must(t, err, "UpdateJob")
		if r, err := s.ReadyOf(ctx, j.JobName); err != nil || r.Count != tc.wantReady {
			t.Errorf("%s → TRANSIENT: ready count %d (%v); want %d", tc.from, r.Count, err, tc.wantReady)
		}
	}
}

// An update clears the job's stop mark in its own multi: a second write, failing, answered the
// operator with an error for an update that was made, and left the job stopped.
func TestAnUpdateClearsTheStopMarkWithTheConfig(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	must(t, s.CreateApp(ctx, testApp("app")), "CreateApp")
	j := testJob("job", "app")
	must(t, s.CreateJob(ctx, j), "CreateJob")
	id := taskid.New(taskid.Meta{JobName: "job", Item: 0}, taskid.Ready, "S0")
	must(t, s.RecordLaunch(ctx, state.Launch{Tasks: []taskid.ID{id}}), "RecordLaunch")
	_, err := s.EndTaskAndStop(ctx, id, state.Stop{Reason: "unknown jobClass", TaskID: id.String()})
	must(t, err, "EndTaskAndStop")
	before := s.Multis()
	j.Description = "fixed"
	_, err = s.UpdateJob(ctx, j)
	must(t, err, "UpdateJob")
	if _, stopped, err := s.Stopped(ctx, "job"); err != nil || stopped {
		t.Fatalf("stopped after the update: %v (%v); want cleared", stopped, err)
	}
	if n := s.Multis() - before; n != 1 {
		t.Fatalf("the update took %d writes; want the config and the stop mark in one", n)
	}
}

func TestUpdateJobReturnsThePreviousConfig(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	must(t, s.CreateApp(ctx, testApp("app")), "CreateApp")
	j := testJob("job", "app")
	must(t, s.CreateJob(ctx, j), "CreateJob")
	next := j
	next.MemoryMB = 64
	prev, err := s.UpdateJob(ctx, next)
	must(t, err, "UpdateJob")
	if prev.MemoryMB != 32 || !prev.RestartsTasks(next) {
		t.Fatalf("UpdateJob returned %+v; want the old config", prev)
	}
	if back, _ := s.Job(ctx, "job"); back.MemoryMB != 64 {
		t.Fatalf("stored job = %+v; want memory 64", back)
	}
	missing := testJob("other", "app")
	if _, err := s.UpdateJob(ctx, missing); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("UpdateJob of a missing job: %v; want ErrNotFound", err)
	}
	moved := next
	moved.AppName = "gone"
	if _, err := s.UpdateJob(ctx, moved); !errors.Is(err, state.ErrAppNotFound) {
		t.Fatalf("UpdateJob to a missing app: %v; want ErrAppNotFound", err)
	}
}

func TestDeleteAppRemovesItsJobsAndTheirQueueEntries(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	must(t, s.CreateApp(ctx, testApp("app")), "CreateApp")
	must(t, s.CreateApp(ctx, testApp("other")), "CreateApp other")
	must(t, s.CreateJob(ctx, testJob("j1", "app")), "CreateJob j1")
	must(t, s.CreateJob(ctx, testJob("j2", "app")), "CreateJob j2")
	must(t, s.CreateJob(ctx, testJob("keep", "other")), "CreateJob keep")
	must(t, s.AddReady(ctx, "j1", true), "AddReady j1")
	must(t, s.AddReady(ctx, "keep", true), "AddReady keep")
	must(t, s.DisableJob(ctx, "j2"), "DisableJob j2")
	must(t, s.DisableApp(ctx, "app"), "DisableApp")
	_, err := s.AddFailover(ctx, taskid.New(taskid.Meta{JobName: "j2", Item: 1}, taskid.Ready, "S0"))
	must(t, err, "AddFailover")

	deleted, err := s.DeleteApp(ctx, "app")
	must(t, err, "DeleteApp")
	if len(deleted) != 2 || deleted[0] != "j1" || deleted[1] != "j2" {
		t.Fatalf("DeleteApp deleted jobs %v; want [j1 j2]", deleted)
	}
	jobs, _ := s.Jobs(ctx)
	if len(jobs) != 1 || jobs[0].JobName != "keep" {
		t.Fatalf("Jobs after DeleteApp = %+v; want only keep", jobs)
	}
	ready, _ := s.Ready(ctx)
	if len(ready) != 1 || ready[0].JobName != "keep" {
		t.Fatalf("Ready after DeleteApp = %+v; want only keep", ready)
	}
	fo, _ := s.Failovers(ctx)
	apps, jobsOff, _ := s.Disabled(ctx)
	if len(fo) != 0 || len(apps) != 0 || len(jobsOff) != 0 {
		t.Fatalf("after DeleteApp: failover %v, disabled apps %v, jobs %v; want none", fo, apps, jobsOff)
	}
	if _, err := s.DeleteApp(ctx, "app"); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("second DeleteApp: %v; want ErrNotFound", err)
	}
}

func TestDeleteJobLeavesRunningNodesForTheKills(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	must(t, s.CreateApp(ctx, testApp("app")), "CreateApp")
	must(t, s.CreateJob(ctx, testJob("job", "app")), "CreateJob")
	run := taskid.New(taskid.Meta{JobName: "job", Item: 0}, taskid.Ready, "S0")
	must(t, s.RecordLaunch(ctx, state.Launch{Tasks: []taskid.ID{run}}), "RecordLaunch")
	must(t, s.AddReady(ctx, "job", false), "AddReady")
	must(t, s.DeleteJob(ctx, "job"), "DeleteJob")
	if _, err := s.Job(ctx, "job"); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("Job after DeleteJob: %v; want ErrNotFound", err)
	}
	if r, _ := s.ReadyOf(ctx, "job"); r.Count != 0 {
		t.Fatalf("ready entry survived DeleteJob: %+v", r)
	}
	running, _ := s.RunningOf(ctx, "job")
	if len(running) != 1 {
		t.Fatalf("running nodes after DeleteJob = %v; want the one task, removed when its kill is reported", running)
	}
	ended, err := s.EndTask(ctx, run, state.NoFollowUp)
	must(t, err, "EndTask")
	if !ended.Removed {
		t.Fatal("EndTask did not remove the running node of the deleted job")
	}
}

// JobsNamed returns the named jobs that exist, and leaves out the ones that do not.
func TestJobsNamed(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	if err := s.CreateApp(ctx, testApp("app")); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"a", "b", "c"} {
		if err := s.CreateJob(ctx, testJob(n, "app")); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		names []string
		want  []string
	}{
		{nil, nil},
		{[]string{"a"}, []string{"a"}},
		{[]string{"c", "gone", "a"}, []string{"a", "c"}},
		{[]string{"gone"}, nil},
	}
	for _, c := range cases {
		got, versions, err := s.JobsNamed(ctx, c.names)
		if err != nil {
			t.Fatalf("JobsNamed(%v): %v", c.names, err)
		}
		if len(got) != len(c.want) || len(versions) != len(c.want) {
			t.Fatalf("JobsNamed(%v) = %v, versions %v; want %v", c.names, got, versions, c.want)
		}
		for _, n := range c.want {
			if got[n].JobName != n || got[n].AppName != "app" {
				t.Fatalf("JobsNamed(%v)[%s] = %+v", c.names, n, got[n])
			}
		}
	}
}

// A job registered while its app is deleted either goes with the app or is refused: never a
// job whose app is gone. (DeleteApp reads the app's jobs before its multi; a mere check of
// the app in the job's create let a job written in between outlive the app.)
func TestAJobRegisteredDuringItsAppsDeletionNeverOutlivesIt(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	s, other := open(t, env), open(t, env)
	ctx := ctxT(t)
	for i := range 60 {
		app, job := "app"+strconv.Itoa(i), "job"+strconv.Itoa(i)
		must(t, s.CreateApp(ctx, testApp(app)), "CreateApp")
		var wg sync.WaitGroup
		var createErr, deleteErr error
		wg.Add(2)
		go func() { defer wg.Done(); _, deleteErr = s.DeleteApp(ctx, app) }()
		go func() { defer wg.Done(); createErr = other.CreateJob(ctx, testJob(job, app)) }()
		wg.Wait()
		must(t, deleteErr, "DeleteApp")
		if createErr != nil && !errors.Is(createErr, state.ErrAppNotFound) {
			t.Fatalf("CreateJob: %v; want success or ErrAppNotFound", createErr)
		}
		if _, err := s.Job(ctx, job); !errors.Is(err, state.ErrNotFound) {
			t.Fatalf("round %d: job %s outlived its app (created: %v)", i, job, createErr == nil)
		}
	}
}

// A failover entry a launch takes between a deletion's reads and its multi makes the deletion
// read again, not answer that the job does not exist.
func TestDeleteJobReadsAgainWhenALaunchTakesAFailoverEntry(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	must(t, s.CreateApp(ctx, testApp("app")), "CreateApp")
	must(t, s.CreateJob(ctx, testJob("job", "app")), "CreateJob")
	for item := range 2 {
		_, err := s.AddFailover(ctx, taskid.New(taskid.Meta{JobName: "job", Item: item}, taskid.Ready, "S0"))
		must(t, err, "AddFailover")
	}
	attempts := 0
	err := s.DeleteJobAfter(ctx, "job", func() {
		attempts++
		if attempts > 1 {
			return
		}
		fo, err := s.Failovers(ctx)
		must(t, err, "Failovers")
		relaunch := taskid.New(fo[0].Meta, taskid.Failover, "S1")
		must(t, s.RecordLaunch(ctx, state.Launch{Tasks: []taskid.ID{relaunch}, Failover: fo[:1]}), "RecordLaunch")
	})
	if err != nil || attempts != 2 {
		t.Fatalf("DeleteJob after a launch took a failover entry: %v after %d attempts; want done on the second", err, attempts)
	}
	if _, err := s.Job(ctx, "job"); !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("Job after DeleteJob: %v; want ErrNotFound", err)
	}
	if fo, err := s.Failovers(ctx); err != nil || len(fo) != 0 {
		t.Fatalf("failover entries after DeleteJob: %v (%v); want none", fo, err)
	}
}

// A disable, a stop or a fire written between DeleteJob's reads and its multi does not outlive
// the job (none of them checks the job's version): the delete reads again and removes it. A job
// registered again under the name begins enabled, not stopped, and without the old ledger (it
// would catch up from the old job's last slot). Before, the node was left behind.
func TestDeleteJobLeavesNothingWrittenMeanwhile(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	must(t, s.CreateApp(ctx, testApp("app")), "CreateApp")
	slot := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	job := ""
	for k, tc := range []struct {
		name     string
		meantime func(t *testing.T, id taskid.ID)
		left     func() bool
	}{
		{"a disable", func(t *testing.T, _ taskid.ID) { must(t, s.DisableJob(ctx, job), "DisableJob") },
			func() bool { off, err := s.JobDisabled(ctx, job); must(t, err, "JobDisabled"); return off }},
		{"a stop", func(t *testing.T, id taskid.ID) {
			_, err := s.EndTaskAndStop(ctx, id, state.Stop{Reason: "unknown jobClass", TaskID: id.String()})
			must(t, err, "EndTaskAndStop")
		}, func() bool { _, stopped, err := s.Stopped(ctx, job); must(t, err, "Stopped"); return stopped }},
		{"a fire", func(t *testing.T, _ taskid.ID) {
			_, err := s.RecordFires(ctx, job, state.Fires{Cron: "0 * * * * ?", Zone: "UTC", Last: slot,
				Entries: []state.FireEntry{{Slot: slot, Count: 1, Outcome: state.OutcomeFired}}})
			must(t, err, "RecordFires")
		}, func() bool { _, ok, err := s.FireLedger(ctx, job); must(t, err, "FireLedger"); return ok }},
	} {
		job = fmt.Sprintf("job%d", k)
		t.Run(tc.name, func(t *testing.T) {
			must(t, s.CreateJob(ctx, testJob(job, "app")), "CreateJob")
			id := taskid.New(taskid.Meta{JobName: job, Item: 0}, taskid.Ready, "S0")
			must(t, s.RecordLaunch(ctx, state.Launch{Tasks: []taskid.ID{id}}), "RecordLaunch")
			attempts := 0
			err := s.DeleteJobAfter(ctx, job, func() {
				if attempts++; attempts == 1 {
					tc.meantime(t, id)
				}
			})
			must(t, err, "DeleteJob")
			if _, err := s.EndTask(ctx, id, state.NoFollowUp); err != nil {
				t.Fatal(err)
			}
			must(t, s.CreateJob(ctx, testJob(job, "app")), "CreateJob again")
			if tc.left() {
				t.Fatalf("%s written while the job was deleted outlived it (delete attempts: %d)", tc.name, attempts)
			}
			must(t, s.DeleteJob(ctx, job), "DeleteJob")
		})
	}
}

// A job whose shards could not all be launched in one ZooKeeper write is refused at registration
// and update, naming shardingTotalCount and how many would fit: its runs would never launch.
// One that fits is written, and its whole launch is one multi.
func TestAJobTooLargeToLaunchInOneWriteIsRefused(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	must(t, s.CreateApp(ctx, testApp("app")), "CreateApp")
	big := testJob("job", "app")
	big.ShardingTotalCount = 10000
	err := s.CreateJob(ctx, big)
	var fe *config.FieldError
	if !errors.As(err, &fe) || fe.Field != "shardingTotalCount" || !strings.Contains(fe.Message, "at most about") {
		t.Fatalf("CreateJob of 10,000 shards: %v; want a FieldError naming shardingTotalCount", err)
	}
	var most int
	fmt.Sscanf(fe.Message[strings.Index(fe.Message, "at most about ")+len("at most about "):], "%d", &most)
	t.Logf("a job named %q launches at most %d shards", "job", most)
	if most < 1000 || most >= 10000 {
		t.Fatalf("the message says at most %d: %s", most, fe.Message)
	}
	fits := testJob("job", "app")
	fits.ShardingTotalCount = most
	must(t, s.CreateJob(ctx, fits), "CreateJob of the most that fits")
	ids := make([]taskid.ID, most)
	for i := range ids {
		ids[i] = taskid.New(taskid.Meta{JobName: "job", Item: i}, taskid.Failover, strings.Repeat("S", 40))
	}
	must(t, s.AddReady(ctx, "job", false), "AddReady")
	r, err := s.ReadyOf(ctx, "job")
	must(t, err, "ReadyOf")
	must(t, s.RecordLaunch(ctx, state.Launch{Tasks: ids, Ready: []state.ReadyEntry{r}}), "RecordLaunch of every shard")
	bigger := fits
	bigger.ShardingTotalCount = 10000
	if _, err := s.UpdateJob(ctx, bigger); !errors.As(err, &fe) || fe.Field != "shardingTotalCount" {
		t.Fatalf("UpdateJob to 10,000 shards: %v; want a FieldError naming shardingTotalCount", err)
	}
}

// SPEC §3.2 allows 10,000 shards, but a run launches all its shards in one write, and ZooKeeper's
// default jute.maxbuffer holds about 3,500 of them. Where the servers are set higher
// (-Djute.maxbuffer), a Store told so (--zk-jute-maxbuffer) registers and launches them all,
// through the leader's model too; one not told so still refuses the job.
func TestTenThousandShardsLaunchWhereJuteMaxBufferIsRaised(t *testing.T) {
	t.Parallel()
	const jute = 4 << 20
	srv := statetest.StartDedicated(t, fmt.Sprintf("jute.maxbuffer=%d", jute))
	env := statetest.Env{Servers: []string{srv.Addr}, Namespace: "big"}
	ctx := ctxT(t)
	plain := openPlain(t, env)
	must(t, plain.CreateApp(ctx, testApp("app")), "CreateApp")
	big := testJob("job", "app")
	big.ShardingTotalCount = config.MaxShards
	var fe *config.FieldError
	if err := plain.CreateJob(ctx, big); !errors.As(err, &fe) || fe.Field != "shardingTotalCount" {
		t.Fatalf("CreateJob of %d shards at the default jute.maxbuffer: %v; want a FieldError naming shardingTotalCount", big.ShardingTotalCount, err)
	}
	raised := openPlain(t, env, func(c *state.Config) { c.JuteMaxBuffer = jute })
	m, err := raised.Mirror(ctx, nil)
	must(t, err, "Mirror")
	must(t, m.CreateJob(ctx, big), "CreateJob of 10,000 shards at a raised jute.maxbuffer")
	must(t, m.AddReady(ctx, "job", false), "AddReady")
	r, err := m.ReadyOf(ctx, "job")
	must(t, err, "ReadyOf")
	ids := make([]taskid.ID, big.ShardingTotalCount)
	for i := range ids {
		ids[i] = taskid.New(taskid.Meta{JobName: "job", Item: i}, taskid.Ready, strings.Repeat("S", 40))
	}
	before := m.Multis()
	must(t, m.RecordLaunch(ctx, state.Launch{Tasks: ids, Ready: []state.ReadyEntry{r}}), "RecordLaunch of 10,000 shards")
	if n := m.Multis() - before; n != 1 {
		t.Fatalf("the launch took %d multis; a run launches in one write", n)
	}
	running, err := plain.RunningOf(ctx, "job")
	must(t, err, "RunningOf")
	if len(running) != len(ids) {
		t.Fatalf("ZooKeeper holds %d running nodes of the job; want %d", len(running), len(ids))
	}
	if r, err := plain.ReadyOf(ctx, "job"); err != nil || r.Count != 0 {
		t.Fatalf("the ready entry after the launch: %+v, %v; want it gone", r, err)
	}
}

func TestJuteMaxBufferOutOfBoundsIsRefused(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	for _, n := range []int{-1, 1, state.DefaultJuteMaxBuffer - 1, state.MostJuteMaxBuffer + 1} {
		cfg := state.Config{Servers: env.Servers, Namespace: env.Namespace, JuteMaxBuffer: n}
		if _, err := state.Connect(ctxT(t), cfg); err == nil || !strings.Contains(err.Error(), "jute.maxbuffer") {
			t.Errorf("Connect with JuteMaxBuffer %d: %v; want an error naming jute.maxbuffer", n, err)
		}
		if _, err := state.Dial(ctxT(t), cfg); err == nil || !strings.Contains(err.Error(), "jute.maxbuffer") {
			t.Errorf("Dial with JuteMaxBuffer %d: %v; want an error naming jute.maxbuffer", n, err)
		}
	}
}

// A job whose config was deleted behind ejcloud's back (an operator's zkCli, a 2.1.5 tool)
// leaves its state behind; registered again under its name, it begins afresh: not disabled,
// nothing queued, no ledger to catch up from.
func TestAJobRegisteredAgainAfterAnOutsideDeleteBeginsAfresh(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	s := open(t, env)
	ctx := ctxT(t)
	must(t, s.CreateApp(ctx, testApp("app")), "CreateApp")
	must(t, s.CreateJob(ctx, testJob("j", "app")), "CreateJob")
	_, err := s.RecordFires(ctx, "j", state.Fires{Last: slot0, Accumulate: true, Entries: []state.FireEntry{fired(0)}})
	must(t, err, "RecordFires")
	must(t, s.DisableJob(ctx, "j"), "DisableJob")

	raw, _, err := zk.Connect(env.Servers, sessionTimeout, zk.WithLogInfo(false), zk.WithLogger(quiet{}))
	must(t, err, "zk.Connect")
	defer raw.Close()
	must(t, raw.Delete("/"+env.Namespace+"/config/job/j", -1), "the outside delete")
	await.True(t, 10*time.Second, "the config gone from the store's view", func() bool {
		_, err := s.Job(ctx, "j")
		return errors.Is(err, state.ErrNotFound)
	})

	must(t, s.CreateJob(ctx, testJob("j", "app")), "CreateJob again")
	if _, ok, err := s.FireLedger(ctx, "j"); ok || err != nil {
		t.Errorf("the job registered again has a ledger (%v, %v); want none", ok, err)
	}
	if off, err := s.JobDisabled(ctx, "j"); off || err != nil {
		t.Errorf("the job registered again is disabled (%v, %v); want enabled", off, err)
	}
	if r, err := s.ReadyOf(ctx, "j"); r.Count != 0 || err != nil {
		t.Errorf("the job registered again has %d queued runs (%v); want none", r.Count, err)
	}
}
