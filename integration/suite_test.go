package integration

import (
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/cron"
	"github.com/ejcloud/ejcloud/integration/audit"
	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// cronJob is what the audit needs of a job registered now with a cron.
func cronJob(t *testing.T, name string, shards int, expr string) audit.Job {
	t.Helper()
	sched, err := cron.Parse(expr)
	if err != nil {
		t.Fatal(err)
	}
	return audit.Job{Name: name, Shards: shards, Schedule: sched, Since: time.Now()}
}

// mustAudit audits the jobs from the status updates and from what their scripts recorded
// (both reported), and fails the test if either finds anything.
func mustAudit(t *testing.T, w *world, jobs ...audit.Job) audit.Report {
	t.Helper()
	rep := w.mesos.audit(t, jobs...)
	t.Log(rep)
	eff := w.auditEffects(t, jobs...)
	t.Log(eff)
	if !rep.OK() || !eff.OK() {
		t.Fatal("the audit found duplicate, lost or overlapping shard runs")
	}
	return rep
}

func setPlacement(job, placement string) string {
	var j map[string]any
	json.Unmarshal([]byte(job), &j)
	j["placement"] = placement
	b, _ := json.Marshal(j)
	return string(b)
}

// startWorld starts a world of agents with one leading scheduler and app "app" registered.
func startWorld(t *testing.T, agents int, schedulerFlags ...string) (*world, *scheduler) {
	t.Helper()
	w := newWorld(t, agents)
	s := startScheduler(t, w.zk, w.mesos, schedulerFlags...)
	leaderOf(t, s)
	s.must(t, 204, "POST", "/api/app", w.appJSON(""))
	return w, s
}

// triggerAndAwait triggers the job and waits until each of its shards has run n times in all.
func (w *world) triggerAndAwait(t *testing.T, s *scheduler, name string, shards, n int) {
	t.Helper()
	s.must(t, 204, "POST", "/api/job/trigger", name)
	await.True(t, 30*time.Second, fmt.Sprintf("each shard of %s ran %d times", name, n), func() bool {
		r := w.runs(name)
		for i := 0; i < shards; i++ {
			if len(r[fmt.Sprint(i)]) != n {
				return false
			}
		}
		return true
	})
}

// triggerHeld registers a trigger-only job whose shards hold until released, SPREAD over the
// agents, and triggers it.
func (w *world) triggerHeld(t *testing.T, s *scheduler, name string, shards int, failover bool) {
	t.Helper()
	s.must(t, 204, "POST", "/api/job/register", setPlacement(w.jobJSON(name, shards, "", failover, w.hold(name)), "SPREAD"))
	s.must(t, 204, "POST", "/api/job/trigger", name)
}

// An app and a job registered through the REST API run on the agents when their cron says;
// their tasks show in /api/job/tasks/running while they run; every fire ran each shard once.
func TestRESTRegistrationRunsOnCron(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 2)
	s := startScheduler(t, w.zk, w.mesos)
	leaderOf(t, s)
	s.must(t, 204, "POST", "/api/app", w.appJSON("http://"+s.addr+"/executor/ejcloud-executor"))
	job := setPlacement(w.jobJSON("cron", 4, "*/2 * * * * ?", false, "sleep 0.5"), "SPREAD")
	audited := cronJob(t, "cron", 4, "*/2 * * * * ?")
	s.must(t, 204, "POST", "/api/job/register", job)
	await.True(t, 30*time.Second, "the job's tasks listed as running", func() bool { return tasks(t, s, "running", "cron") > 0 })
	await.True(t, 60*time.Second, "every shard ran on two fires", func() bool {
		r := w.runs("cron")
		for i := 0; i < 4; i++ {
			if len(r[fmt.Sprint(i)]) < 2 {
				return false
			}
		}
		return true
	})
	agents := map[string]bool{}
	for _, as := range w.runs("cron") {
		for _, a := range as {
			agents[a] = true
		}
	}
	if len(agents) != 2 {
		t.Errorf("SPREAD shards ran on agents %v; want both", agents)
	}
	stopFires(t, s, job)
	quiet(t, s, "cron")
	rep := mustAudit(t, w, audited)
	runs := 0
	for _, as := range w.runs("cron") {
		runs += len(as)
	}
	if runs != rep.ShardRuns {
		t.Fatalf("the script ran %d times; the status updates show %d shard runs", runs, rep.ShardRuns)
	}
}

