package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// executorStderr is the stderr file of the one executor that ran on agent.
func (m *mesos) executorStderr(t *testing.T, agent string) string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(m.work, "slaves", agent, "frameworks", "*", "executors", "*", "runs", "latest", "stderr"))
	if len(files) != 1 {
		t.Fatalf("executor stderr files on agent %s: %v; want one", agent, files)
	}
	return files[0]
}

func count(file, s string) int {
	b, _ := os.ReadFile(file)
	return strings.Count(string(b), s)
}

// Issue 12.2: an agent restarts while its executor runs shards, and the shards end while the
// agent is still recovering. Like Mesos, the recovering agent takes the executor's SUBSCRIBE
// but answers its UPDATEs 503 until recovery ends (executor_reregistration_timeout, here 8 s
// so that the shards surely end within it). The executor keeps retrying them: every update
// reaches the scheduler within 10 s of the recovery's end, and the job fires again on time.
// (Before, the executor went mute for good after the first refusal: the tasks stayed running
// in the scheduler and the job never fired again.)
func TestUpdatesRefusedDuringAgentRecoveryAreDelivered(t *testing.T) {
	t.Parallel()
	const recovery = 8 * time.Second
	w := &world{zk: statetest.StartZooKeeper(t), dir: t.TempDir(),
		mesos: startMesosWith(t, 1, "cpus:4;mem:4096;disk:1000;ports:[31000-32000]", "--executor-reregistration-timeout", recovery.String())}
	s := startScheduler(t, w.zk, w.mesos)
	leaderOf(t, s)
	s.must(t, 204, "POST", "/api/app", w.appJSON(""))
	const cronExpr = "*/2 * * * * ?"
	job := w.jobJSON("rec", 2, cronExpr, true, w.hold("rec"))
	audited := cronJob(t, "rec", 2, cronExpr)
	s.must(t, 204, "POST", "/api/job/register", job)
	await.True(t, 30*time.Second, "both shards of the first fire running", func() bool {
		r := w.runs("rec")
		return len(r["0"]) == 1 && len(r["1"]) == 1
	})
	agent := w.mesos.agents[0]
	stderr := w.mesos.executorStderr(t, agent)
	subscribed := count(stderr, "msg=subscribed ")
	reregistered := strings.Count(w.mesos.log.String(), "agent re-registered")

	w.mesos.fault(t, agent, "restart")
	restarted := time.Now()
	await.True(t, recovery/2, "the executor re-subscribed to the recovering agent", func() bool {
		return count(stderr, "msg=subscribed ") > subscribed
	})
	w.release("rec") // the held shards end now, during the agent's recovery
	await.True(t, recovery, "the recovering agent refused an update of the executor", func() bool {
		return count(stderr, "Agent has not finished recovery") > 0
	})
	await.True(t, recovery+10*time.Second, "the agent finished its recovery", func() bool {
		return strings.Count(w.mesos.log.String(), "agent re-registered") > reregistered
	})
	recovered := time.Now()
	t.Logf("recovery took %v", recovered.Sub(restarted).Round(time.Millisecond))
	await.True(t, 10*time.Second, "every update of the fire reached the scheduler within 10 s of the recovery", func() bool {
		return tasks(t, s, "running", "rec") == 0
	})
	delivered := time.Now()
	t.Logf("updates at the scheduler %v after the recovery", delivered.Sub(recovered).Round(time.Millisecond))
	// The fires missed while the shards ran left the job ready: it runs again at once, and then
	// on its cron.
	await.True(t, 2*2*time.Second+3*time.Second, "the job fired twice more", func() bool {
		r := w.runs("rec")
		return len(r["0"]) >= 3 && len(r["1"]) >= 3
	})
	stopFires(t, s, job)
	quiet(t, s, "rec")
	rep := mustAudit(t, w, audited)
	if rep.Relaunches != 0 {
		t.Fatalf("%d failover relaunches; an agent restart with a live executor must cause none", rep.Relaunches)
	}
}
