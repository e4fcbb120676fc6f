package scheduler

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	expect "github.com/Netflix/go-expect"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/internal/await"
)

// schedulerProcess is a real ejcloud-scheduler binary.
type schedulerProcess struct {
	cmd  *exec.Cmd
	addr string
	out  *expect.Console
}

func startSchedulerBinary(t *testing.T, bin string, s *system, mesosURL string) *schedulerProcess {
	t.Helper()
	console, err := expect.NewConsole(expect.WithDefaultTimeout(60 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	addr := freeAddr(t)
	cmd := exec.Command(bin, "--zk-servers", strings.Join(s.env.Servers, ","), "--zk-namespace", s.env.Namespace,
		"--mesos-url", mesosURL, "--http-addr", addr, "--hostname", "127.0.0.1", "--executor-binary", buildExecutor(t),
		"--reconcile-interval", "0")
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
	go console.ExpectEOF() // keep draining its output
	return p
}

func (p *schedulerProcess) ready(t *testing.T) bool {
	resp, _ := get(t, p.addr, "/readyz")
	return resp != nil && resp.StatusCode == 200
}

// Killing the leader (SIGKILL) lets the standby take over within 15 s with the same
// FrameworkID, and the jobs go on running.
func TestStandbyTakesOverAfterTheLeaderIsKilled(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "ejcloud-scheduler")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/ejcloud-scheduler").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	// The in-process scheduler of newSystem is stopped at once: the binaries do the work.
	s := newSystem(t, 2)
	s.sched.stop()
	<-s.sched.done
	s.sched.done <- nil
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
	// The app fetched the executor from the stopped in-process scheduler; fetch the file itself.
	if _, err := s.store.UpdateApp(ctx, "app", func(a config.App) (config.App, error) {
		a.AppURL, a.BootstrapScript = buildExecutor(t), "./"+filepath.Base(buildExecutor(t))
		return a, nil
	}); err != nil {
		t.Fatal(err)
	}
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