// SIGKILL of an executor fails its shard over: TASK_FAILED, failover queue, relaunch; the shard
// on the other agent is not touched.
func TestExecutorKillFailsOver(t *testing.T) {
	t.Parallel()
	w, s := startWorld(t, 2)
	w.triggerHeld(t, s, "fo", 2, true)
	await.True(t, 30*time.Second, "both shards running", func() bool { r := w.runs("fo"); return len(r["0"]) == 1 && len(r["1"]) == 1 })
	victim := w.runs("fo")["0"][0]
	pids := w.mesos.executorPIDs(victim)
	if len(pids) != 1 || w.runs("fo")["1"][0] == victim {
		t.Fatalf("want shard 0 alone on agent %s with one executor; executors %v, runs %v", victim, pids, w.runs("fo"))
	}
	syscall.Kill(pids[0], syscall.SIGKILL)
	await.True(t, 30*time.Second, "shard 0 relaunched", func() bool { return len(w.runs("fo")["0"]) == 2 })
	w.release("fo")
	quiet(t, s, "fo")
	if r := w.runs("fo"); len(r["1"]) != 1 {
		t.Fatalf("shard 1 ran %d times; only the lost shard may be relaunched", len(r["1"]))
	}
	rep := mustAudit(t, w, audit.Job{Name: "fo", Shards: 2})
	if rep.Relaunches != 1 {
		t.Fatalf("%d failover relaunches; want 1", rep.Relaunches)
	}
}

// A partitioned agent's task is UNREACHABLE and still counts as running (no relaunch before
// the unreachable timeout); healed, it runs on to the end, once.
func TestAgentPartitionAndHeal(t *testing.T) {
	t.Parallel()
	w, s := startWorld(t, 2, "--unreachable-timeout", "1h")
	w.triggerHeld(t, s, "part", 1, true)
	await.True(t, 30*time.Second, "running", func() bool { return len(w.runs("part")["0"]) == 1 })
	agent := w.runs("part")["0"][0]
	w.mesos.fault(t, agent, "partition")
	await.True(t, 30*time.Second, "the task is unreachable", func() bool { return hasState(w.mesos.taskStates(t, "part"), "TASK_UNREACHABLE") })
	if n := tasks(t, s, "running", "part"); n != 1 || tasks(t, s, "failover", "part") != 0 {
		t.Fatalf("an unreachable task must count as running: %d running, %d failover", n, tasks(t, s, "failover", "part"))
	}
	w.mesos.fault(t, agent, "heal")
	await.True(t, 30*time.Second, "the task is running again", func() bool { return hasState(w.mesos.taskStates(t, "part"), "TASK_RUNNING") })
	w.release("part")
	quiet(t, s, "part")
	if r := w.runs("part"); len(r["0"]) != 1 {
		t.Fatalf("the shard ran %d times; want once", len(r["0"]))
	}
	mustAudit(t, w, audit.Job{Name: "part", Shards: 1})
}

// A job disabled while its task's agent is unreachable: real Mesos (and mesos-local) forgets the
// KILL, and the task runs on when the agent comes back. The scheduler kills it then (Mesos
// reports it running, and its job is disabled), and the shard is not relaunched.
func TestADisableDuringAPartitionKillsTheTaskWhenItsAgentIsBack(t *testing.T) {
	t.Parallel()
	w, s := startWorld(t, 2, "--unreachable-timeout", "1h")
	w.triggerHeld(t, s, "partoff", 1, true)
	await.True(t, 30*time.Second, "running", func() bool { return len(w.runs("partoff")["0"]) == 1 })
	agent := w.runs("partoff")["0"][0]
	w.mesos.fault(t, agent, "partition")
	await.True(t, 30*time.Second, "the task is unreachable", func() bool { return hasState(w.mesos.taskStates(t, "partoff"), "TASK_UNREACHABLE") })
	if code, body := s.api(t, "POST", "/api/job/partoff/disable", ""); code != 204 {
		t.Fatalf("disable: %d %s", code, body)
	}
	w.mesos.fault(t, agent, "heal")
	quiet(t, s, "partoff")
	await.True(t, 30*time.Second, "the task is gone from Mesos", func() bool { return len(w.mesos.taskStates(t, "partoff")) == 0 })
	if r := w.runs("partoff"); len(r["0"]) != 1 {
		t.Fatalf("the shard ran %d times; want once (killed, not relaunched)", len(r["0"]))
	}
}

