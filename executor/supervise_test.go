package executor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/integration/audit"
	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/taskdata"
	"github.com/ejcloud/ejcloud/taskend"
)

// scriptHostEnv makes this test binary a stand-in executor: it runs the script in the
// variable through a scriptRunner, in the directory named by scriptDirEnv, until it is killed.
// It is not started by any agent, and sits in a process group of its own that nothing kills:
// whatever dies with it dies by the executor's own mechanism.
const scriptHostEnv, scriptDirEnv = "EJCLOUD_TEST_SCRIPT_HOST", "EJCLOUD_TEST_SCRIPT_DIR"

func init() {
	if cmdline := os.Getenv(scriptHostEnv); cmdline != "" {
		os.Unsetenv(scriptHostEnv) // the script and its supervisor must not become hosts too
		r := &scriptRunner{cmdline: cmdline, dir: os.Getenv(scriptDirEnv), sc: taskdata.ShardingContext{TaskID: "host"}}
		err := r.run(context.Background(), graceOf(time.Second))
		fmt.Println("script ended:", err)
		os.Exit(0)
	}
}

// leftBehind is a script that starts, besides itself, a background child, a child that left
// the process group (setsid) and a double-forked orphan, writing every pid to dir, then waits.
const leftBehind = `sleep 30 & echo $! > child.pid
setsid sleep 30 & echo $! > escaped.pid
(sleep 30 & echo $! > orphan.pid)
echo $$ > shell.pid`

var leftBehindPIDs = []string{"shell.pid", "child.pid", "escaped.pid", "orphan.pid"}

// pids reads the named pid files of dir; it reports false until every one holds a pid.
func pids(dir string, names ...string) ([]int, bool) {
	var out []int
	for _, n := range names {
		b, _ := os.ReadFile(filepath.Join(dir, n))
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			return nil, false
		}
		out = append(out, pid)
	}
	return out, true
}

// awaitPIDs waits until every named pid file of dir holds a pid, and returns them.
func awaitPIDs(t *testing.T, dir, what string, names ...string) []int {
	t.Helper()
	var out []int
	await.True(t, 10*time.Second, what, func() bool {
		var ok bool
		out, ok = pids(dir, names...)
		return ok
	})
	return out
}

// running reports whether pid is a process that has not ended (a zombie has ended).
func running(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// inDir lists the running processes whose working directory is dir: the scripts run there,
// and so do their supervisors.
func inDir(t *testing.T, dir string) []int {
	t.Helper()
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []int
	cwds, _ := filepath.Glob("/proc/[0-9]*/cwd")
	for _, c := range cwds {
		if d, err := os.Readlink(c); err == nil && d == dir {
			if pid, err := strconv.Atoi(strings.Split(c, "/")[2]); err == nil && running(pid) {
				out = append(out, pid)
			}
		}
	}
	return out
}

// killLeftovers makes sure a failing test leaves no process behind.
func killLeftovers(t *testing.T, dir string) {
	t.Cleanup(func() {
		for _, pid := range inDir(t, dir) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
}

// SIGKILL of the executor — not an agent's kill of its group: the stand-in is alone in its
// group — ends the script, its child, the child that left the group and the orphan within 1 s.
func TestScriptProcessesDieWithTheExecutor(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	killLeftovers(t, dir)
	host := exec.Command("/proc/self/exe")
	host.Env = append(os.Environ(), scriptHostEnv+"="+leftBehind+"; wait; true", scriptDirEnv+"="+dir)
	host.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := host.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { host.Process.Kill(); host.Wait() })
	var ps []int
	await.True(t, 30*time.Second, "the script and its children started", func() bool {
		var ok bool
		ps, ok = pids(dir, leftBehindPIDs...)
		return ok
	})
	for i, pid := range ps {
		if !running(pid) {
			t.Fatalf("%s (%d) is not running before the executor is killed", leftBehindPIDs[i], pid)
		}
	}
	if err := host.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	host.Wait()
	killed := time.Now()
	await.True(t, time.Second, "every process of the script gone within 1 s of the executor's SIGKILL", func() bool {
		return len(inDir(t, dir)) == 0
	})
	t.Logf("gone %v after the executor's SIGKILL", time.Since(killed).Round(time.Millisecond))
	for i, pid := range ps {
		if running(pid) {
			t.Errorf("%s (%d) outlived the executor", leftBehindPIDs[i], pid)
		}
	}
}

// When the script ends, whatever it left running ends with it, before the task is reported.
func TestScriptEndKillsWhatItLeftBehind(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	killLeftovers(t, dir)
	r := &scriptRunner{cmdline: leftBehind + "; true", dir: dir}
	if err := r.run(context.Background(), graceOf(time.Second)); err != nil {
		t.Fatalf("the script: %v; want success", err)
	}
	ps, ok := pids(dir, leftBehindPIDs...)
	if !ok {
		t.Fatal("the script did not write its pids")
	}
	for i, pid := range ps {
		if running(pid) {
			t.Errorf("%s (%d) outlived the task", leftBehindPIDs[i], pid)
		}
	}
	if left := inDir(t, dir); len(left) > 0 {
		t.Errorf("processes %v still run in the script's directory", left)
	}
}

// A killed script's processes keep the grace period even when the shell, which waited on
// them, ends at SIGTERM at once (a non-interactive sh does): a child that cleans up on SIGTERM
// finishes its cleanup before the run ends, and one that ignores SIGTERM is SIGKILLed when the
// grace period runs out.
func TestAKilledScriptsProcessesKeepTheGracePeriod(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, child string
		cleaned     bool
	}{
		{"a child that cleans up", `trap "sleep 0.5; echo done > cleaned; exit 0" TERM`, true},
		{"a child that ignores SIGTERM", `trap "" TERM`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			killLeftovers(t, dir)
			script := `sh -c '` + tc.child + `; echo $$ > child.pid; while :; do sleep 0.1; done' & wait; true`
			r := &scriptRunner{cmdline: script, dir: dir, sc: taskdata.ShardingContext{TaskID: "t", JobName: "j"}}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ran := make(chan error, 1)
			go func() { ran <- r.run(ctx, graceOf(2*time.Second)) }()
			child := awaitPIDs(t, dir, "the child runs", "child.pid")
			cancel()
			if err := <-ran; !errors.Is(err, errKilled) {
				t.Fatalf("%v; want killed", err)
			}
			if _, err := os.Stat(filepath.Join(dir, "cleaned")); (err == nil) != tc.cleaned {
				t.Errorf("the child's cleanup file: %v; want it written: %v", err, tc.cleaned)
			}
			if running(child[0]) {
				t.Errorf("the child (%d) outlived the run", child[0])
			}
		})
	}
}

