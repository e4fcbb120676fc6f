package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/integration/audit"
	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// startMaster starts a mesos-local that contends for leadership under the zk:// URL masters,
// as a Mesos master started with --zk does.
func startMaster(t *testing.T, masters string) *mesos {
	t.Helper()
	return startMesosWith(t, 1, "cpus:4;mem:4096;disk:1000;ports:[31000-32000]", "--zk", masters, "--zk-session-timeout", "2s")
}

// leading says the master has printed that it leads.
func (m *mesos) leading() bool { return strings.Contains(m.log.String(), "elected, leading master") }

// frameworkAt returns whether the master has the framework, and whether it is connected.
func frameworkAt(t *testing.T, m *mesos, id string) (known, connected bool) {
	t.Helper()
	resp, err := http.Get(m.url + "/master/state")
	if err != nil {
		return false, false
	}
	defer resp.Body.Close()
	var st struct {
		Frameworks []struct {
			ID        string `json:"id"`
			Connected bool   `json:"connected"`
		} `json:"frameworks"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	for _, f := range st.Frameworks {
		if f.ID == id {
			return true, f.Connected
		}
	}
	return false, false
}

// The scheduler finds its master through ZooKeeper (--mesos-url zk://…) as frameworks find real
// Mesos masters, and runs a job there. While that master leads, a second one answers the
// scheduler API with a redirect to it. When the leader is killed with shards running, the
// second takes over in ZooKeeper; the scheduler re-subscribes there within 5 s with its
// FrameworkID; the shards the dead master's agent was running (its agent died with it) come
// back through reconciliation and the failover queue, and every shard ran exactly once, by
// what the scripts recorded. (Issue 15, master detection.)
func TestTheMasterIsFoundInZooKeeperAndFollowedToTheNext(t *testing.T) {
	t.Parallel()
	zk := statetest.StartZooKeeper(t)
	masters := "zk://" + strings.Join(zk.Servers, ",") + "/" + zk.Namespace + "-mesos"
	first := startMaster(t, masters)
	await.True(t, 30*time.Second, "the first master leads", first.leading)
	second := startMaster(t, masters)
	w := &world{zk: zk, mesos: first, dir: t.TempDir()}

	// A non-leading master redirects the scheduler API to the leader (MESOS.md §1.2, row 1).
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	await.True(t, 30*time.Second, "the second master redirects to the first", func() bool {
		resp, err := noRedirect.Post(second.url+"/api/v1/scheduler", "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusTemporaryRedirect &&
			resp.Header.Get("Location") == "//"+strings.TrimPrefix(first.url, "http://")+"/api/v1/scheduler"
	})
	if second.leading() {
		t.Fatal("the second master leads beside the first")
	}

	s := startScheduler(t, zk, first, "--mesos-url", masters)
	leaderOf(t, s)
	s.must(t, 204, "POST", "/api/app", w.appJSON(""))
	s.must(t, 204, "POST", "/api/job/register", w.jobJSON("detected", 2, "", false, ""))
	w.triggerAndAwait(t, s, "detected", 2, 1)
	quiet(t, s, "detected")
	var frameworkID string
	for _, f := range first.state(t).Frameworks {
		frameworkID = f.ID
	}
	if frameworkID == "" {
		t.Fatal("the first master has no framework")
	}

	// Shards running when their master dies.
	w.triggerHeld(t, s, "held", 2, true)
	await.True(t, 30*time.Second, "both shards run at the first master, their start recorded", func() bool {
		records, err := audit.ReadEffects(w.effects())
		if err != nil {
			return false
		}
		started := 0
		for _, r := range records {
			if r.Kind == "start" && strings.HasPrefix(r.TaskID, "held@-@") {
				started++
			}
		}
		return started == 2
	})
	killed := time.Now()
	first.stop(syscall.SIGKILL)

	// The dead master leads in ZooKeeper until its session expires; then the second leads.
	await.True(t, 30*time.Second, "the second master leads", second.leading)
	led := time.Now()
	await.True(t, 5*time.Second, "the scheduler re-subscribed at the new master, with its FrameworkID", func() bool {
		_, connected := frameworkAt(t, second, frameworkID)
		return connected
	})
	t.Logf("re-subscribed %v after the second master was seen to lead, %v after the first was killed",
		time.Since(led).Round(time.Millisecond), time.Since(killed).Round(time.Millisecond))

	await.True(t, 60*time.Second, "the held shards relaunched at the new master", func() bool {
		r := w.runs("held")
		return len(r["0"]) == 2 && len(r["1"]) == 2
	})
	w.release("held")
	w.triggerAndAwait(t, s, "detected", 2, 2) // at the new master
	quiet(t, s, "detected", "held")

	// Exactly once, from what the scripts recorded, and from both masters' status updates for
	// the job that ran while its master lived: the held shards' first tasks died with their
	// master and its agent, which no status update can tell (the new master answers TASK_UNKNOWN
	// for them, which is not an end), but their scripts show it.
	var updates []audit.Update
	for _, m := range []*mesos{first, second} {
		ups, err := audit.ReadFile(m.updates)
		if err != nil {
			t.Fatal(err)
		}
		updates = append(updates, ups...)
	}
	records, err := audit.ReadEffects(w.effects())
	if err != nil {
		t.Fatal(err)
	}
	jobs := []audit.Job{{Name: "detected", Shards: 2}, {Name: "held", Shards: 2}}
	rep, eff := audit.Check(jobs[:1], updates), audit.CheckEffects(jobs, records, updates)
	t.Log(rep)
	t.Log(eff)
	if !rep.OK() || !eff.OK() {
		t.Fatal("the audit found duplicate, lost or overlapping shard runs")
	}
	if eff.Partial != 2 || eff.Relaunches != 2 {
		t.Fatalf("want the 2 held shards killed with their master and relaunched once each; %s", fmt.Sprint(eff))
	}
}

// A leading master that stops answering without dying (SIGSTOP: a hung host) loses its
// ZooKeeper session and another leads. The scheduler leaves it as soon as ZooKeeper shows the
// new leader — not when its heartbeats are missed, which at Mesos' 15 s interval would take
// 75 s — and re-subscribes at the new one within 5 s. The old master, resumed, finds its
// session expired and exits, as a Mesos master does. (Issue 15, master detection.)
func TestTheSchedulerLeavesAMasterThatNoLongerLeads(t *testing.T) {
	t.Parallel()
	zk := statetest.StartZooKeeper(t)
	masters := "zk://" + strings.Join(zk.Servers, ",") + "/" + zk.Namespace + "-mesos"
	first := startMesosWith(t, 1, "cpus:4;mem:4096;disk:1000;ports:[31000-32000]",
		"--zk", masters, "--zk-session-timeout", "2s", "--heartbeat-interval", "15s")
	await.True(t, 30*time.Second, "the first master leads", first.leading)
	second := startMaster(t, masters)
	w := &world{zk: zk, mesos: second, dir: t.TempDir()}
	s := startScheduler(t, zk, first, "--mesos-url", masters)
	leaderOf(t, s)
	var frameworkID string
	for _, f := range first.state(t).Frameworks {
		frameworkID = f.ID
	}

	first.cmd.Process.Signal(syscall.SIGSTOP)
	await.True(t, 30*time.Second, "the second master leads", second.leading)
	await.True(t, 5*time.Second, "the scheduler re-subscribed at the new master, with its FrameworkID", func() bool {
		_, connected := frameworkAt(t, second, frameworkID)
		return connected
	})
	first.cmd.Process.Signal(syscall.SIGCONT)
	await.True(t, 30*time.Second, "the old master exits, its session expired", func() bool { return exited(first.proc) })
	// Its last words may still be in the console's pipe when it has exited: wait for the drain.
	first.said(t, 5*time.Second, "lost the ZooKeeper session", "the old master says why it exits (lost the ZooKeeper session)")

	s.must(t, 204, "POST", "/api/app", w.appJSON(""))
	s.must(t, 204, "POST", "/api/job/register", w.jobJSON("moved", 1, "", false, ""))
	w.triggerAndAwait(t, s, "moved", 1, 1)
	if r := w.runs("moved")["0"]; !strings.HasPrefix(r[0], second.agents[0]) {
		t.Fatalf("the job ran on agent %s, not on the new master's %s", r[0], second.agents[0])
	}
}
