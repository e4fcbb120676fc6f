// Package integration drives the real binaries — ejcloud-scheduler, ejcloud-executor and
// mesos-local — with a real ZooKeeper, through their command lines, their output (go-expect)
// and their HTTP interfaces, as an operator would. Every wait has a deadline.
package integration

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	expect "github.com/Netflix/go-expect"

	"github.com/ejcloud/ejcloud/integration/audit"
	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/internal/drain"
	"github.com/ejcloud/ejcloud/internal/freeport"
	"github.com/ejcloud/ejcloud/internal/gobuild"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// bins holds the binaries under test, built once per test binary.
var bins string

func TestMain(m *testing.M) {
	os.Exit(func() int {
		dir, err := os.MkdirTemp("", "ejcloud-integration-bin-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		out, err := exec.Command("go", "build", "-o", dir+"/", "../scheduler/cmd/ejcloud-scheduler",
			"../integration/mesoslocal/cmd/mesos-local").CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "build the binaries: %v\n%s", err, out)
			return 1
		}
		if err := gobuild.Executor(dir+"/", "../executor/cmd/ejcloud-executor"); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		bins = dir
		return statetest.Main(m)
	}())
}

const creds = "root:secret"

// proc is one running binary with its output on a go-expect console.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  *expect.Console
	log  *syncBuf // everything it printed, for failures
}

// syncBuf is the output of a process: written by the goroutine draining its console, read by
// the test.
type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
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

// start runs a binary and waits for the line that says it is up.
func start(t testing.TB, name, upLine string, args ...string) *proc {
	t.Helper()
	log := &syncBuf{}
	console, err := expect.NewConsole(expect.WithDefaultTimeout(60*time.Second), expect.WithStdout(log))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(bins, name), args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = console.Tty(), console.Tty(), console.Tty()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{name: name, cmd: cmd, out: console, log: log}
	t.Cleanup(func() {
		p.stop(syscall.SIGINT)
		console.Close()
		if t.Failed() {
			t.Logf("%s (pid %d) printed:\n%s", name, cmd.Process.Pid, tail(log.String(), 6000))
		}
		keep(t, fmt.Sprintf("%s-%d.log", name, cmd.Process.Pid), []byte(log.String()))
	})
	if _, err := console.ExpectString(upLine); err != nil {
		t.Fatalf("%s did not print %q: %v\n%s", name, upLine, err, log.String())
	}
	go drain.Console(console) // keep draining its output, however long it stays quiet
	return p
}

// stop signals the process and waits for it; a process that ignores the signal is killed.
func (p *proc) stop(sig syscall.Signal) {
	if p.cmd.ProcessState != nil {
		return
	}
	p.cmd.Process.Signal(sig)
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		p.cmd.Process.Kill()
		<-done
	}
}