// How a script ended reaches the task through its supervisor.
func TestScriptOutcomeThroughTheSupervisor(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		script string
		kill   time.Duration // cancel the task this long after the start; 0: never
		want   string        // "" for success, "killed", else a job failure's cause
		within time.Duration
	}{
		{script: "true"},
		{script: "exit 3", want: "script exited with status 3"},
		{script: "kill -KILL $$", want: "script killed by signal killed"},
		{script: `save() { printf '%s' "$1" > ctx.json; grep -q '"jobName":"j"' ctx.json; }; save`},
		{script: "trap 'exit 0' TERM; sleep 30 & wait; true", kill: 300 * time.Millisecond, want: "killed", within: 2 * time.Second},
		{script: "trap '' TERM; sleep 30; true", kill: 300 * time.Millisecond, want: "killed", within: 3 * time.Second},
	} {
		t.Run(tc.script, func(t *testing.T) {
			dir := t.TempDir()
			killLeftovers(t, dir)
			r := &scriptRunner{cmdline: tc.script, dir: dir, sc: taskdata.ShardingContext{TaskID: "t", JobName: "j"}}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.kill > 0 {
				time.AfterFunc(tc.kill, cancel)
			}
			start := time.Now()
			err := r.run(ctx, graceOf(time.Second))
			took := time.Since(start)
			var jf *jobFailure
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("%v; want success", err)
			case tc.want == "killed" && !errors.Is(err, errKilled):
				t.Fatalf("%v; want killed", err)
			case tc.want != "" && tc.want != "killed" && (!errors.As(err, &jf) || jf.cause != tc.want):
				t.Fatalf("%v; want the job failure %q", err, tc.want)
			}
			if tc.within > 0 && took > tc.within {
				t.Fatalf("took %v; want at most %v", took, tc.within)
			}
			if left := inDir(t, dir); len(left) > 0 {
				t.Fatalf("processes %v still run after the task ended", left)
			}
		})
	}
}

// graceOf is a kill's grace that no later kill cuts.
type graceOf time.Duration

func (g graceOf) graceAndCut() (time.Duration, <-chan struct{}) { return time.Duration(g), nil }

// cutGrace is a kill's grace that the test cuts once the runner has read it.
type cutGrace struct {
	mu    sync.Mutex
	grace time.Duration
	cut   chan struct{}
	read  chan struct{} // closed at the first read
	once  sync.Once
}

func (c *cutGrace) graceAndCut() (time.Duration, <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.once.Do(func() { close(c.read) })
	return c.grace, c.cut
}

func (c *cutGrace) cutTo(g time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.grace = g
	close(c.cut)
	c.cut = make(chan struct{})
}

