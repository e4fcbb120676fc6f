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

// dependsOn (issue 19): two parents and a bottom job that depends on both, all on one cron with
// two slots in the test's minute. At the first logical time the bottom job waits — visibly — for
// both parents' runs to end, then runs once; at the second, a parent fails and the bottom job's
// run is skipped, "upstream failed". A cycle is refused at registration, naming it.
func TestDependenciesDiamond(t *testing.T) {
	t.Parallel()
	w, s := startWorld(t, 1)
	log := filepath.Join(w.dir, "dag.log")
	first := time.Now().Add(8 * time.Second).Truncate(time.Second)
	second := first.Add(6 * time.Second)
	expr := strconv.Itoa(first.Second()) + "," + strconv.Itoa(second.Second()) + " * * * * ?"
	job := func(name, body string, deps ...string) string {
		script := `echo "start ` + name + ` $(date +%s%N)" >> ` + log + `; ` + body + `; rc=$?; ` +
			`echo "end ` + name + ` $rc $(date +%s%N)" >> ` + log + `; sh -c 'exit $0' $rc`
		m := map[string]any{"jobName": name, "appName": "app", "jobType": "SCRIPT", "jobExecutionType": "TRANSIENT",
			"cron": expr, "timeZone": "UTC", "shardingTotalCount": 1, "cpuCount": 0.1, "memoryMB": 16, "scriptCommandLine": script}
		if len(deps) > 0 {
			m["dependsOn"] = deps
		}
		b, _ := json.Marshal(m)
		return string(b)
	}
	// left sleeps 1 s; right sleeps 2 s, and fails on its second run.
	counter := filepath.Join(w.dir, "right-count")
	s.must(t, 204, "POST", "/api/job/register", job("left", "sleep 1"))
	s.must(t, 204, "POST", "/api/job/register", job("right",
		`n=$(cat `+counter+` 2>/dev/null || echo 0); n=$((n+1)); echo $n > `+counter+`; sleep 2; [ $n = 1 ]`))
	s.must(t, 204, "POST", "/api/job/register", job("bottom", "true", "left", "right"))
	if code, body := s.api(t, "PUT", "/api/job/update", job("left", "sleep 1", "bottom")); code != 400 ||
		!strings.Contains(body, `"field":"dependsOn"`) || !strings.Contains(body, "left → bottom → left") {
		t.Fatalf("an update closing a cycle: %d %s; want 400 naming dependsOn and the cycle", code, body)
	}
	if time.Now().After(first.Add(-time.Second)) {
		t.Fatalf("registration took until %v, too close to the first slot %v", time.Now(), first)
	}

	type event struct {
		kind, job string
		rc        int
		at        time.Time
	}
	events := func() []event {
		data, _ := os.ReadFile(log)
		var out []event
		for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
			f := strings.Fields(line)
			if len(f) < 3 {
				continue
			}
			e := event{kind: f[0], job: f[1]}
			ns := f[2]
			if e.kind == "end" && len(f) == 4 {
				e.rc, _ = strconv.Atoi(f[2])
				ns = f[3]
			}
			v, _ := strconv.ParseInt(ns, 10, 64)
			e.at = time.Unix(0, v)
			out = append(out, e)
		}
		return out
	}
	count := func(kind, job string) int {
		n := 0
		for _, e := range events() {
			if e.kind == kind && e.job == job {
				n++
			}
		}
		return n
	}

	// While the parents run, the bottom job's run waits, and says for what.
	sawWaiting := ""
	var sawReasons map[string]int // beside the unplaced reasons
	await.True(t, 30*time.Second, "the bottom job's first run", func() bool {
		if sawWaiting == "" {
			var f struct {
				Waiting string `json:"waiting"`
			}
			json.Unmarshal([]byte(s.must(t, 200, "GET", "/api/job/bottom/fires", "")), &f)
			sawWaiting = f.Waiting
		}
		if sawReasons["waiting: dependency right"] == 0 {
			var u map[string]map[string]int
			json.Unmarshal([]byte(s.must(t, 200, "GET", "/api/job/unplaced", "")), &u)
			sawReasons = u["bottom"]
		}
		return count("end", "bottom") == 1 && count("end", "left") >= 1 && count("end", "right") >= 1
	})
	t.Logf("the bottom job waited: %s", sawWaiting)
	if !strings.Contains(sawWaiting, `"right"`) {
		t.Errorf("the waiting run did not say it waits for right: %q", sawWaiting)
	}
	if sawReasons["waiting: dependency right"] != 1 {
		t.Errorf("GET /api/job/unplaced never said the bottom job's shard waits for right: %v", sawReasons)
	}
	// The parents' first runs' ends (their second runs start 6 s later).
	var bottomStart, parentsEnd time.Time
	ended := map[string]bool{}
	for _, e := range events() {
		switch {
		case e.kind == "start" && e.job == "bottom":
			bottomStart = e.at
		case e.kind == "end" && e.job != "bottom" && !ended[e.job]:
			ended[e.job] = true
			if e.at.After(parentsEnd) {
				parentsEnd = e.at
			}
		}
	}
	if !bottomStart.After(parentsEnd) {
		t.Fatalf("bottom started at %v, before both parents ended (%v)", bottomStart, parentsEnd)
	}
	t.Logf("bottom started %v after the later parent ended", bottomStart.Sub(parentsEnd).Round(time.Millisecond))

	// The second logical time: right fails, bottom's run is skipped.
	var ledger struct {
		Fires []struct {
			Slot    time.Time `json:"slot"`
			Outcome string    `json:"outcome"`
			Reason  string    `json:"reason"`
		} `json:"fires"`
	}
	await.True(t, 30*time.Second, "bottom's second slot skipped", func() bool {
		json.Unmarshal([]byte(s.must(t, 200, "GET", "/api/job/bottom/fires", "")), &ledger)
		return len(ledger.Fires) == 2 && ledger.Fires[0].Outcome == "skipped"
	})
	if r := ledger.Fires[0].Reason; !strings.Contains(r, "upstream failed") || !strings.Contains(r, `"right"`) || !ledger.Fires[0].Slot.Equal(second) {
		t.Errorf("bottom's second slot %+v; want skipped, upstream right failed", ledger.Fires[0])
	}
	for _, name := range []string{"left", "right", "bottom"} {
		stopFires(t, s, job(name, "true"))
	}
	quiet(t, s, "left", "right", "bottom")
	if n := count("start", "bottom"); n != 1 {
		t.Errorf("bottom ran %d times; want once, at the first logical time", n)
	}
	if l, r := count("end", "left"), count("end", "right"); l != 2 || r != 2 {
		t.Errorf("left ran %d times, right %d; want 2 each", l, r)
	}
}