// keep saves a file under $EJCLOUD_TEST_KEEP/<test>/, if set, for a post-mortem of a failed
// run (the test's temporary directories are removed when it ends).
func keep(t testing.TB, name string, data []byte) {
	dir := os.Getenv("EJCLOUD_TEST_KEEP")
	if dir == "" {
		return
	}
	dir = filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_"))
	if err := os.MkdirAll(dir, 0o755); err == nil {
		os.WriteFile(filepath.Join(dir, name), data, 0o644)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func freeAddr(t testing.TB) string { return freeport.For(t) }

// mesos is a running mesos-local binary with short timing knobs, recording every status update
// its agents take.
type mesos struct {
	*proc
	url     string
	work    string
	agents  []string
	updates string // the --record-updates file
}

var masterLine = regexp.MustCompile(`master (http://\S+) with \d+ agents \[([^\]]*)\]`)

func startMesos(t testing.TB, agents int) *mesos {
	t.Helper()
	return startMesosWith(t, agents, "cpus:4;mem:4096;disk:1000;ports:[31000-32000]")
}

// startMesosWith starts mesos-local with the given resources per agent; extra flags override the
// defaults here (the last of a repeated flag wins).
func startMesosWith(t testing.TB, agents int, resources string, extra ...string) *mesos {
	t.Helper()
	work := t.TempDir()
	updates := filepath.Join(t.TempDir(), "updates.jsonl")
	args := append([]string{"--addr", freeAddr(t), "--agents", fmt.Sprint(agents),
		"--agent-resources", resources, "--work-dir", work,
		"--allocation-interval", "50ms", "--heartbeat-interval", "1s", "--agent-ping-timeout", "100ms",
		"--max-agent-ping-timeouts", "3", "--status-update-retry", "200ms", "--status-update-retry-max", "2s",
		"--executor-registration-timeout", "20s", "--executor-shutdown-grace-period", "500ms",
		"--executor-reregistration-timeout", "3s", "--recovery-timeout", "20s", "--record-updates", updates}, extra...)
	p := start(t, "mesos-local", "work dir", args...)
	m := masterLine.FindStringSubmatch(p.log.String())
	if m == nil {
		t.Fatalf("mesos-local's first line names no master and agents:\n%s", p.log.String())
	}
	t.Cleanup(func() {
		b, _ := os.ReadFile(updates)
		keep(t, "updates.jsonl", b)
	})
	return &mesos{proc: p, url: m[1], work: work, agents: strings.Fields(m[2]), updates: updates}
}

// fault applies partition, heal, kill, restart or gone to an agent, over mesos-local's HTTP API.
func (m *mesos) fault(t *testing.T, agent, action string) {
	t.Helper()
	resp, err := http.Post(m.url+"/local/agents/"+agent+"/"+action, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s %s: %d %s", action, agent, resp.StatusCode, b)
	}
}

// frameworkFault applies partition or heal to the link between a framework's scheduler and the
// master, over mesos-local's HTTP API.
func (m *mesos) frameworkFault(t *testing.T, framework, action string) {
	t.Helper()
	resp, err := http.Post(m.url+"/local/frameworks/"+framework+"/"+action, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("%s framework %s: %d %s", action, framework, resp.StatusCode, b)
	}
}

// masterState is the part of mesos-local's /master/state the tests read.
type masterState struct {
	Frameworks []struct {
		ID        string `json:"id"`
		Connected bool   `json:"connected"`
		Tasks     []struct {
			ID      string `json:"id"`
			State   string `json:"state"`
			SlaveID string `json:"slave_id"`
		} `json:"tasks"`
		UnreachableTasks []struct {
			ID    string `json:"id"`
			State string `json:"state"`
		} `json:"unreachable_tasks"`
		Executors []struct {
			ID      string `json:"executor_id"`
			SlaveID string `json:"slave_id"`
		} `json:"executors"`
	} `json:"frameworks"`
}

func (m *mesos) state(t *testing.T) masterState {
	t.Helper()
	resp, err := http.Get(m.url + "/master/state")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st masterState
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	return st
}

// connected says whether the master has the framework connected: subscribed, its stream open.
func (m *mesos) connected(t *testing.T, framework string) bool {
	for _, f := range m.state(t).Frameworks {
		if f.ID == framework {
			return f.Connected
		}
	}
	return false
}

// taskStates maps the task ids of a job (active and unreachable) to their states.
func (m *mesos) taskStates(t *testing.T, job string) map[string]string {
	out := map[string]string{}
	for _, f := range m.state(t).Frameworks {
		for _, task := range f.Tasks {
			if strings.HasPrefix(task.ID, job+"@-@") {
				out[task.ID] = task.State
			}
		}
		for _, task := range f.UnreachableTasks {
			if strings.HasPrefix(task.ID, job+"@-@") {
				out[task.ID] = task.State
			}
		}
	}
	return out
}

// executorPIDs lists the ejcloud-executor processes running in this mesos-local's sandboxes
// (on one agent, if agent is not "").
func (m *mesos) executorPIDs(agent string) []int {
	work, _ := filepath.EvalSymlinks(m.work)
	var pids []int
	cwds, _ := filepath.Glob("/proc/[0-9]*/cwd")
	for _, c := range cwds {
		dir, err := os.Readlink(c)
		if err != nil || !strings.HasPrefix(dir, work+"/slaves/"+agent) {
			continue
		}
		var pid int
		fmt.Sscanf(strings.Split(c, "/")[2], "%d", &pid)
		if comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); strings.HasPrefix(string(comm), "ejcloud-executo") {
			pids = append(pids, pid)
		}
	}
	return pids
}

func (m *mesos) audit(t *testing.T, jobs ...audit.Job) audit.Report {
	t.Helper()
	ups, err := audit.ReadFile(m.updates)
	if err != nil {
		t.Fatal(err)
	}
	return audit.Check(jobs, ups)
}

// auditEffects audits the jobs from what their scripts recorded in w.effects().
func (w *world) auditEffects(t *testing.T, jobs ...audit.Job) audit.Report {
	t.Helper()
	recs, err := audit.ReadEffects(w.effects())
	if err != nil {
		t.Fatal(err)
	}
	ups, err := audit.ReadFile(w.mesos.updates)
	if err != nil {
		t.Fatal(err)
	}
	return audit.CheckEffects(jobs, recs, ups)
}

// scheduler is a running ejcloud-scheduler binary.
type scheduler struct {
	*proc
	addr string
}

func startScheduler(t testing.TB, zk statetest.Env, m *mesos, extra ...string) *scheduler {
	t.Helper()
	addr := freeAddr(t)
	args := append([]string{"--zk-servers", strings.Join(zk.Servers, ","), "--zk-namespace", zk.Namespace,
		"--mesos-url", m.url, "--http-addr", addr, "--hostname", "127.0.0.1", "--auth-root", creds,
		"--executor-binary", filepath.Join(bins, "ejcloud-executor"), "--zk-session-timeout", "2s"}, extra...)
	return &scheduler{proc: start(t, "ejcloud-scheduler", "scheduler started", args...), addr: addr}
}

// leads says the scheduler is the leader and subscribed to Mesos.
func (s *scheduler) leads() bool {
	resp, err := http.Get("http://" + s.addr + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == 200
}

// api sends one request to the scheduler with the root credentials (or the given ones) and
// returns the status and body; it does not follow redirects.
func (s *scheduler) api(t *testing.T, method, path, body string, auth ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+s.addr+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(body, "{") || strings.HasPrefix(body, `"`) {
		req.Header.Set("Content-Type", "application/json")
	}
	user, pass, _ := strings.Cut(creds, ":")
	if len(auth) == 2 {
		user, pass = auth[0], auth[1]
	}
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

var noRedirect = &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error {
	return http.ErrUseLastResponse
}}

// must sends a request that must answer want.
func (s *scheduler) must(t *testing.T, want int, method, path, body string) string {
	t.Helper()
	code, msg := s.api(t, method, path, body)
	if code != want {
		t.Fatalf("%s %s %s: %d %s; want %d", method, path, body, code, msg, want)
	}
	return msg
}

// leaderOf waits for one of the schedulers to lead and returns it.
func leaderOf(t *testing.T, ss ...*scheduler) *scheduler {
	t.Helper()
	var l *scheduler
	await.True(t, 60*time.Second, "a scheduler leads", func() bool {
		for _, s := range ss {
			if s.cmd.ProcessState == nil && s.leads() {
				l = s
				return true
			}
		}
		return false
	})
	return l
}

// world is one test's ZooKeeper namespace, mesos-local and a directory for the jobs' output.
type world struct {
	zk    statetest.Env
	mesos *mesos
	dir   string
}

func newWorld(t *testing.T, agents int) *world {
	return &world{zk: statetest.StartZooKeeper(t), mesos: startMesos(t, agents), dir: t.TempDir()}
}

// appJSON registers app "app", fetching the executor from a file (so that no scheduler has to
// stay up to serve it) or from url when given.
func (w *world) appJSON(url string) string {
	if url == "" {
		url = filepath.Join(bins, "ejcloud-executor")
	}
	return `{"appName":"app","appURL":"` + url + `","bootstrapScript":"./ejcloud-executor","cpuCount":0.1,"memoryMB":32}`
}

// jobJSON is a TRANSIENT SCRIPT job whose every run appends "item agent" to runs-<name>.txt
// and then runs then (a shell snippet; "" for none), recording its start and end in
// w.effects() for the side-effect audit.
func (w *world) jobJSON(name string, shards int, cron string, failover bool, then string) string {
	runs := filepath.Join(w.dir, "runs-"+name+".txt")
	script := `echo "$EJCLOUD_SHARDING_ITEM $(pwd | sed 's#.*/slaves/\([^/]*\)/.*#\1#')" >> ` + runs + `; ` +
		audit.RecordingScript(w.effects(), w.dir, then)
	b, _ := json.Marshal(map[string]any{"jobName": name, "appName": "app", "jobType": "SCRIPT", "jobExecutionType": "TRANSIENT",
		"cron": cron, "timeZone": "UTC", "shardingTotalCount": shards, "cpuCount": 0.1, "memoryMB": 16,
		"failover": failover, "scriptCommandLine": script})
	return string(b)
}

// effects is the log the jobs' scripts record their runs in (audit.RecordingScript).
func (w *world) effects() string { return filepath.Join(w.dir, "effects.log") }

// hold is a script snippet that waits until release(name) is called.
func (w *world) hold(name string) string {
	return `while [ ! -e ` + filepath.Join(w.dir, "release-"+name) + ` ]; do sleep 0.05; done`
}

func (w *world) release(name string) {
	os.WriteFile(filepath.Join(w.dir, "release-"+name), nil, 0o644)
}

// runs returns, per shard item, the agents its runs were on, in order.
func (w *world) runs(job string) map[string][]string {
	b, _ := os.ReadFile(filepath.Join(w.dir, "runs-"+job+".txt"))
	out := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if item, agent, ok := strings.Cut(line, " "); ok {
			out[item] = append(out[item], agent)
		}
	}
	return out
}

// tasks returns the job's entries in GET /api/job/tasks/{kind} (running, ready or failover).
func tasks(t *testing.T, s *scheduler, kind, job string) int {
	t.Helper()
	code, body := s.api(t, "GET", "/api/job/tasks/"+kind, "")
	if code != 200 {
		t.Fatalf("GET /api/job/tasks/%s: %d %s", kind, code, body)
	}
	var entries []map[string]any
	if err := json.Unmarshal([]byte(body), &entries); err != nil {
		t.Fatalf("GET /api/job/tasks/%s: %v in %s", kind, err, body)
	}
	n := 0
	for _, e := range entries {
		if jobNameOf(e) == job {
			n++
		}
	}
	return n
}

// jobNameOf finds the jobName of an entry of /api/job/tasks/*: at the top (ready), in metaInfo
// (running) or in taskInfo (failover).
func jobNameOf(e map[string]any) string {
	if n, ok := e["jobName"].(string); ok {
		return n
	}
	for _, k := range []string{"metaInfo", "taskInfo"} {
		if m, ok := e[k].(map[string]any); ok {
			if n, ok := m["jobName"].(string); ok {
				return n
			}
		}
	}
	return ""
}

// said waits up to within for p to have printed want: its output reaches p.log through a
// pseudo-terminal and a reader goroutine, behind what the test saw it do.
func (p *proc) said(t testing.TB, within time.Duration, want, what string) {
	t.Helper()
	await.True(t, within, what, func() bool { return strings.Contains(p.log.String(), want) })
}

// quiet waits until the job has nothing ready, running or waiting for failover.
func quiet(t *testing.T, s *scheduler, jobs ...string) {
	t.Helper()
	await.True(t, 60*time.Second, fmt.Sprintf("%v quiet", jobs), func() bool {
		for _, j := range jobs {
			for _, kind := range []string{"ready", "running", "failover"} {
				if tasks(t, s, kind, j) != 0 {
					return false
				}
			}
		}
		return true
	})
}

// stopFires moves a job's cron far into the future, so that the work in hand can finish.
func stopFires(t *testing.T, s *scheduler, jobJSON string) {
	t.Helper()
	var j map[string]any
	json.Unmarshal([]byte(jobJSON), &j)
	j["cron"] = "0 0 0 1 1 ? 2099"
	b, _ := json.Marshal(j)
	s.must(t, 204, "PUT", "/api/job/update", string(b))
}

// exited says the process is gone or a zombie nobody reaped yet.
func exited(p *proc) bool {
	if p.cmd.ProcessState != nil {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 < len(b) && b[i+2] == 'Z'
}
