package mesoslocal_test

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"

	"github.com/ejcloud/ejcloud/integration/mesoslocal"
	"github.com/ejcloud/ejcloud/integration/mesostest"
	"github.com/ejcloud/ejcloud/internal/await"
)

// alive reports whether a process exists and is not a zombie (a zombie is dead: it only waits
// to be reaped by its parent).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(f) > 0 && f[0] != "Z" && f[0] != "X"
}

// launchStray launches a task whose executor leaves a SIGTERM-ignoring child behind (data is
// a stray mode of the test executor) and returns the child's pid; the child is killed when the
// test ends whatever happens.
func launchStray(t *testing.T, s *sched, execMode, data string) int {
	t.Helper()
	o := s.Offers()[0]
	s.Launch(o, task("t1", o, testExecutor("e1", execMode), data))
	st := s.Update("t1", mesos.TASK_RUNNING)
	pid, err := strconv.Atoi(string(st.Data))
	if err != nil || pid <= 0 {
		t.Fatalf("RUNNING data %q: the executor could not start its stray child", st.Data)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	if !alive(pid) {
		t.Fatalf("the stray child %d is not running", pid)
	}
	return pid
}

func withContainment(mode string) func(*mesoslocal.Options) {
	return func(o *mesoslocal.Options) { o.Containment = mode }
}

// Every way a container ends kills every process of it, also a child its executor started in
// a process group of its own that ignores SIGTERM, as the Mesos containerizer does; in session
// mode, which works everywhere, unprivileged too.
func TestContainerEndKillsEveryProcessOfIt(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		fw   *mesos.FrameworkInfo
		data string
		end  func(t *testing.T, c *mesoslocal.Cluster, s *sched, stray int)
	}{
		{"executor exits", paInfo(), "stray-exit3", func(t *testing.T, c *mesoslocal.Cluster, s *sched, stray int) {
			s.MustCall(calls.Message(c.AgentIDs()[0], "e1", []byte("exit3")))
			s.Await("FAILURE", isType(scheduler.Event_FAILURE))
			// The executor's end is reported only once its container is destroyed.
			if alive(stray) {
				t.Fatalf("FAILURE reported while the executor's child %d lives", stray)
			}
		}},
		{"executor shut down", paInfo(), "stray", func(t *testing.T, c *mesoslocal.Cluster, s *sched, stray int) {
			s.MustCall(&scheduler.Call{Type: scheduler.Call_SHUTDOWN, Shutdown: &scheduler.Call_Shutdown{
				ExecutorID: mesos.ExecutorID{Value: "e1"}, AgentID: mesos.AgentID{Value: c.AgentIDs()[0]}}})
			s.Await("FAILURE", isType(scheduler.Event_FAILURE))
			if alive(stray) {
				t.Fatalf("FAILURE reported while the executor's child %d lives", stray)
			}
		}},
		{"agent marked gone", paInfo(), "stray", func(t *testing.T, c *mesoslocal.Cluster, s *sched, stray int) {
			if err := c.MarkAgentGone(c.AgentIDs()[0]); err != nil {
				t.Fatal(err)
			}
			await.True(t, wait, "the executor's child killed", func() bool { return !alive(stray) })
		}},
		{"agent restarted without recovery", withCheckpoint(paInfo(), false), "stray", func(t *testing.T, c *mesoslocal.Cluster, s *sched, stray int) {
			if err := c.RestartAgent(c.AgentIDs()[0]); err != nil {
				t.Fatal(err)
			}
			await.True(t, wait, "the executor's child killed", func() bool { return !alive(stray) })
		}},
		{"mesos-local closes", paInfo(), "stray", func(t *testing.T, c *mesoslocal.Cluster, s *sched, stray int) {
			c.Close()
			if alive(stray) {
				t.Fatalf("the executor's child %d outlived Close", stray)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, withContainment(mesoslocal.ContainSession))
			s := subscribe(t, c.URL(), codec, tc.fw)
			stray := launchStray(t, s, "basic", tc.data)
			tc.end(t, c, s, stray)
		})
	}
}

func withCheckpoint(info *mesos.FrameworkInfo, on bool) *mesos.FrameworkInfo {
	info.Checkpoint = &on
	return info
}

// Where the cgroup v2 hierarchy is writable, containers are cgroups too and also catch a
// process that left the executor's session; where it is not, cgroup containment refuses to
// start and auto falls back to sessions.
func TestCgroupContainerCatchesWhatLeftTheSession(t *testing.T) {
	t.Parallel()
	probe, err := mesoslocal.New(mesoslocal.Options{WorkDir: t.TempDir(), Containment: mesoslocal.ContainCgroup,
		Logger: mesostest.QuietLogger()})
	if err != nil {
		if !strings.Contains(err.Error(), "cgroup") {
			t.Fatalf("cgroup containment refused with %v; want the reason", err)
		}
		c := newCluster(t, withContainment(mesoslocal.ContainAuto))
		s := subscribe(t, c.URL(), codec, paInfo())
		stray := launchStray(t, s, "basic", "stray-exit3")
		s.MustCall(calls.Message(c.AgentIDs()[0], "e1", []byte("exit3")))
		s.Await("FAILURE", isType(scheduler.Event_FAILURE))
		if alive(stray) {
			t.Fatalf("auto containment without cgroups: the executor's child %d outlived it", stray)
		}
		return
	}
	probe.Close()
	c := newCluster(t, withContainment(mesoslocal.ContainCgroup))
	s := subscribe(t, c.URL(), codec, paInfo())
	stray := launchStray(t, s, "basic", "stray-setsid")
	if err := c.MarkAgentGone(c.AgentIDs()[0]); err != nil {
		t.Fatal(err)
	}
	await.True(t, wait, "the child that left the session killed", func() bool { return !alive(stray) })
}