// An update that restarts a job's tasks, made while the task's agent is partitioned: Mesos
// forgets the kill of a task it cannot reach, and the leader that sent it is SIGKILLed before
// the agent is back. The next leader never heard of the kill; it finds the task in the job's
// restart list when the agent's return reports it running, and kills it.
func TestAnUpdateDuringAPartitionRestartsTheTaskUnderTheNextLeader(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 2)
	a := startScheduler(t, w.zk, w.mesos, "--unreachable-timeout", "1h")
	leaderOf(t, a)
	b := startScheduler(t, w.zk, w.mesos, "--unreachable-timeout", "1h")
	a.must(t, 204, "POST", "/api/app", w.appJSON(""))
	w.triggerHeld(t, a, "partupd", 1, true)
	await.True(t, 30*time.Second, "running", func() bool { return len(w.runs("partupd")["0"]) == 1 })
	agent := w.runs("partupd")["0"][0]
	w.mesos.fault(t, agent, "partition")
	await.True(t, 30*time.Second, "the task is unreachable", func() bool { return hasState(w.mesos.taskStates(t, "partupd"), "TASK_UNREACHABLE") })
	// A new command: what a task is made of changed, so the running task must go.
	a.must(t, 204, "PUT", "/api/job/update", setPlacement(w.jobJSON("partupd", 1, "", true, "true"), "SPREAD"))
	a.stop(syscall.SIGKILL)
	leaderOf(t, b)
	w.mesos.fault(t, agent, "heal")
	await.True(t, 60*time.Second, "the task of the old config is gone from Mesos", func() bool { return len(w.mesos.taskStates(t, "partupd")) == 0 })
	quiet(t, b, "partupd")
	if r := w.runs("partupd"); len(r["0"]) != 1 {
		t.Fatalf("the shard ran %d times; want once (killed; a trigger-only job is not run again)", len(r["0"]))
	}
	b.said(t, 10*time.Second, "killing a task that runs its job's config from before an update", "the new leader says why it killed the task")
}

func hasState(states map[string]string, want string) bool {
	for _, s := range states {
		if s == want {
			return true
		}
	}
	return false
}

// An agent restart keeps the framework's executor (checkpointing): it reconnects to the new
// agent, and its task finishes once, with no failover.
func TestAgentRestartRecoversTheExecutor(t *testing.T) {
	t.Parallel()
	w, s := startWorld(t, 1)
	w.triggerHeld(t, s, "restart", 1, true)
	await.True(t, 30*time.Second, "running", func() bool { return len(w.runs("restart")["0"]) == 1 })
	agent := w.mesos.agents[0]
	before := w.mesos.executorPIDs(agent)
	if len(before) != 1 {
		t.Fatalf("executors %v; want one", before)
	}
	w.mesos.fault(t, agent, "restart")
	await.True(t, 30*time.Second, "the task is running after the restart", func() bool { return hasState(w.mesos.taskStates(t, "restart"), "TASK_RUNNING") })
	w.release("restart")
	quiet(t, s, "restart")
	if after := w.mesos.executorPIDs(agent); len(after) != 1 || after[0] != before[0] {
		t.Fatalf("executor processes %v after the restart; want the same one, %v", after, before)
	}
	rep := mustAudit(t, w, audit.Job{Name: "restart", Shards: 1})
	if rep.Relaunches != 0 || len(w.runs("restart")["0"]) != 1 {
		t.Fatalf("the shard ran %d times with %d relaunches; want once, none", len(w.runs("restart")["0"]), rep.Relaunches)
	}
}