// A killed script ends when its grace runs out, whatever it left behind: a process that left
// the group (setsid) kept the supervisor waiting until it ended by itself, the task never
// reported, and a fenced task (grace 0, its lease lapsed) ran on beside its relaunch.
func TestAKilledScriptEndsWithWhatLeftItsGroup(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		shell string // what the shell does besides starting the escaped process
		grace time.Duration
	}{
		{"fenced: no grace", "sleep 30", 0},
		{"a shell that outlives the grace", "trap '' TERM; sleep 30", 500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			killLeftovers(t, dir)
			script := `setsid sh -c 'trap "" TERM; echo $$ > escaped.pid; while :; do sleep 0.1; done' & ` + tc.shell + "; true"
			r := &scriptRunner{cmdline: script, dir: dir, sc: taskdata.ShardingContext{TaskID: "t", JobName: "j"}}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			ran := make(chan error, 1)
			go func() { ran <- r.run(ctx, graceOf(tc.grace)) }()
			escaped := awaitPIDs(t, dir, "the escaped process runs", "escaped.pid")
			cancel()
			select {
			case err := <-ran:
				if !errors.Is(err, errKilled) {
					t.Fatalf("%v; want killed", err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the killed run did not end in 20 s")
			}
			if running(escaped[0]) {
				t.Errorf("the escaped process (%d) outlived the run", escaped[0])
			}
		})
	}
}

// A later kill with a shorter grace (a lease lapse, the agent's shutdown) cuts the grace of a
// kill under way: the first kill's grace was kept, and the agent's TASK_FAILED or the relaunch
// came first.
func TestALaterKillCutsTheGrace(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	killLeftovers(t, dir)
	r := &scriptRunner{cmdline: "trap '' TERM; echo $$ > shell.pid; sleep 120; true", dir: dir, sc: taskdata.ShardingContext{TaskID: "t", JobName: "j"}}
	k := &cutGrace{grace: 10 * time.Minute, cut: make(chan struct{}), read: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- r.run(ctx, k) }()
	awaitPIDs(t, dir, "the script runs", "shell.pid")
	cancel()
	select {
	case <-k.read: // the ten minutes are asked for
	case err := <-ran:
		t.Fatalf("the run ended (%v) before its kill's grace was read", err)
	}
	k.cutTo(0)
	select {
	case err := <-ran:
		if !errors.Is(err, errKilled) {
			t.Fatalf("%v; want killed", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the run was not ended by the kill with no grace")
	}
}

// A script is not run once its task is killed, and one the executor killed leaves no end
// record, however it exits: the record says a run ended on its own (taskend), and the
// scheduler would read a killed run that trapped SIGTERM and exited 0 as a success.
func TestAKilledScriptLeavesNoEndRecord(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name        string
		killedFirst bool
	}{
		{"killed while it runs", false},
		{"killed before it starts", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			killLeftovers(t, dir)
			if err := os.Mkdir(filepath.Join(dir, taskend.Dir), 0o755); err != nil {
				t.Fatal(err)
			}
			r := &scriptRunner{cmdline: "echo $$ > shell.pid; trap 'exit 0' TERM; sleep 30 & wait; true", dir: dir,
				sc: taskdata.ShardingContext{TaskID: "t", JobName: "j"}, endRecord: taskend.Path(dir, "t")}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.killedFirst {
				cancel()
			}
			ran := make(chan error, 1)
			go func() { ran <- r.run(ctx, graceOf(5*time.Second)) }()
			if !tc.killedFirst {
				awaitPIDs(t, dir, "the script runs", "shell.pid")
				cancel()
			}
			if err := <-ran; !errors.Is(err, errKilled) {
				t.Fatalf("%v; want killed", err)
			}
			if _, err := os.Stat(r.endRecord); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("end record of a killed run: %v; want none", err)
			}
			if _, err := os.Stat(filepath.Join(dir, "shell.pid")); (err == nil) == tc.killedFirst {
				t.Errorf("the run was started (its shell.pid: %v); want started: %v", err, !tc.killedFirst)
			}
		})
	}
}

// A script writes to the executor's own stdout and stderr, which the agent's container logger
// reads, not to the sandbox's files behind the logger's back.
func TestAScriptWritesToTheExecutorsOutput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	killLeftovers(t, dir)
	out, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	errs, err := os.Create(filepath.Join(t.TempDir(), "err"))
	if err != nil {
		t.Fatal(err)
	}
	defer errs.Close()
	r := &scriptRunner{cmdline: "echo to-stdout; echo to-stderr >&2; true", dir: dir, sc: taskdata.ShardingContext{TaskID: "t", JobName: "j"},
		stdout: out, stderr: errs}
	if err := r.run(context.Background(), graceOf(time.Second)); err != nil {
		t.Fatal(err)
	}
	for f, want := range map[*os.File]string{out: "to-stdout\n", errs: "to-stderr\n"} {
		if got, err := os.ReadFile(f.Name()); err != nil || string(got) != want {
			t.Errorf("%s holds %q (%v); want %q", f.Name(), got, err, want)
		}
	}
	for _, name := range []string{"stdout", "stderr"} {
		if _, err := os.Stat(filepath.Join(dir, name)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the sandbox's %s was opened by name (%v); the script must write through the executor's", name, err)
		}
	}
}

