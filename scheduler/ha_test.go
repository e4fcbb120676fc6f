package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	expect "github.com/Netflix/go-expect"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/cron"
	"github.com/ejcloud/ejcloud/integration/audit"
	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/internal/drain"
)

// schedulerProcess is a real ejcloud-scheduler binary.
type schedulerProcess struct {
	cmd  *exec.Cmd
	addr string
	out  *expect.Console
}

func startSchedulerBinary(t *testing.T, bin string, s *system, mesosURL string, extra ...string) *schedulerProcess {
	t.Helper()
	console, err := expect.NewConsole(expect.WithDefaultTimeout(60 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	cmd := exec.Command(bin, "--zk-servers", strings.Join(s.env.Servers, ","), "--zk-namespace", s.env.Namespace,
		"--mesos-url", mesosURL, "--http-addr", addr, "--hostname", "127.0.0.1", "--executor-binary", buildExecutor(t),
		"--reconcile-interval", "0")
	cmd.Args = append(cmd.Args, extra...)
	cmd.Stdout, cmd.Stderr = console.Tty(), console.Tty()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &schedulerProcess{cmd: cmd, addr: addr, out: console}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		console.Close()
	})
	if _, err := console.ExpectString("scheduler started"); err != nil {
		t.Fatalf("scheduler at %s did not start: %v", addr, err)
	}
	go drain.Console(console) // keep draining its output, however long it stays quiet
	return p
}

func (p *schedulerProcess) ready(t *testing.T) bool {
	resp, _ := get(t, p.addr, "/readyz")
	return resp != nil && resp.StatusCode == 200
}

// Killing the leader (SIGKILL) lets the standby take over within 15 s with the same
// FrameworkID, and the jobs go on running.
func TestStandbyTakesOverAfterTheLeaderIsKilled(t *testing.T) {
	t.Parallel()
	bin := buildSchedulerBinary(t)
	s := newSystem(t, 2)
	s.handOverToBinaries(t)
	a := startSchedulerBinary(t, bin, s, s.mesos.URL())
	b := startSchedulerBinary(t, bin, s, s.mesos.URL())
	var leader, standby *schedulerProcess
	await.True(t, 60*time.Second, "one binary leads", func() bool {
		switch {
		case a.ready(t):
			leader, standby = a, b
		case b.ready(t):
			leader, standby = b, a
		}
		return leader != nil
	})
	ctx := context.Background()
	fwBefore, err := s.store.FrameworkID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	j := s.scriptJob("ha", 2, "*/1 * * * * ?")
	if err := s.store.CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	// A new job reaches a running leader only through the API (not built yet): restart is not an
	// option here, so the job is registered before the takeover and checked after it.
	if resp, _ := get(t, standby.addr, "/api/job/jobs"); resp == nil || resp.StatusCode != 307 {
		t.Fatalf("standby answered %v; want 307 to the leader", resp)
	}
	leader.cmd.Process.Signal(syscall.SIGKILL)
	killed := time.Now()
	await.True(t, 15*time.Second, "the standby leads and is subscribed", func() bool { return standby.ready(t) })
	t.Logf("takeover after %v", time.Since(killed).Round(time.Millisecond))
	fwAfter, _ := s.store.FrameworkID(ctx)
	if fwAfter != fwBefore {
		t.Fatalf("FrameworkID %q after the takeover; want %q reused", fwAfter, fwBefore)
	}
	doc, _ := s.mesos.State()
	var st struct {
		Frameworks []struct {
			ID     string `json:"id"`
			Active bool   `json:"active"`
		} `json:"frameworks"`
	}
	json.Unmarshal(doc, &st)
	if len(st.Frameworks) != 1 || st.Frameworks[0].ID != fwBefore || !st.Frameworks[0].Active {
		t.Fatalf("Mesos frameworks after the takeover: %+v; want the one framework, active again", st.Frameworks)
	}
	await.True(t, 30*time.Second, "the job runs under the new leader", func() bool {
		r := s.runs("ha")
		return len(r["0"]) >= 1 && len(r["1"]) >= 1
	})
}

func buildSchedulerBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ejcloud-scheduler")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/ejcloud-scheduler").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	return bin
}