// SIGKILL of the leading scheduler: the standby takes over with the same framework and the
// cron job goes on, with no shard of any fire run twice or lost.
func TestLeaderKillWithStandby(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 2)
	ss := []*scheduler{startScheduler(t, w.zk, w.mesos), startScheduler(t, w.zk, w.mesos)}
	l := leaderOf(t, ss...)
	l.must(t, 204, "POST", "/api/app", w.appJSON(""))
	job := w.jobJSON("ha", 2, "*/1 * * * * ?", true, "sleep 0.2")
	audited := cronJob(t, "ha", 2, "*/1 * * * * ?")
	l.must(t, 204, "POST", "/api/job/register", job)
	for k := 0; k < 3; k++ {
		l = leaderOf(t, ss...)
		led := len(w.runs("ha")["0"])
		await.True(t, 30*time.Second, "the leader runs two fires", func() bool { return len(w.runs("ha")["0"]) > led+1 })
		for i, s := range ss {
			if s == l {
				l.stop(syscall.SIGKILL)
				ss[i] = startScheduler(t, w.zk, w.mesos)
			}
		}
		killed := time.Now()
		l = leaderOf(t, ss...)
		t.Logf("kill %d: the standby leads after %v", k, time.Since(killed).Round(time.Millisecond))
	}
	l = leaderOf(t, ss...)
	stopFires(t, l, job)
	quiet(t, l, "ha")
	if fw := w.mesos.state(t).Frameworks; len(fw) != 1 {
		t.Fatalf("%d frameworks at Mesos; want the one, re-subscribed by every leader", len(fw))
	}
	mustAudit(t, w, audited)
}

// holdsFor checks cond for the whole of d (an observation window, not a wait for something to
// happen): it fails the test the first time cond is false.
func holdsFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if !cond() {
			t.Fatalf("%s: broken during the %v window", what, d)
		}
	}
}

// While ZooKeeper is down the scheduler launches nothing (its write-ahead cannot be made);
// when it comes back, the job resumes, and no shard of any fire was run twice or lost.
func TestZooKeeperRestart(t *testing.T) {
	t.Parallel()
	srv := statetest.StartDedicated(t)
	zk := statetest.Env{Servers: []string{srv.Addr}, Namespace: "ejcloud"}
	m := startMesos(t, 2)
	w := &world{zk: zk, mesos: m, dir: t.TempDir()}
	s := startScheduler(t, zk, m)
	leaderOf(t, s)
	s.must(t, 204, "POST", "/api/app", w.appJSON(""))
	job := w.jobJSON("zk", 2, "*/1 * * * * ?", true, "")
	audited := cronJob(t, "zk", 2, "*/1 * * * * ?")
	s.must(t, 204, "POST", "/api/job/register", job)
	await.True(t, 30*time.Second, "two fires ran", func() bool { return len(w.runs("zk")["0"]) >= 2 })
	srv.Stop()
	down := time.Now()
	launchedSince := func(at time.Time) bool {
		ups, err := audit.ReadFile(m.updates)
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range ups {
			if u.State == "TASK_RUNNING" && u.At.After(at) {
				return true
			}
		}
		return false
	}
	// A cycle that had written ahead before the outage may still launch in its first moments.
	holdsFor(t, 4*time.Second, "nothing launched while ZooKeeper is down", func() bool { return !launchedSince(down.Add(time.Second)) })
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	up := time.Now()
	await.True(t, 60*time.Second, "the job runs again", func() bool { return launchedSince(up) })
	l := leaderOf(t, s)
	stopFires(t, l, job)
	quiet(t, l, "zk")
	mustAudit(t, w, audited)
}

// Deleting an app stops its executors on every agent and removes its jobs.
func TestAppDeletionStopsItsExecutors(t *testing.T) {
	t.Parallel()
	w, s := startWorld(t, 2)
	w.triggerHeld(t, s, "doomed", 2, false)
	await.True(t, 30*time.Second, "an executor on each agent", func() bool {
		return len(w.mesos.executorPIDs(w.mesos.agents[0])) == 1 && len(w.mesos.executorPIDs(w.mesos.agents[1])) == 1
	})
	s.must(t, 204, "DELETE", "/api/app/app", "")
	await.True(t, 30*time.Second, "the app's executors are gone", func() bool { return len(w.mesos.executorPIDs("")) == 0 })
	s.must(t, 404, "GET", "/api/app/app", "")
	s.must(t, 404, "GET", "/api/job/jobs/doomed", "")
	await.True(t, 30*time.Second, "Mesos lists no executor", func() bool {
		for _, f := range w.mesos.state(t).Frameworks {
			if len(f.Executors) > 0 {
				return false
			}
		}
		return true
	})
}

