//go:build dockertest

// The images, run by a Docker engine (`make docker-test` builds them, starts a private engine
// when none runs, and runs these with -tags dockertest). Under the tag an engine is required:
// without one the tests fail, they never skip. ZooKeeper and mesos-local run on the host, the
// scheduler image with host networking on loopback ports, as docker_test.go's parse checks
// cannot: the image starts, serves the executor the agents fetch, runs jobs, runs as non-root,
// stops on `docker stop` and hands its leadership over.
package docker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/internal/freeport"
	"github.com/ejcloud/ejcloud/state/statetest"
)

var (
	schedulerImage = envOr("EJCLOUD_SCHEDULER_IMAGE", "ejcloud/scheduler:latest")
	executorImage  = envOr("EJCLOUD_EXECUTOR_IMAGE", "ejcloud/executor:latest")
	mesosLocal     string // the mesos-local binary, built by TestMain
)

// nonRoot is the user both images' routes (distroless :nonroot, or scratch with our passwd) run
// the scheduler as.
const nonRoot = "65532:65532"

const creds = "root:secret"

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}

func TestMain(m *testing.M) {
	os.Exit(func() int {
		if out, err := exec.Command("docker", "version", "--format", "{{.Server.Version}}").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "no Docker engine answers (`make docker-test` starts one): %v\n%s", err, out)
			return 1
		}
		for _, img := range []string{schedulerImage, executorImage} {
			if out, err := exec.Command("docker", "image", "inspect", img).CombinedOutput(); err != nil {
				fmt.Fprintf(os.Stderr, "image %s is missing (`make images` builds it): %v\n%s", img, err, tail(string(out), 500))
				return 1
			}
		}
		dir, err := os.MkdirTemp("", "ejcloud-dockertest-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		if out, err := exec.Command("go", "build", "-o", dir+"/", "../integration/mesoslocal/cmd/mesos-local").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build mesos-local: %v\n%s", err, out)
			return 1
		}
		mesosLocal = filepath.Join(dir, "mesos-local")
		return statetest.Main(m)
	}())
}

// docker runs the docker CLI and returns its standard output; a failure fails the test.
func docker(t testing.TB, args ...string) string {
	t.Helper()
	out, err := dockerErr(args...)
	if err != nil {
		t.Fatalf("docker %s: %v", strings.Join(args, " "), err)
	}
	return out
}

func dockerErr(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "docker", args...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(stdout.String()), nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func freeAddr(t testing.TB) string { return freeport.For(t) }

// syncBuf collects a process's output while the test reads it.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var masterLine = regexp.MustCompile(`master (http://\S+) with \d+ agents`)

// startMesosLocal runs mesos-local on the host with two agents and returns its master URL. It
// is stopped (with the executors and scripts of its agents) when the test ends.
func startMesosLocal(t *testing.T) string {
	t.Helper()
	out := &syncBuf{}
	cmd := exec.Command(mesosLocal, "--addr", freeAddr(t), "--agents", "2", "--work-dir", t.TempDir(),
		"--allocation-interval", "50ms", "--executor-shutdown-grace-period", "500ms")
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
		if t.Failed() {
			t.Logf("mesos-local printed:\n%s", tail(out.String(), 4000))
		}
	})
	var url string
	await.True(t, 30*time.Second, "mesos-local names its master", func() bool {
		if m := masterLine.FindStringSubmatch(out.String()); m != nil {
			url = m[1]
			return true
		}
		return false
	})
	return url
}

// schedulerContainer is a container of the scheduler image, serving on addr (host network).
type schedulerContainer struct {
	name string
	addr string
}

// runScheduler starts a container of the scheduler image with host networking; it is removed
// when the test ends, its log shown if the test failed.
func runScheduler(t *testing.T, zk statetest.Env, mesosURL, suffix string, extra ...string) *schedulerContainer {
	t.Helper()
	c := &schedulerContainer{name: fmt.Sprintf("ejcloud-dockertest-%d-%s", os.Getpid(), suffix), addr: freeAddr(t)}
	args := append([]string{"run", "-d", "--name", c.name, "--network", "host", schedulerImage,
		"--zk-servers", strings.Join(zk.Servers, ","), "--zk-namespace", zk.Namespace,
		"--mesos-url", mesosURL, "--http-addr", c.addr, "--hostname", "127.0.0.1", "--auth-root", creds,
		"--executor-binary", "/usr/local/bin/ejcloud-executor.gz"}, extra...)
	t.Cleanup(func() {
		if t.Failed() {
			logs, _ := exec.Command("docker", "logs", c.name).CombinedOutput()
			t.Logf("container %s printed:\n%s", c.name, tail(string(logs), 4000))
		}
		if out, err := exec.Command("docker", "rm", "-f", c.name).CombinedOutput(); err != nil {
			t.Errorf("docker rm -f %s: %v %s", c.name, err, out)
		}
	})
	docker(t, args...)
	return c
}

