//go:build soak

package integration

import (
	"fmt"
	"math/rand"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/integration/audit"
	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// TestSoak is `make soak`: 200 jobs × 5 shards firing every 10 s (20 jobs in each second) for
// EJCLOUD_SOAK_DURATION (default 10m), with an executor or the leading scheduler SIGKILLed
// every EJCLOUD_SOAK_FAULT_EVERY (default 15s), two schedulers always running; then the fires
// stop, the work in hand finishes, and every fire of every job is audited from the status
// updates the agents took.
func TestSoak(t *testing.T) {
	duration := envDuration(t, "EJCLOUD_SOAK_DURATION", 10*time.Minute)
	faultEvery := envDuration(t, "EJCLOUD_SOAK_FAULT_EVERY", 15*time.Second)
	seed := time.Now().UnixNano()
	if s := os.Getenv("EJCLOUD_SOAK_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	rng := rand.New(rand.NewSource(seed))
	const jobs, shards, apps = 200, 5, 4
	t.Logf("soak: %d jobs × %d shards every 10 s, %v, a fault every %v, seed %d, %d cores", jobs, shards, duration, faultEvery, seed, runtime.NumCPU())

	w := &world{zk: statetest.StartZooKeeper(t), dir: t.TempDir()}
	w.mesos = startMesosWith(t, 4, "cpus:64;mem:65536;disk:1000;ports:[31000-32000]")
	ss := []*scheduler{startScheduler(t, w.zk, w.mesos), startScheduler(t, w.zk, w.mesos)}
	l := leaderOf(t, ss...)
	for a := 0; a < apps; a++ {
		l.must(t, 204, "POST", "/api/app", strings.Replace(w.appJSON(""), `"appName":"app"`, fmt.Sprintf(`"appName":"app%d"`, a), 1))
	}
	var audited []audit.Job
	var bodies []string
	for j := 0; j < jobs; j++ {
		name, expr := fmt.Sprintf("soak%03d", j), fmt.Sprintf("%d/10 * * * * ?", j%10)
		body := w.jobJSON(name, shards, expr, true, "sleep 1")
		body = strings.Replace(body, `"appName":"app"`, fmt.Sprintf(`"appName":"app%d"`, j%apps), 1)
		body = strings.Replace(body, `"cpuCount":0.1,"memoryMB":16`, `"cpuCount":0.05,"memoryMB":8`, 1)
		audited = append(audited, cronJob(t, name, shards, expr))
		l.must(t, 204, "POST", "/api/job/register", body)
		bodies = append(bodies, body)
	}

	started := time.Now()
	faults := map[string]int{}
	for time.Since(started) < duration {
		time.Sleep(faultEvery) // the fault rhythm of the soak, not a wait for a condition
		switch rng.Intn(3) {
		case 0: // the leader
			l := leaderOf(t, ss...)
			for i, s := range ss {
				if s == l {
					s.stop(syscall.SIGKILL)
					ss[i] = startScheduler(t, w.zk, w.mesos)
				}
			}
			faults["leader SIGKILL"]++
		default: // an executor
			pids := w.mesos.executorPIDs("")
			if len(pids) == 0 {
				continue
			}
			syscall.Kill(pids[rng.Intn(len(pids))], syscall.SIGKILL)
			faults["executor SIGKILL"]++
		}
		t.Logf("%v: faults %v", time.Since(started).Round(time.Second), faults)
	}
	ran := time.Since(started)

	l = leaderOf(t, ss...)
	for _, b := range bodies {
		stopFires(t, l, b)
	}
	names := make([]string, 0, jobs)
	for _, j := range audited {
		names = append(names, j.Name)
	}
	await.True(t, 5*time.Minute, "the work in hand is done", func() bool {
		l = leaderOf(t, ss...)
		for _, kind := range []string{"ready", "running", "failover"} {
			code, body := l.api(t, "GET", "/api/job/tasks/"+kind, "")
			if code != 200 || strings.TrimSpace(body) != "[]" {
				return false
			}
		}
		return true
	})
	rep := w.mesos.audit(t, audited...)
	lines := 0
	for _, n := range names {
		for _, as := range w.runs(n) {
			lines += len(as)
		}
	}
	t.Logf("soak report: %v of load with %v; %s; the scripts started %d times (killed runs included)",
		ran.Round(time.Second), faults, strings.SplitN(rep.String(), "\n", 2)[0], lines)
	if !rep.OK() {
		t.Fatal(rep)
	}
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return d
}
