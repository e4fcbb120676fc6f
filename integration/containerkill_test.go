package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/internal/await"
)

// procInfo is what /proc says of a process: whether it is alive (not a zombie), its session and
// its working directory.
func procInfo(pid int) (alive bool, session int, cwd string) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false, 0, ""
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(f) < 4 || f[0] == "Z" || f[0] == "X" {
		return false, 0, ""
	}
	session, _ = strconv.Atoi(f[3])
	cwd, _ = os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	return true, session, cwd
}

// containerProcs lists the live processes of an agent's executor containers: those working in
// its sandboxes and those in the sessions of the given executors (a process that changed its
// directory is still in its executor's session).
func (m *mesos) containerProcs(agent string, executors []int) []int {
	work, _ := filepath.EvalSymlinks(m.work)
	sandboxes := work + "/slaves/" + agent + "/"
	sessions := map[int]bool{}
	for _, pid := range executors {
		sessions[pid] = true
	}
	var out []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		pid, _ := strconv.Atoi(filepath.Base(d))
		if ok, sid, cwd := procInfo(pid); ok && (sessions[sid] || strings.HasPrefix(cwd, sandboxes)) {
			out = append(out, pid)
		}
	}
	return out
}

// leaveBehind is a shard script (for jobJSON's then) that holds until released and then records
// "item fg agent" in done-<name>.txt; before holding it starts a child in the background that
// ignores SIGTERM and records "item bg agent" once released: a script its executor may not
// clean up, as on real hosts.
func (w *world) leaveBehind(name string) string {
	done := filepath.Join(w.dir, "done-"+name+".txt")
	agent := `$(pwd | sed 's#.*/slaves/\([^/]*\)/.*#\1#')`
	return `(trap "" TERM; ` + w.hold(name) + `; echo "$EJCLOUD_SHARDING_ITEM bg ` + agent + `" >> ` + done + `) & ` +
		w.hold(name) + `; echo "$EJCLOUD_SHARDING_ITEM fg ` + agent + `" >> ` + done + `; wait`
}

// completed is what the shard scripts of a job recorded once released: "item fg|bg agent"
// lines, sorted.
func (w *world) completed(name string) []string {
	b, _ := os.ReadFile(filepath.Join(w.dir, "done-"+name+".txt"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	sort.Strings(lines)
	return lines
}

// lostAgentKillsItsContainers runs one held shard with failover, loses its agent by fault (and
// then, if given, waits for what must follow), and checks that nothing of the agent's
// containers survives and that the shard completed once: its relaunch on the other agent.
func lostAgentKillsItsContainers(t *testing.T, w *world, s *scheduler, fault string, then func(agent string)) {
	t.Helper()
	const job = "lost"
	s.must(t, 204, "POST", "/api/job/register", w.jobJSON(job, 1, "", true, w.leaveBehind(job)))
	s.must(t, 204, "POST", "/api/job/trigger", job)
	await.True(t, 30*time.Second, "the shard running", func() bool { return len(w.runs(job)["0"]) == 1 })
	agent := w.runs(job)["0"][0]
	executors := w.mesos.executorPIDs(agent)
	await.True(t, 10*time.Second, "the script and its background child started", func() bool {
		return len(w.mesos.containerProcs(agent, executors)) >= 3 // executor, script, its child
	})
	before := w.mesos.containerProcs(agent, executors)
	w.mesos.fault(t, agent, fault)
	if then != nil {
		then(agent)
	}
	await.True(t, 30*time.Second, "the shard relaunched on the other agent", func() bool { return len(w.runs(job)["0"]) == 2 })
	if on := w.runs(job)["0"][1]; on == agent {
		t.Fatalf("the shard was relaunched on the lost agent %s", agent)
	}
	await.True(t, 30*time.Second, "nothing of the lost agent's containers alive", func() bool {
		return len(w.mesos.containerProcs(agent, executors)) == 0
	})
	for _, pid := range before {
		if ok, _, _ := procInfo(pid); ok {
			t.Fatalf("process %d of the lost agent's containers is alive", pid)
		}
	}
	w.release(job)
	quiet(t, s, job)
	relaunch := w.runs(job)["0"][1]
	await.True(t, 10*time.Second, "the relaunch completed", func() bool { return len(w.completed(job)) == 2 })
	if done, want := w.completed(job), []string{"0 bg " + relaunch, "0 fg " + relaunch}; !slices.Equal(done, want) {
		t.Fatalf("the shard's scripts completed %q; want only its relaunch's, %q", done, want)
	}
	// Not the audit: it sees the updates agents take, and a lost agent takes none for its task.
}

// An agent marked gone takes every process of its executors' containers with it — the script
// its executor ran in a process group of its own and the script's child that ignores SIGTERM
// too — so the shard completes once, on the agent it was relaunched on.
func TestGoneAgentKillsItsContainers(t *testing.T) {
	t.Parallel()
	w, s := startWorld(t, 2)
	lostAgentKillsItsContainers(t, w, s, "gone", nil)
}

// A killed agent leaves its executors running (they wait for it to come back); when the
// operator then marks the dead agent gone, every process of its containers is killed, also
// those its executors' scripts left in process groups of their own: the shard completes only
// where it was relaunched.
func TestKilledAgentMarkedGoneKillsItsContainers(t *testing.T) {
	t.Parallel()
	w, s := startWorld(t, 2, "--unreachable-timeout", "1h")
	lostAgentKillsItsContainers(t, w, s, "kill", func(agent string) {
		if n := len(w.mesos.executorPIDs(agent)); n != 1 {
			t.Fatalf("%d executors on the killed agent; want its one executor still running", n)
		}
		w.mesos.fault(t, agent, "gone")
	})
}