// A script does not see the agent's token for its executor: with it, it could call the agent
// as the executor and end its siblings' tasks. It sees its own shard's variables, whatever the
// executor was started with.
func TestAScriptDoesNotSeeTheExecutorsToken(t *testing.T) {
	t.Setenv("MESOS_EXECUTOR_AUTHENTICATION_TOKEN", "secret-token")
	t.Setenv("EJCLOUD_SHARDING_ITEM", "outer")
	t.Setenv("EJCLOUD_JOB_NAME", "outer")
	dir := t.TempDir()
	killLeftovers(t, dir)
	r := &scriptRunner{cmdline: "env > env.txt; echo \"$EJCLOUD_JOB_NAME $EJCLOUD_SHARDING_ITEM\" > seen.txt; true", dir: dir,
		sc: taskdata.ShardingContext{TaskID: "t", JobName: "j", ShardingItem: 1, ShardingTotalCount: 2}}
	if err := r.run(context.Background(), graceOf(time.Second)); err != nil {
		t.Fatal(err)
	}
	env, err := os.ReadFile(filepath.Join(dir, "env.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(env), "secret-token") || !strings.Contains(string(env), "EJCLOUD_JOB_NAME=j") {
		t.Fatalf("the script's environment holds the token, or not the job's variables:\n%s", env)
	}
	if seen, err := os.ReadFile(filepath.Join(dir, "seen.txt")); err != nil || string(seen) != "j 1\n" {
		t.Fatalf("the script saw job and item %q (%v); want \"j 1\"", seen, err)
	}
}

// BenchmarkScriptRun is what one shard costs the executor's side: the supervisor, the shell and
// the end of both. child-cpu-ms/op is the CPU its processes used, which grew with the processes
// on the host while each end read every process's stat in /proc.
//
// The cases put that cost beside its floor and its ceiling in the soak: "exec" is one fork and
// exec of /bin/true without a supervisor, what any process costs on this machine; "soak" is the
// soak's recording script (integration/audit.RecordingScript) with an empty body, the processes
// every soak run pays for before its own sleep. Together they bound the shard runs a second
// that the soak can carry on a given machine, whatever the scheduler does.
func BenchmarkScriptRun(b *testing.B) {
	b.Run("exec", func(b *testing.B) {
		benchChildCPU(b, func() error { return exec.Command("/bin/true").Run() })
	})
	for _, bc := range []struct {
		name string
		// script is the command line of a run in dir; runs says how many runs its side
		// effects show, so that the benchmark measures scripts that did their work.
		script func(dir string) string
		runs   func(dir string) (int, error)
	}{
		{"true", func(string) string { return "true" }, nil},
		{"soak",
			func(dir string) string {
				return audit.RecordingScript(filepath.Join(dir, "effects.log"), dir, "")
			},
			func(dir string) (int, error) {
				rs, err := audit.ReadEffects(filepath.Join(dir, "effects.log"))
				return len(rs) / 2, err // a start and an end a run
			}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			// As in production: the supervisor records the run's end, which the executor removes.
			dir := b.TempDir()
			if err := os.Mkdir(filepath.Join(dir, taskend.Dir), 0o755); err != nil {
				b.Fatal(err)
			}
			r := &scriptRunner{cmdline: bc.script(dir), dir: dir, sc: taskdata.ShardingContext{TaskID: "t", JobName: "j"}, endRecord: taskend.Path(dir, "t")}
			n := benchChildCPU(b, func() error {
				if err := r.run(context.Background(), graceOf(time.Second)); err != nil {
					return err
				}
				return os.Remove(r.endRecord)
			})
			if bc.runs != nil {
				if got, err := bc.runs(dir); err != nil || got != n {
					b.Fatalf("the scripts' side effects show %d runs (%v); want %d", got, err, n)
				}
			}
		})
	}
}

// benchChildCPU runs once per iteration and reports the CPU of the child processes it waited
// for, per iteration. It returns the iterations.
func benchChildCPU(b *testing.B, once func() error) int {
	var before, after syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &before)
	n := 0
	for b.Loop() {
		if err := once(); err != nil {
			b.Fatal(err)
		}
		n++
	}
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &after)
	cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
	b.ReportMetric(float64(cpu.Microseconds())/1000/float64(n), "child-cpu-ms/op")
	return n
}