func (c *schedulerContainer) status(path string) int {
	resp, err := http.Get("http://" + c.addr + path)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// leads says the scheduler leads and is subscribed to Mesos.
func (c *schedulerContainer) leads() bool { return c.status("/readyz") == 200 }

// must sends an API request with the root credentials; it must answer want.
func (c *schedulerContainer) must(t *testing.T, want int, method, path, body string) string {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+c.addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(body, "{") {
		req.Header.Set("Content-Type", "application/json")
	}
	user, pass, _ := strings.Cut(creds, ":")
	req.SetBasicAuth(user, pass)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("%s %s %s: %d %s; want %d", method, path, body, resp.StatusCode, b, want)
	}
	return string(b)
}

// idle says the scheduler has nothing ready, running or waiting for failover.
func (c *schedulerContainer) idle(t *testing.T) bool {
	for _, kind := range []string{"ready", "running", "failover"} {
		var entries []json.RawMessage
		if err := json.Unmarshal([]byte(c.must(t, 200, "GET", "/api/job/tasks/"+kind, "")), &entries); err != nil {
			t.Fatalf("GET /api/job/tasks/%s: %v", kind, err)
		}
		if len(entries) > 0 {
			return false
		}
	}
	return true
}

// ranTimes says every shard of 0..shards-1 has appended a line starting with its item to runs
// n times (the executor gives a script the job's context as one more argument, which echo
// prints after the item).
func ranTimes(runs string, shards, n int) bool {
	b, _ := os.ReadFile(runs)
	count := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.Fields(line); len(f) > 0 {
			count[f[0]]++
		}
	}
	for i := range shards {
		if count[strconv.Itoa(i)] != n {
			return false
		}
	}
	return len(count) == shards
}

// uids returns the real, effective, saved and file-system user ids of a host process.
func uids(t *testing.T, pid string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Uid:"); ok {
			return strings.Fields(v)
		}
	}
	t.Fatalf("/proc/%s/status has no Uid line", pid)
	return nil
}

// TestSchedulerContainer: the scheduler image, with ZooKeeper and mesos-local on the host, runs
// a sharded job with the executor it serves itself, as user 65532; `docker stop` ends it
// cleanly within 10 s, and it releases the leadership at once (not after its ZooKeeper session
// times out) to a second scheduler container, which serves and runs the job in turn.
func TestSchedulerContainer(t *testing.T) {
	zk := statetest.StartZooKeeper(t)
	mesosURL := startMesosLocal(t)
	// A session timeout longer than the handover may take: a standby that leads within 10 s of
	// the first container's end was handed the leadership, it did not wait for an expiry.
	const session = 20 * time.Second
	a := runScheduler(t, zk, mesosURL, "a", "--zk-session-timeout", session.String())
	await.True(t, 60*time.Second, "the scheduler container leads and is subscribed", a.leads)

	if user := docker(t, "inspect", "-f", "{{.Config.User}}", a.name); user != nonRoot {
		t.Errorf("the image's user is %q; want %s", user, nonRoot)
	}
	pid := docker(t, "inspect", "-f", "{{.State.Pid}}", a.name)
	for _, uid := range uids(t, pid) {
		if uid != "65532" {
			t.Errorf("the scheduler (host pid %s) runs with uids %v; want 65532", pid, uids(t, pid))
			break
		}
	}

	b := runScheduler(t, zk, mesosURL, "b", "--zk-session-timeout", session.String())
	await.True(t, 30*time.Second, "the second container is up, as a standby", func() bool {
		return b.status("/healthz") == 200 && b.status("/readyz") == 503
	})

	// The job's scripts run on the host (mesos-local's agents), under the executor the agents
	// fetched from the container. Its time zone is one the host's zoneinfo would give, but the
	// image has none: registering it proves the embedded time/tzdata.
	runs := filepath.Join(t.TempDir(), "runs")
	const shards = 3
	job, _ := json.Marshal(map[string]any{"jobName": "sharded", "appName": "app", "jobType": "SCRIPT",
		"jobExecutionType": "TRANSIENT", "cron": "0 0 0 1 1 ? 2099", "timeZone": "Asia/Shanghai",
		"shardingTotalCount": shards, "cpuCount": 0.1, "memoryMB": 16,
		"scriptCommandLine": `echo "$EJCLOUD_SHARDING_ITEM" >> ` + runs})
	a.must(t, 204, "POST", "/api/app", `{"appName":"app","appURL":"http://`+a.addr+`/executor/ejcloud-executor",`+
		`"bootstrapScript":"./ejcloud-executor","cpuCount":0.1,"memoryMB":32}`)
	a.must(t, 204, "POST", "/api/job/register", string(job))
	if got := a.must(t, 200, "GET", "/api/job/jobs/sharded", ""); !strings.Contains(got, `"Asia/Shanghai"`) {
		t.Errorf("GET /api/job/jobs/sharded: %s; want timeZone Asia/Shanghai", got)
	}
	a.must(t, 204, "POST", "/api/job/trigger", "sharded")
	await.True(t, 60*time.Second, "each shard ran once", func() bool { return ranTimes(runs, shards, 1) })
	await.True(t, 30*time.Second, "the job is done", func() bool { return a.idle(t) })

	stopped := time.Now()
	docker(t, "stop", "--time", "10", a.name)
	took := time.Since(stopped)
	exit := docker(t, "inspect", "-f", "{{.State.ExitCode}} {{.State.OOMKilled}}", a.name)
	if took >= 10*time.Second || exit != "0 false" {
		t.Fatalf("docker stop took %v and the container exited with %q; want under 10 s and exit 0", took.Round(time.Millisecond), exit)
	}
	t.Logf("docker stop: %v, exit 0", took.Round(time.Millisecond))
	handover := time.Now()
	await.True(t, 10*time.Second, "the second container leads after the first stopped", b.leads)
	t.Logf("the second container leads %v after the first stopped", time.Since(handover).Round(time.Millisecond))

	// The new leader runs the job again, on the executors the agents kept (an app's executor
	// stays up between tasks; changing its appURL now would make Mesos refuse the tasks as
	// incompatible with the running ExecutorInfo), and serves the executor as the first did.
	if exe := b.must(t, 200, "GET", "/executor/ejcloud-executor", ""); !strings.HasPrefix(exe, "\x7fELF") {
		t.Errorf("GET /executor/ejcloud-executor from the second container: %d bytes, not an ELF binary", len(exe))
	}
	b.must(t, 204, "POST", "/api/job/trigger", "sharded")
	await.True(t, 60*time.Second, "each shard ran twice", func() bool { return ranTimes(runs, shards, 2) })
	await.True(t, 30*time.Second, "the job is done again", func() bool { return b.idle(t) })
}

