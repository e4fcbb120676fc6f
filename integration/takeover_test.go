package integration

import (
	"syscall"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/internal/await"
)

// A standby that has waited longer than the Mesos start-up limit takes over like a new
// instance: the limit counts from its election, not from its process start.
func TestOldStandbyTakesOver(t *testing.T) {
	t.Parallel()
	const limit = 2 * time.Second
	w := newWorld(t, 1)
	flags := []string{"--mesos-startup-timeout", limit.String()}
	first := startScheduler(t, w.zk, w.mesos, flags...)
	leaderOf(t, first)
	standby := startScheduler(t, w.zk, w.mesos, flags...)
	standbySince := time.Now()
	first.must(t, 204, "POST", "/api/app", w.appJSON(""))
	first.must(t, 204, "POST", "/api/job/register", w.jobJSON("old", 1, "*/1 * * * * ?", true, "true"))
	await.True(t, 30*time.Second, "the first leader runs the job", func() bool { return len(w.runs("old")["0"]) > 0 })
	// Let the standby grow older than twice the limit: the age is the condition under test.
	if wait := time.Until(standbySince.Add(2*limit + time.Second)); wait > 0 {
		time.Sleep(wait)
	}

	first.stop(syscall.SIGKILL)
	if l := leaderOf(t, standby); l != standby {
		t.Fatal("the standby does not lead")
	}
	ran := len(w.runs("old")["0"])
	await.True(t, 30*time.Second, "the old standby runs the job's fires", func() bool { return len(w.runs("old")["0"]) >= ran+2 })
	// Still leading past its own start-up limit: it did not exit after taking over.
	holdsFor(t, 2*limit, "the old standby keeps leading", func() bool { return standby.cmd.ProcessState == nil && standby.leads() })
}
