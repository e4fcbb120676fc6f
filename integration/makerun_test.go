package integration

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	expect "github.com/Netflix/go-expect"

	"github.com/ejcloud/ejcloud/internal/await"
)

var (
	credsLine = regexp.MustCompile(`API\s+(http://\S+)\s+user:password (\S+):(\S+)`)
	pidsLine  = regexp.MustCompile(`\(pids ([0-9 ]+)\)`)
)

// makeRun is one run of docker/run-local.sh (what `make run` runs after building), on free
// ports and a directory of the test's.
type makeRun struct {
	cmd        *exec.Cmd
	out        *expect.Console
	log        *syncBuf
	url        string
	user, pass string
	pids       []int
}

func startMakeRun(t *testing.T, dir, zkPort, mesosAddr, httpAddr string) *makeRun {
	t.Helper()
	log := &syncBuf{}
	console, err := expect.NewConsole(expect.WithDefaultTimeout(90*time.Second), expect.WithStdout(log))
	if err != nil {
		t.Fatal(err)
	}
	// The run directory is given relative to the working directory, as an operator may type it.
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(wd, dir)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("../docker/run-local.sh")
	cmd.Env = append(os.Environ(), "EJCLOUD_RUN_DIR="+rel, "EJCLOUD_RUN_BIN="+bins, "EJCLOUD_RUN_ZK_PORT="+zkPort,
		"EJCLOUD_RUN_MESOS_ADDR="+mesosAddr, "EJCLOUD_HTTP_ADDR="+httpAddr)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = console.Tty(), console.Tty(), console.Tty()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &makeRun{cmd: cmd, out: console, log: log}
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGINT)
		cmd.Wait()
		for _, pid := range r.pids { // whatever it started must not outlive the test
			syscall.Kill(-pid, syscall.SIGKILL)
		}
		console.Close()
		if t.Failed() {
			t.Logf("run-local.sh printed:\n%s", log.String())
			for _, f := range []string{"scheduler.log", "mesos-local.log"} {
				b, _ := os.ReadFile(filepath.Join(dir, "logs", "latest", f))
				t.Logf("%s:\n%s", f, tail(string(b), 4000))
			}
		}
	})
	if _, err := console.ExpectString("Press Ctrl-C to stop everything"); err != nil {
		t.Fatalf("run-local.sh did not come up: %v\n%s", err, log.String())
	}
	if _, err := console.ExpectString(")."); err != nil {
		t.Fatal(err)
	}
	out := log.String()
	m := credsLine.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no console/API URL with user:password credentials in:\n%s", out)
	}
	r.url, r.user, r.pass = m[1], m[2], m[3]
	p := pidsLine.FindStringSubmatch(out)
	if p == nil {
		t.Fatalf("no pids in:\n%s", out)
	}
	for _, f := range strings.Fields(p[1]) {
		pid, _ := strconv.Atoi(f)
		r.pids = append(r.pids, pid)
	}
	return r
}

// interrupt is the user's Ctrl-C: SIGINT to the foreground process group.
func (r *makeRun) interrupt(t *testing.T) {
	t.Helper()
	syscall.Kill(-r.cmd.Process.Pid, syscall.SIGINT)
	if _, err := r.out.ExpectString("stopped."); err != nil {
		t.Fatalf("no \"stopped.\" after Ctrl-C: %v\n%s", err, r.log.String())
	}
	r.cmd.Wait()
	for _, pid := range r.pids {
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("process %d that run-local.sh started is still alive after Ctrl-C", pid)
		}
	}
}

func freePort(t *testing.T) string {
	_, port, _ := net.SplitHostPort(freeAddr(t))
	return port
}