// TestExecutorContainer: the executor image runs its binary, and SCRIPT jobs' commands as the
// executor runs them (executor/runners.go: /bin/sh -c CMDLINE "$1" with the job's context).
func TestExecutorContainer(t *testing.T) {
	if got := docker(t, "run", "--rm", "--network", "none", executorImage, "--version"); !strings.HasPrefix(got, "ejcloud-executor ") {
		t.Errorf("ejcloud-executor --version in the image: %q", got)
	}
	script := `echo "shard $1"; date -u +%Y | grep -c '^20'; d=$(mktemp -d); echo ok > "$d/f"; sed 's/ok/done/' "$d/f"; sleep 0.1`
	got := docker(t, "run", "--rm", "--network", "none", "--user", nonRoot, "--entrypoint", "/bin/sh", executorImage,
		"-c", script, "sh", `{"shardingItem":1}`)
	if want := "shard {\"shardingItem\":1}\n1\ndone"; got != want {
		t.Errorf("a script in the executor image printed %q; want %q", got, want)
	}
}

// TestImageSizes: the bounds README.md states: the scheduler image at most 30 MB; the executor's
// (about 15 MB FROM scratch, about 87 MB on debian:bookworm-slim) at most 100 MB.
func TestImageSizes(t *testing.T) {
	for img, most := range map[string]int64{schedulerImage: 30 << 20, executorImage: 100 << 20} {
		size, err := strconv.ParseInt(docker(t, "image", "inspect", "-f", "{{.Size}}", img), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: %.1f MB", img, float64(size)/1e6)
		if size > most {
			t.Errorf("%s is %d bytes; want at most %d", img, size, most)
		}
	}
}

// TestComposeConfig: the compose file is valid as Compose reads it (Debian's docker-compose, or
// the docker compose plugin where the CLI has one), and refuses to start without credentials.
func TestComposeConfig(t *testing.T) {
	compose := []string{"docker-compose"}
	if exec.Command("docker", "compose", "version").Run() == nil {
		compose = []string{"docker", "compose"}
	} else if _, err := exec.LookPath("docker-compose"); err != nil {
		t.Fatalf("neither docker compose nor docker-compose (apt-get install docker-compose; make docker-engine): %v", err)
	}
	run := func(env ...string) (string, error) {
		cmd := exec.Command(compose[0], append(compose[1:], "-f", "docker-compose.yml", "config")...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("EJCLOUD_AUTH_ROOT=root:secret")
	if err != nil {
		t.Fatalf("%s config: %v\n%s", strings.Join(compose, " "), err, out)
	}
	for _, want := range []string{"mesos/mesos-centos:1.11.0", "EJCLOUD_AUTH_ROOT: root:secret"} {
		if !strings.Contains(out, want) {
			t.Errorf("%s config does not name %q:\n%s", strings.Join(compose, " "), want, out)
		}
	}
	env := []string{}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "EJCLOUD_AUTH_ROOT=") {
			env = append(env, kv)
		}
	}
	cmd := exec.Command(compose[0], append(compose[1:], "-f", "docker-compose.yml", "config")...)
	cmd.Env = env
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "EJCLOUD_AUTH_ROOT") {
		t.Errorf("%s config without EJCLOUD_AUTH_ROOT: %v\n%s; want a refusal naming it", strings.Join(compose, " "), err, out)
	}
}