// Bad input on every endpoint answers an error and leaves ZooKeeper exactly as it was.
func TestBadInputsLeaveZooKeeperUnchanged(t *testing.T) {
	t.Parallel()
	w, s := startWorld(t, 1, "--auth-guest", "guest:guest")
	job := w.jobJSON("steady", 2, "", false, "")
	s.must(t, 204, "POST", "/api/job/register", job)
	before := statetest.Dump(t, w.zk)
	big := `{"appName":"big","description":"` + strings.Repeat("x", 2<<20) + `"}`
	bad := []struct {
		method, path, body string
		want               int
		auth               []string
	}{
		{"POST", "/api/app", `{"appName":"x"}`, 400, nil},
		{"POST", "/api/app", `{"appName":"bad name","appURL":"/x","bootstrapScript":"./x"}`, 400, nil},
		{"POST", "/api/app", `{"appName":"x","appURL":"/x","bootstrapScript":"./x","cpuCount":-1}`, 400, nil},
		{"POST", "/api/app", `{"appName":"x","appURL":"/x","bootstrapScript":"./x","surprise":1}`, 400, nil},
		{"POST", "/api/app", `not json`, 400, nil},
		{"POST", "/api/app", big, 413, nil},
		{"POST", "/api/app", w.appJSON(""), 409, nil},
		{"PUT", "/api/app", `{"appName":"nope","cpuCount":1}`, 404, nil},
		{"PUT", "/api/app", `{"appName":"app","memoryMB":"lots"}`, 400, nil},
		{"DELETE", "/api/app/nope", "", 404, nil},
		{"POST", "/api/app/nope/disable", "", 404, nil},
		{"POST", "/api/job/register", `{"jobName":"x"}`, 400, nil},
		{"POST", "/api/job/register", strings.Replace(job, `"steady"`, `"y"`, 1)[:40], 400, nil},
		{"POST", "/api/job/register", strings.Replace(strings.Replace(job, `"steady"`, `"y"`, 1), `"cron":""`, `"cron":"nope"`, 1), 400, nil},
		{"POST", "/api/job/register", strings.Replace(strings.Replace(job, `"steady"`, `"y"`, 1), `"shardingTotalCount":2`, `"shardingTotalCount":0`, 1), 400, nil},
		{"POST", "/api/job/register", strings.Replace(strings.Replace(job, `"steady"`, `"y"`, 1), `"appName":"app"`, `"appName":"nope"`, 1), 400, nil},
		{"POST", "/api/job/register", job, 409, nil},
		{"PUT", "/api/job/update", strings.Replace(job, `"steady"`, `"nope"`, 1), 404, nil},
		{"PUT", "/api/job/update", strings.Replace(job, `"shardingTotalCount":2`, `"shardingTotalCount":-3`, 1), 400, nil},
		{"DELETE", "/api/job/deregister", "nope", 404, nil},
		{"POST", "/api/job/trigger", "nope", 404, nil},
		{"POST", "/api/job/nope/disable", "", 404, nil},
		{"POST", "/api/job/nope/enable", "", 404, nil},
		{"GET", "/api/job/steady/next?count=many", "", 400, nil},
		{"GET", "/api/operate/sandbox", "", 400, nil},
		{"POST", "/api/job/trigger", "steady", 401, []string{"", ""}},
		{"POST", "/api/job/trigger", "steady", 401, []string{"root", "wrong"}},
		{"POST", "/api/job/trigger", "steady", 403, []string{"guest", "guest"}},
		{"DELETE", "/api/app/app", "", 403, []string{"guest", "guest"}},
		{"PUT", "/api/job/update", job, 403, []string{"guest", "guest"}},
	}
	for _, b := range bad {
		code, msg := s.api(t, b.method, b.path, b.body, b.auth...)
		if code != b.want {
			t.Errorf("%s %s %.80s: %d %.200s; want %d", b.method, b.path, b.body, code, msg, b.want)
		}
		if code == 400 && !strings.Contains(msg, `"field"`) && !strings.Contains(msg, `"error"`) {
			t.Errorf("%s %s: a 400 must say what is wrong: %s", b.method, b.path, msg)
		}
		for _, internal := range []string{w.zk.Namespace, "zk:", "state:"} {
			if strings.Contains(msg, internal) {
				t.Errorf("%s %s: the answer shows ZooKeeper internals (%q): %s", b.method, b.path, internal, msg)
			}
		}
	}
	after := statetest.Dump(t, w.zk)
	for p, v := range before {
		if a, ok := after[p]; !ok || a != v {
			t.Errorf("ZooKeeper node %s changed: %q → %q (present %v)", p, v, a, ok)
		}
	}
	for p, v := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("ZooKeeper node %s appeared: %q", p, v)
		}
	}
}