// `make run`: ZooKeeper, mesos-local with two agents and the scheduler come up; root credentials
// are printed once beside the URL; the demo app and jobs are registered and run; Ctrl-C stops
// every process it started; a second run keeps the state and the credentials.
func TestMakeRun(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	zkPort, mesosAddr, httpAddr := freePort(t), freeAddr(t), freeAddr(t)
	first := startMakeRun(t, dir, zkPort, mesosAddr, httpAddr)
	if first.url != "http://"+httpAddr || first.user != "root" || len(first.pass) < 16 {
		t.Fatalf("printed %s %s:%s; want http://%s and root with a generated password", first.url, first.user, first.pass, httpAddr)
	}
	if n := strings.Count(first.log.String(), first.pass); n != 1 {
		t.Errorf("the password is printed %d times; want once, beside the URL", n)
	}
	for _, pid := range first.pids { // every local user can read a command line
		if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); strings.Contains(string(cmdline), first.pass) {
			t.Errorf("process %d has the password on its command line: %q", pid, strings.ReplaceAll(string(cmdline), "\x00", " "))
		}
	}
	for _, want := range []string{"registered    app demo-app", "registered    job demo-script", "registered    job demo-daemon"} {
		if !strings.Contains(first.log.String(), want) {
			t.Errorf("first run did not print %q", want)
		}
	}
	s := &scheduler{proc: &proc{name: "scheduler"}, addr: httpAddr}
	if code, _ := s.api(t, "GET", "/api/job/jobs", "", "", ""); code != 401 {
		t.Errorf("the API answered %d without credentials; want 401", code)
	}
	await.True(t, 60*time.Second, "every shard of demo-script ran and demo-daemon runs", func() bool {
		out := sandboxOutput(dir)
		for i := 0; i < 4; i++ {
			if !strings.Contains(out, fmt.Sprintf("demo-script shard %d ran", i)) {
				return false
			}
		}
		return strings.Contains(out, "demo-daemon ran")
	})
	code, body := s.api(t, "GET", "/api/job/tasks/running", "", first.user, first.pass)
	if code != 200 || !strings.Contains(body, "demo-daemon") {
		t.Errorf("GET /api/job/tasks/running: %d %s; want the daemon listed", code, body)
	}
	first.interrupt(t)

	second := startMakeRun(t, dir, zkPort, mesosAddr, httpAddr)
	if second.user != first.user || second.pass != first.pass {
		t.Errorf("the second run printed %s:%s; want the first run's credentials", second.user, second.pass)
	}
	for _, want := range []string{"kept          app demo-app", "kept          job demo-script", "kept          job demo-daemon"} {
		if !strings.Contains(second.log.String(), want) {
			t.Errorf("second run did not print %q:\n%s", want, second.log.String())
		}
	}
	second.interrupt(t)
	runs, _ := filepath.Glob(filepath.Join(dir, "logs", "2*", "scheduler.log"))
	if len(runs) != 2 {
		t.Errorf("logs of %d runs kept (%v); want both runs'", len(runs), runs)
	}
}

// With any of its three ports taken, make run starts nothing and names, for each busy port,
// the variable that moves it.
func TestMakeRunRefusesBusyPorts(t *testing.T) {
	t.Parallel()
	var addrs []string
	for range 3 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		addrs = append(addrs, l.Addr().String())
	}
	_, zkPort, _ := net.SplitHostPort(addrs[0])
	dir := t.TempDir()
	cmd := exec.Command("../docker/run-local.sh")
	cmd.Env = append(os.Environ(), "EJCLOUD_RUN_DIR="+dir, "EJCLOUD_RUN_BIN="+bins, "EJCLOUD_RUN_ZK_PORT="+zkPort,
		"EJCLOUD_RUN_MESOS_ADDR="+addrs[1], "EJCLOUD_HTTP_ADDR="+addrs[2])
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != 1 {
		t.Fatalf("run-local.sh with busy ports: %v; want exit 1\n%s", err, out)
	}
	for _, want := range []string{addrs[0] + " (for ZooKeeper) is in use", "EJCLOUD_RUN_ZK_PORT=",
		addrs[1] + " (for mesos-local) is in use", "EJCLOUD_RUN_MESOS_ADDR=",
		addrs[2] + " (for the scheduler) is in use", "EJCLOUD_HTTP_ADDR="} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "logs")); !os.IsNotExist(err) {
		t.Errorf("it started something (logs exist: %v)", err)
	}
}

// sandboxOutput is everything the tasks printed, on every agent.
func sandboxOutput(dir string) string {
	files, _ := filepath.Glob(filepath.Join(dir, "mesos", "slaves", "*", "frameworks", "*", "executors", "*", "runs", "*", "stdout"))
	var b strings.Builder
	for _, f := range files {
		data, _ := os.ReadFile(f)
		b.Write(data)
	}
	return b.String()
}