// Across 20 leader kills during a cron workload, no shard of any fire runs twice and no fire's
// shard is lost, as the status updates the agents took show (integration/audit); the scripts'
// own output is the second witness. Each kill waits for the new leader to launch something, then
// falls at a different phase of the second, so kills land before, during and after launches.
func TestExactlyOnceAcrossLeaderKills(t *testing.T) {
	t.Parallel()
	bin := buildSchedulerBinary(t)
	s := newSystem(t, 2)
	s.handOverToBinaries(t)
	ctx := context.Background()
	const kills = 20
	var jobs []config.Job
	var audited []audit.Job
	for _, spec := range []struct {
		name   string
		shards int
		cron   string
	}{{"every-second", 3, "*/1 * * * * ?"}, {"every-2s", 2, "*/2 * * * * ?"}} {
		j := s.scriptJob(spec.name, spec.shards, spec.cron)
		j.Failover = true // a launch cut short by a leader's death is recovered by reconciliation + failover
		j.ScriptCommandLine = strings.Replace(j.ScriptCommandLine, "; true", "; sleep 0.2; true", 1)
		if err := s.store.CreateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
		sched, _ := cron.Parse(j.Cron)
		jobs, audited = append(jobs, j), append(audited, audit.Job{Name: j.JobName, Shards: j.ShardingTotalCount, Schedule: sched, Since: time.Now()})
	}
	procs := killLeaders(t, bin, s, kills, nil)
	// Stop the fires, so that the work in hand can finish and the audit sees every task end.
	var l int
	await.True(t, 30*time.Second, "a leader", func() bool { l = leaderAmong(t, procs); return l >= 0 })
	s.stopFiresAndDrain(t, procs[l].addr, jobs)
	rep := audit.Check(audited, s.updates.Updates())
	t.Log(rep)
	if !rep.OK() {
		t.Fatal("the audit found duplicate or lost shard runs")
	}
	if min := 2 * kills; rep.Rounds < min {
		t.Fatalf("%d rounds over %d kills; want at least %d (the workload barely ran)", rep.Rounds, kills, min)
	}
	lines := 0
	for _, j := range jobs {
		lines += len(s.runLines(j.JobName))
	}
	if lines != rep.ShardRuns {
		t.Fatalf("the scripts ran %d times; the status updates show %d shard runs", lines, rep.ShardRuns)
	}
}

// killLeaders runs two scheduler binaries (1 s sessions) and SIGKILLs the leader kills times,
// each time once it has launched something, at phase k/10 of a second, starting a new
// instance in its place; each, if not nil, is called while a leader is awaited and after each
// kill. It returns the instances running at the end.
func killLeaders(t *testing.T, bin string, s *system, kills int, each func()) []*schedulerProcess {
	t.Helper()
	if each == nil {
		each = func() {}
	}
	extra := []string{"--zk-session-timeout", "1s"}
	procs := []*schedulerProcess{startSchedulerBinary(t, bin, s, s.mesos.URL(), extra...), startSchedulerBinary(t, bin, s, s.mesos.URL(), extra...)}
	for k := 0; k < kills; k++ {
		var l int
		await.True(t, 30*time.Second, "a leader", func() bool { each(); l = leaderAmong(t, procs); return l >= 0 })
		led := time.Now()
		await.True(t, 30*time.Second, fmt.Sprintf("kill %d: the leader launches", k), func() bool { return startedSince(s.updates.Updates(), led) })
		// Deliberate fault timing, not a wait: the kill falls at phase k/10 of a second.
		now := time.Now()
		time.Sleep(now.Truncate(time.Second).Add(time.Second + time.Duration(k%10)*100*time.Millisecond).Sub(now))
		procs[l].cmd.Process.Signal(syscall.SIGKILL)
		procs[l].cmd.Wait()
		procs[l] = startSchedulerBinary(t, bin, s, s.mesos.URL(), extra...)
		each()
	}
	return procs
}

// startedSince says a task reported TASK_RUNNING after t.
func startedSince(updates []audit.Update, t time.Time) bool {
	for _, u := range updates {
		if u.State == "TASK_RUNNING" && u.At.After(t) {
			return true
		}
	}
	return false
}

// handOverToBinaries stops the system's in-process scheduler, so that scheduler binaries do the
// work, and points the app at the executor file (it was fetched from the stopped scheduler).
func (s *system) handOverToBinaries(t *testing.T) {
	t.Helper()
	s.sched.stop()
	<-s.sched.done
	s.sched.done <- nil
	if _, err := s.store.UpdateApp(context.Background(), "app", func(a config.App) (config.App, error) {
		a.AppURL, a.BootstrapScript = buildExecutor(t), "./"+filepath.Base(buildExecutor(t))
		return a, nil
	}); err != nil {
		t.Fatal(err)
	}
}

// stopFiresAndDrain moves the jobs' crons past 2099 through the leader at addr, so that the
// work in hand can finish, and waits until none of it is ready, running or queued for failover.
func (s *system) stopFiresAndDrain(t *testing.T, addr string, jobs []config.Job) {
	t.Helper()
	for _, j := range jobs {
		j.Cron = "0 0 0 1 1 ? 2099"
		body, _ := json.Marshal(j)
		if code, msg := call(t, "PUT", "http://"+addr+"/api/job/update", string(body)); code != 204 {
			t.Fatalf("stopping %s's fires: %d %s", j.JobName, code, msg)
		}
	}
	await.True(t, 60*time.Second, "the work in hand is done", func() bool {
		for _, j := range jobs {
			if s.ready(j.JobName) != 0 || s.runningCount(j.JobName) != 0 {
				return false
			}
		}
		return s.failoverCount() == 0
	})
}

// leaderAmong is the index of the process that leads, or -1.
func leaderAmong(t *testing.T, procs []*schedulerProcess) int {
	for i, p := range procs {
		if p.ready(t) {
			return i
		}
	}
	return -1
}
