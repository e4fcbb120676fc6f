package executor_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"

	"github.com/ejcloud/ejcloud/integration/mesostest"
	"github.com/ejcloud/ejcloud/internal/await"
)

// An executor built with the SDK (executor.Main) runs scripts under the same supervisor as the
// stock one: a script's background child ends with the task, and with the executor.
func TestScriptsAreSupervisedInAnSDKExecutor(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o := e.offer()
	execID := "sdk@-@" + o.AgentID.Value
	exec := executorInfo(sdkExecutor, execID, 0)
	ends := shard(o, exec, scriptJob("ends", `sleep 30 & echo $! > ends-child.pid; true`), 0, "")
	holds := shard(o, exec, scriptJob("holds", `sleep 30 & echo $! > holds-child.pid; echo $$ > holds-shell.pid; wait; true`), 0, "")
	e.s.Launch(o, ends, holds)
	if st := e.s.Terminal(ends.TaskID.Value); *st.State != mesos.TASK_FINISHED {
		t.Fatalf("%v; want FINISHED", st.String())
	}
	dir := sandboxDir(t, e.c, execID)
	if pid := readPID(t, filepath.Join(dir, "ends-child.pid")); alive(pid) {
		syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("the background child %d outlived its finished task", pid)
	}
	var pids []int
	await.True(t, mesostest.Wait, "the holding script started", func() bool {
		pids = pids[:0]
		for _, f := range []string{"holds-child.pid", "holds-shell.pid"} {
			if b, err := os.ReadFile(filepath.Join(dir, f)); err == nil && strings.HasSuffix(string(b), "\n") {
				pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
				pids = append(pids, pid)
			}
		}
		return len(pids) == 2
	})
	executorPID := 0
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	cwds, _ := filepath.Glob("/proc/[0-9]*/cwd")
	for _, c := range cwds {
		if d, _ := os.Readlink(c); d == real {
			pid, _ := strconv.Atoi(strings.Split(c, "/")[2])
			if comm, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/comm"); strings.TrimSpace(string(comm)) == "sdk-executor" {
				executorPID = pid
			}
		}
	}
	if executorPID == 0 {
		t.Fatal("no sdk-executor process in the sandbox")
	}
	syscall.Kill(executorPID, syscall.SIGKILL)
	await.True(t, time.Second, "the script and its child gone within 1 s of the SDK executor's SIGKILL", func() bool {
		return !alive(pids[0]) && !alive(pids[1])
	})
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	pid, err := strconv.Atoi(strings.TrimSpace(readFile(t, path)))
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return pid
}

// Every shard re-executes its executor as the script's supervisor, so what the executor's
// packages initialize before the supervisor takes over is paid at every run. The supervisor's
// package must come before the Mesos API's (internal/supervise's package comment says how),
// in the stock executor and in one built with the SDK.
func TestTheSupervisorStartsBeforeTheExecutorsHeavyPackages(t *testing.T) {
	t.Parallel()
	const sup, heavy = "github.com/ejcloud/ejcloud/executor/internal/supervise", "github.com/mesos/mesos-go/api/v1/lib"
	for _, bin := range []string{stockExecutor, sdkExecutor} {
		cmd := exec.Command(bin, "--version")
		cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s --version: %v\n%s", bin, err, out)
		}
		at := map[string]int{}
		for i, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "init" {
				at[f[1]] = i + 1
			}
		}
		if at[sup] == 0 || at[heavy] == 0 || at[sup] > at[heavy] {
			t.Errorf("%s initializes %s at line %d of its init trace and %s at line %d; want the supervisor first:\n%s",
				filepath.Base(bin), sup, at[sup], heavy, at[heavy], out)
		}
	}
}
