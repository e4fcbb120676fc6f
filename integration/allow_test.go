package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/integration/audit"
	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/taskid"
)

// concurrencyPolicy Allow (issue 19): a 2-shard job whose shards hold until released is
// triggered twice. The second run starts while the first still runs — four tasks in the running
// queue, each shard's two runs overlapping in what the scripts recorded — and once released,
// the fire ledger has both runs, each with its two tasks, ended. A job others depend on, or one
// with retries, cannot be Allow (400 naming the field).
func TestAllowRunsAShardAgainWhileItRuns(t *testing.T) {
	t.Parallel()
	w, s := startWorld(t, 2)
	var j map[string]any
	json.Unmarshal([]byte(setPlacement(w.jobJSON("par", 2, "", false, w.hold("par")), "SPREAD")), &j)
	j["concurrencyPolicy"] = "Allow"
	if code, body := s.api(t, "POST", "/api/job/register", mustJSON(j)); code != 400 || !strings.Contains(body, `"field":"concurrencyPolicy"`) {
		t.Fatalf("Allow without shardsIndependent: %d %s; want 400 naming concurrencyPolicy", code, body)
	}
	j["shardsIndependent"] = true
	s.must(t, 204, "POST", "/api/job/register", mustJSON(j))

	s.must(t, 204, "POST", "/api/job/trigger", "par")
	await.True(t, 30*time.Second, "both shards of the first run running", func() bool { return tasks(t, s, "running", "par") == 2 })
	s.must(t, 204, "POST", "/api/job/trigger", "par")
	await.True(t, 30*time.Second, "the second run's shards running beside the first's", func() bool { return tasks(t, s, "running", "par") == 4 })
	// What the scripts recorded, per shard: when its runs started and ended.
	effects := func() (starts, ends map[int][]time.Time) {
		starts, ends = map[int][]time.Time{}, map[int][]time.Time{}
		recs, err := audit.ReadEffects(w.effects())
		if err != nil && !errors.Is(err, fs.ErrNotExist) { // none yet before the first start
			t.Fatal(err)
		}
		for _, r := range recs {
			switch {
			case !strings.HasPrefix(r.TaskID, "par@-@"):
			case r.Kind == "start":
				starts[r.Item] = append(starts[r.Item], r.At)
			case r.Kind == "end":
				ends[r.Item] = append(ends[r.Item], r.At)
			}
		}
		return starts, ends
	}
	// Released only once the scripts recorded both starts of each shard: a run is in the
	// executor's list of runs a moment before its script records its start.
	await.True(t, 30*time.Second, "each shard's start recorded twice", func() bool {
		starts, _ := effects()
		return len(starts[0]) == 2 && len(starts[1]) == 2
	})
	w.release("par")
	quiet(t, s, "par")

	// Per shard, the second run started before the first ended.
	starts, ends := effects()
	for item := range 2 {
		if len(starts[item]) != 2 || len(ends[item]) != 2 {
			t.Fatalf("shard %d: %d starts, %d ends recorded; want 2 and 2", item, len(starts[item]), len(ends[item]))
		}
		firstEnd, lastStart := ends[item][0], starts[item][1]
		if ends[item][1].Before(firstEnd) {
			firstEnd = ends[item][1]
		}
		if starts[item][0].After(lastStart) {
			lastStart = starts[item][0]
		}
		if !lastStart.Before(firstEnd) {
			t.Errorf("shard %d's runs did not overlap: starts %v, ends %v", item, starts[item], ends[item])
		}
	}
	var fires struct {
		Fires []struct {
			Outcome string    `json:"outcome"`
			Tasks   int       `json:"tasks"`
			Ended   time.Time `json:"ended"`
			Failed  string    `json:"failed"`
		} `json:"fires"`
	}
	body := s.must(t, 200, "GET", "/api/job/par/fires", "")
	if err := json.Unmarshal([]byte(body), &fires); err != nil || len(fires.Fires) != 2 {
		t.Fatalf("fires %s (%v); want two runs", body, err)
	}
	for _, f := range fires.Fires {
		if f.Outcome != "fired" || f.Tasks != 2 || f.Ended.IsZero() || f.Failed != "" {
			t.Errorf("ledger %s; want both runs fired, with 2 tasks each, ended and not failed", body)
		}
	}

	// Allow and dependencies exclude each other: a run of an Allow job is not the one run of a
	// logical time.
	dep := map[string]any{}
	json.Unmarshal([]byte(w.jobJSON("down", 1, "0 0 * * * ?", false, "")), &dep)
	dep["dependsOn"] = []string{"par"}
	if code, body := s.api(t, "POST", "/api/job/register", mustJSON(dep)); code != 400 || !strings.Contains(body, `"field":"dependsOn"`) {
		t.Errorf("a job depending on an Allow job: %d %s; want 400 naming dependsOn", code, body)
	}
}

