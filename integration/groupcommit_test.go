package integration

import (
	"syscall"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/integration/audit"
	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// The leader dies with status updates it received but could not write (its ZooKeeper
// connection is cut, so every group commit fails and nothing is acknowledged). Mesos keeps
// re-sending them; the new leader records each once: no shard is lost, none relaunched.
func TestLeaderDiesWithUpdatesNotYetWritten(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 1)
	proxy := statetest.NewProxy(t, w.zk.Servers[0])
	first := startScheduler(t, statetest.Env{Servers: []string{proxy.Addr}, Namespace: w.zk.Namespace}, w.mesos)
	leaderOf(t, first)
	standby := startScheduler(t, w.zk, w.mesos)
	first.must(t, 204, "POST", "/api/app", w.appJSON(""))
	first.must(t, 204, "POST", "/api/job/register", w.jobJSON("held", 3, neverCron, true, w.hold("held")))
	first.must(t, 204, "POST", "/api/job/trigger", "held")
	await.True(t, 30*time.Second, "three shards running", func() bool { return tasks(t, first, "running", "held") == 3 && len(w.runs("held")) == 3 })

	proxy.Cut() // from here the leader can read its model but write nothing
	w.release("held")
	await.True(t, 30*time.Second, "the master has every shard's TASK_FINISHED", func() bool {
		states := w.mesos.taskStates(t, "held")
		n := 0
		for _, s := range states {
			if s == "TASK_FINISHED" {
				n++
			}
		}
		return n == 3
	})
	// The scenario under test: the leader received them, and could not write them.
	first.said(t, 30*time.Second, "not recorded; not acknowledging it", "the leader failed to record the updates")
	first.stop(syscall.SIGKILL)

	if l := leaderOf(t, standby); l != standby {
		t.Fatal("the standby does not lead")
	}
	quiet(t, standby, "held")
	if rep := mustAudit(t, w, audit.Job{Name: "held", Shards: 3}); rep.Relaunches != 0 {
		t.Fatalf("%d relaunches; the shards had all finished", rep.Relaunches)
	}
}
