package scheduler

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/integration/audit"
	"github.com/ejcloud/ejcloud/integration/mesoslocal"
	"github.com/ejcloud/ejcloud/integration/mesostest"
	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/internal/gobuild"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// executorBuild builds the real ejcloud-executor once per test binary, for tests side by side.
var executorBuild = sync.OnceValues(func() (string, error) {
	bin := filepath.Join(os.TempDir(), "ejcloud-executor-scheduler-test")
	return bin, gobuild.Executor(bin, "../executor/cmd/ejcloud-executor")
})

func buildExecutor(t testing.TB) string {
	t.Helper()
	bin, err := executorBuild()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// system is ZooKeeper, mesos-local and one scheduler, all real.
type system struct {
	t     testing.TB
	env   statetest.Env
	mesos *mesoslocal.Cluster
	sched *running
	store *state.Store
	dir   string
	// updates holds every status update the agents took, for audits.
	updates *audit.Recorder
}

func newSystem(t testing.TB, agents int, change ...func(*Config)) *system {
	return newSystemWith(t, agents, hooks{}, change...)
}

func newSystemWith(t testing.TB, agents int, h hooks, change ...func(*Config)) *system {
	return newSystemOn(t, agents, h, nil, change...)
}

// newSystemOn is newSystemWith on a mesos-local whose options mesos, if set, changes.
func newSystemOn(t testing.TB, agents int, h hooks, mesos func(*mesoslocal.Options), change ...func(*Config)) *system {
	env := statetest.StartZooKeeper(t)
	rec := audit.NewRecorder(nil)
	c := mesostest.NewCluster(t, func(o *mesoslocal.Options) {
		o.Agents, o.OnStatusUpdate = agents, rec.Observe
		if mesos != nil {
			mesos(o)
		}
	})
	cfg := testConfig(t, env)
	cfg.MesosURL = c.URL()
	cfg.ExecutorBinary = buildExecutor(t)
	for _, ch := range change {
		ch(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	store, err := state.Connect(ctx, state.Config{Servers: env.Servers, Namespace: env.Namespace, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	s := &system{t: t, env: env, mesos: c, store: store, dir: t.TempDir(), updates: rec}
	s.sched = startWith(t, cfg, h)
	t.Cleanup(func() {
		if t.Failed() { // where every goroutine stood when the test gave up
			buf := make([]byte, 8<<20)
			t.Logf("goroutines:\n%s", buf[:runtime.Stack(buf, true)])
		}
	})
	await.True(t, 30*time.Second, "scheduler leads and is subscribed to Mesos", func() bool {
		resp, _ := get(t, cfg.HTTPAddr, "/readyz")
		return resp != nil && resp.StatusCode == 200
	})
	app := config.DefaultApp()
	app.AppName, app.AppURL, app.BootstrapScript = "app", "http://"+cfg.HTTPAddr+"/executor/ejcloud-executor", "./ejcloud-executor"
	app.CPUCount, app.MemoryMB = 0.1, 32
	if err := store.CreateApp(context.Background(), app); err != nil {
		t.Fatal(err)
	}
	// Written behind the leader's back (as by an operator's tool): its model learns of it by
	// a watch, within moments — wait for that, as an operator would.
	await.True(t, 5*time.Second, "the leader's model has the app", func() bool {
		ld, err := s.sched.inst.leaderState()
		if err != nil {
			return false
		}
		_, err = ld.store.App(context.Background(), "app")
		return err == nil
	})
	return s
}

// scriptJob is a SCRIPT job whose every run appends "item agent-id" to runs-<job>.txt.
func (s *system) scriptJob(name string, shards int, cron string) config.Job {
	log := filepath.Join(s.dir, "runs-"+name+".txt")
	return config.Job{JobName: name, AppName: "app", JobType: config.Script, JobExecutionType: config.Transient,
		Cron: cron, TimeZone: "UTC", ShardingTotalCount: shards, CPUCount: 0.1, MemoryMB: 16,
		ScriptCommandLine: `echo "$EJCLOUD_SHARDING_ITEM $(pwd | sed 's#.*/slaves/\([^/]*\)/.*#\1#')" >> ` + log + `; true`,
		Placement:         config.Spread, JobShardingStrategyType: config.AvgAllocation, JobProperties: map[string]string{}}
}

func (s *system) register(j config.Job) {
	s.t.Helper()
	if err := s.store.CreateJob(context.Background(), j); err != nil {
		s.t.Fatal(err)
	}
	s.sched.inst.JobChanged(context.Background(), j.JobName) // as the API does after a registration
}

// runs returns, per shard item, the agents its runs were on.
func (s *system) runs(job string) map[string][]string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "runs-"+job+".txt"))
	out := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if item, agent, ok := strings.Cut(line, " "); ok {
			out[item] = append(out[item], agent)
		}
	}
	return out
}

func agentsOfRuns(r map[string][]string) []string {
	seen := map[string]bool{}
	for _, as := range r {
		for _, a := range as {
			seen[a] = true
		}
	}
	var out []string
	for a := range seen {
		out = append(out, a)
	}
	sort.Strings(out)
	return out
}

// A TRANSIENT SCRIPT job with 4 shards and cron every 2 s runs each shard on each fire; SPREAD
// uses both agents, BINPACK one.
func TestScriptJobRunsEveryShardOnEveryFire(t *testing.T) {
	t.Parallel()
	s := newSystem(t, 2)
	spread := s.scriptJob("spread", 4, "*/2 * * * * ?")
	binpacked := s.scriptJob("binpacked", 4, "*/2 * * * * ?")
	binpacked.Placement = config.Binpack
	// One job first: two jobs firing at the same instant may each see a different set of
	// offers (Mesos re-offers an agent's freed resources before the other agent's filter
	// expires), and SPREAD can only spread over the agents offered in its cycle.
	s.register(spread)
	await.True(t, 30*time.Second, "spread ran", func() bool { return len(s.runs("spread")) == 4 })
	s.register(binpacked)
	for _, job := range []string{"spread", "binpacked"} {
		await.True(t, 30*time.Second, job+": every shard ran on two fires", func() bool {
			r := s.runs(job)
			for i := 0; i < 4; i++ {
				if len(r[itoa(i)]) < 2 {
					return false
				}
			}
			return true
		})
	}
	if got := agentsOfRuns(s.runs("spread")); len(got) != 2 {
		t.Fatalf("SPREAD shards ran on agents %v; want both", got)
	}
	// The runs of one fire are consecutive lines (fires are 2 s apart): each fire's four shards
	// must share one agent.
	b, _ := os.ReadFile(filepath.Join(s.dir, "runs-binpacked.txt"))
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	for f := 0; f+4 <= len(lines); f += 4 {
		agents := map[string]bool{}
		for _, l := range lines[f : f+4] {
			_, agent, _ := strings.Cut(l, " ")
			agents[agent] = true
		}
		if len(agents) != 1 {
			t.Fatalf("BINPACK fire %d ran on agents %v; want one:\n%s", f/4, agents, strings.Join(lines, "\n"))
		}
	}
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// runLines returns the lines of a job's runs file, in order.
func (s *system) runLines(job string) []string {
	b, _ := os.ReadFile(filepath.Join(s.dir, "runs-"+job+".txt"))
	if len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}