// An Allow job's two overlapping runs of a shard both lose their task to an executor SIGKILL:
// each failed task is its own failover entry, so both runs are relaunched (a job whose runs do
// not overlap has one entry per shard, and would relaunch one), and each run's ledger entry
// ends with its own relaunch.
func TestAllowRelaunchesEachRunOfAShard(t *testing.T) {
	t.Parallel()
	w, s := startWorld(t, 1)
	var j map[string]any
	json.Unmarshal([]byte(w.jobJSON("pfo", 1, "", true, w.hold("pfo"))), &j)
	j["concurrencyPolicy"], j["shardsIndependent"] = "Allow", true
	s.must(t, 204, "POST", "/api/job/register", mustJSON(j))
	for n := 1; n <= 2; n++ {
		s.must(t, 204, "POST", "/api/job/trigger", "pfo")
		await.True(t, 30*time.Second, fmt.Sprintf("run %d started", n), func() bool { return len(w.runs("pfo")["0"]) == n })
	}
	agent := w.runs("pfo")["0"][0]
	pids := w.mesos.executorPIDs(agent)
	if len(pids) != 1 {
		t.Fatalf("executors on %s: %v; want the one that runs both", agent, pids)
	}
	syscall.Kill(pids[0], syscall.SIGKILL)
	await.True(t, 30*time.Second, "both runs' shard relaunched", func() bool { return len(w.runs("pfo")["0"]) == 4 })
	w.release("pfo")
	quiet(t, s, "pfo")

	ups, err := audit.ReadFile(w.mesos.updates)
	if err != nil {
		t.Fatal(err)
	}
	relaunched := map[string]bool{}
	for _, u := range ups {
		if strings.HasPrefix(u.TaskID, "pfo@-@0@-@FAILOVER@-@") {
			relaunched[u.TaskID] = true
		}
	}
	if len(relaunched) != 2 {
		t.Errorf("failover tasks %v; want one relaunch for each run", relaunched)
	}
	var fires struct {
		Fires []struct {
			Tasks   int       `json:"tasks"`
			Ended   time.Time `json:"ended"`
			Run     string    `json:"run"`
			TaskIDs []string  `json:"taskIds"`
		} `json:"fires"`
	}
	body := s.must(t, 200, "GET", "/api/job/pfo/fires", "")
	if err := json.Unmarshal([]byte(body), &fires); err != nil || len(fires.Fires) != 2 {
		t.Fatalf("fires %s (%v); want two runs", body, err)
	}
	for _, f := range fires.Fires {
		if f.Tasks != 2 || f.Ended.IsZero() {
			t.Errorf("ledger %s; want each run with its task and its relaunch, ended", body)
		}
		// Each run's task and relaunch carry its run id, which tells the runs apart however
		// many tasks they have.
		for _, id := range f.TaskIDs {
			if parsed, err := taskid.Parse(id); err != nil || f.Run == "" || parsed.Run() != f.Run {
				t.Errorf("ledger %s: task %s is not of its entry's run", body, id)
			}
		}
	}
	if fires.Fires[0].Run == fires.Fires[1].Run {
		t.Errorf("ledger %s; want the two runs' ids distinct", body)
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}
