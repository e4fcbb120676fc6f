package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/internal/await"
)

// concurrencyPolicy Replace (issue 19): a 2-shard job whose first run (triggered) sleeps for a
// minute fires on its cron while it runs. The running shards are killed (their scripts get SIGTERM and
// record it), and the new run's shards start only after both old ones are gone; the fire ledger
// marks the first run replaced.
func TestReplaceKillsTheRunningRunFirst(t *testing.T) {
	t.Parallel()
	w, s := startWorld(t, 1)
	log := filepath.Join(w.dir, "replace.log")
	counter := filepath.Join(w.dir, "replace-count-")
	// Run 1 of each shard sleeps (in the background, so that the shell takes SIGTERM at once),
	// later runs end at once; each records its start, and a SIGTERM, with the time.
	script := `C=` + counter + `$EJCLOUD_SHARDING_ITEM; n=$(cat $C 2>/dev/null || echo 0); n=$((n+1)); echo $n > $C; ` +
		`echo "start $EJCLOUD_SHARDING_ITEM $n $(date +%s%N)" >> ` + log + `; ` +
		`trap 'echo "gone $EJCLOUD_SHARDING_ITEM $n $(date +%s%N)" >> ` + log + `; exit 143' TERM; ` +
		`if [ $n = 1 ]; then sleep 60 & wait $!; fi; true`
	// The cron's slot has just passed: it fires next in about a minute, after the test has set
	// the slot it wants, however long the first run takes to start on a busy machine.
	job := map[string]any{"jobName": "rep", "appName": "app", "jobType": "SCRIPT", "jobExecutionType": "TRANSIENT",
		"cron": strconv.Itoa(time.Now().Add(-2*time.Second).Second()) + " * * * * ?", "timeZone": "UTC", "shardingTotalCount": 2,
		"cpuCount": 0.1, "memoryMB": 16, "scriptCommandLine": script, "concurrencyPolicy": "Replace"}
	b, _ := json.Marshal(job)
	s.must(t, 204, "POST", "/api/job/register", string(b))
	if got := s.must(t, 200, "GET", "/api/job/jobs/rep", ""); !strings.Contains(got, `"concurrencyPolicy":"Replace"`) {
		t.Fatalf("the job's JSON does not show its policy: %s", got)
	}
	s.must(t, 204, "POST", "/api/job/trigger", "rep")
	type event struct {
		kind     string
		shard, n int
		at       time.Time
	}
	events := func() []event {
		data, _ := os.ReadFile(log)
		var out []event
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			f := strings.Fields(line)
			if len(f) != 4 {
				continue
			}
			shard, _ := strconv.Atoi(f[1])
			n, _ := strconv.Atoi(f[2])
			ns, _ := strconv.ParseInt(f[3], 10, 64)
			out = append(out, event{f[0], shard, n, time.Unix(0, ns)})
		}
		return out
	}
	count := func(kind string, n int) int {
		c := 0
		for _, e := range events() {
			if e.kind == kind && e.n == n {
				c++
			}
		}
		return c
	}
	await.True(t, 30*time.Second, "both shards of the first run running", func() bool { return count("start", 1) == 2 })
	fire := time.Now().Add(5 * time.Second) // the cron's one slot while the first run sleeps
	job["cron"] = strconv.Itoa(fire.Second()) + " * * * * ?"
	b, _ = json.Marshal(job)
	s.must(t, 204, "PUT", "/api/job/update", string(b))
	if time.Now().After(fire.Add(-time.Second)) {
		t.Fatalf("the cron was set only at %v, too close to its slot %v", time.Now(), fire)
	}
	await.True(t, 30*time.Second, "the second run started and done", func() bool { return count("start", 2) == 2 })
	quiet(t, s, "rep")

	var lastGone, firstNew time.Time
	for _, e := range events() {
		switch {
		case e.kind == "gone" && e.n == 1 && e.at.After(lastGone):
			lastGone = e.at
		case e.kind == "start" && e.n == 2 && (firstNew.IsZero() || e.at.Before(firstNew)):
			firstNew = e.at
		}
	}
	if count("gone", 1) != 2 {
		t.Fatalf("%d of the first run's shards got SIGTERM; want both: %v", count("gone", 1), events())
	}
	t.Logf("the new run started %v after the last old shard was gone", firstNew.Sub(lastGone).Round(time.Millisecond))
	if !firstNew.After(lastGone) {
		t.Fatalf("the new run started at %v, before the old shards were gone (%v)", firstNew, lastGone)
	}
	var fires struct {
		Fires []struct {
			Failed string `json:"failed"`
			Tasks  int    `json:"tasks"`
		} `json:"fires"`
	}
	body := s.must(t, 200, "GET", "/api/job/rep/fires", "")
	if err := json.Unmarshal([]byte(body), &fires); err != nil || len(fires.Fires) != 2 {
		t.Fatalf("fires %s (%v); want two runs", body, err)
	}
	newest, replaced := fires.Fires[0], fires.Fires[1]
	if !strings.Contains(replaced.Failed, "replaced") || newest.Failed != "" || newest.Tasks != 2 || replaced.Tasks != 2 {
		t.Errorf("ledger %s; want the first run replaced and the second with its 2 tasks", body)
	}
	if n := count("start", 3); n != 0 {
		t.Errorf("%d runs more than the two", n)
	}
}
