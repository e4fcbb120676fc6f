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

// retryJob is a trigger-only 2-shard SCRIPT job whose shard 1 fails by the job's own fault
// (exit 1) on its runs before the okFrom-th (okFrom 0: on every run); shard 0 always succeeds. Each run logs "start <shard> <n> <ns>" and
// "end <shard> <n> <rc> <ns>" to retries-<name>.log.
func (w *world) retryJob(name string, okFrom int, retry map[string]any) string {
	dir := w.dir
	log := filepath.Join(dir, "retries-"+name+".log")
	counter := filepath.Join(dir, "count-"+name+"-")
	ok := `[ $EJCLOUD_SHARDING_ITEM = 0 ]`
	if okFrom > 0 {
		ok += ` || [ $n -ge ` + strconv.Itoa(okFrom) + ` ]`
	}
	script := `C=` + counter + `$EJCLOUD_SHARDING_ITEM; n=$(cat $C 2>/dev/null || echo 0); n=$((n+1)); echo $n > $C; ` +
		`echo "start $EJCLOUD_SHARDING_ITEM $n $(date +%s%N)" >> ` + log + `; ` +
		`if ` + ok + `; then rc=0; else rc=1; fi; ` +
		`echo "end $EJCLOUD_SHARDING_ITEM $n $rc $(date +%s%N)" >> ` + log + `; ` +
		// The executor appends the sharding context as "$1": it becomes sh's $1, and $0 the code.
		`sh -c 'exit $0' $rc`
	b, _ := json.Marshal(map[string]any{"jobName": name, "appName": "app", "jobType": "SCRIPT", "jobExecutionType": "TRANSIENT",
		"timeZone": "UTC", "shardingTotalCount": 2, "cpuCount": 0.1, "memoryMB": 16, "scriptCommandLine": script, "retry": retry})
	return string(b)
}

// retryEvent is one line of a retry job's log.
type retryEvent struct {
	kind  string // start or end
	shard int
	n     int // the shard's run
	rc    int
	at    time.Time
}

func (w *world) retryEvents(t *testing.T, name string) []retryEvent {
	b, _ := os.ReadFile(filepath.Join(w.dir, "retries-"+name+".log"))
	var out []retryEvent
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		e := retryEvent{kind: f[0]}
		e.shard, _ = strconv.Atoi(f[1])
		e.n, _ = strconv.Atoi(f[2])
		ns := f[3]
		if e.kind == "end" && len(f) == 5 {
			e.rc, _ = strconv.Atoi(f[3])
			ns = f[4]
		}
		v, err := strconv.ParseInt(ns, 10, 64)
		if err != nil {
			t.Fatalf("retry log line %q: %v", line, err)
		}
		e.at = time.Unix(0, v)
		out = append(out, e)
	}
	return out
}

// Retries with backoff (issue 19): shard 1 of a fire fails by the job's own fault twice and
// then succeeds, with maxAttempts 3 and a 2 s backoff: it runs three times, the second run
// 2 s after the first failure and the third 4 s after the second (each within 10 %), shard 0
// runs once, and the fire ledger shows the fire's four tasks and its third attempt. A job
// whose shard always fails runs it maxAttempts times and its fire is marked failed, once.
func TestRetriesWithBackoff(t *testing.T) {
	t.Parallel()
	w, s := startWorld(t, 1)
	s.must(t, 204, "POST", "/api/job/register", w.retryJob("flaky", 3, map[string]any{"maxAttempts": 3, "backoff": 2, "maxBackoff": 10}))
	s.must(t, 204, "POST", "/api/job/register", w.retryJob("doomed", 0, map[string]any{"maxAttempts": 3, "backoff": 0.5}))
	s.must(t, 204, "POST", "/api/job/trigger", "flaky")
	s.must(t, 204, "POST", "/api/job/trigger", "doomed")

	// The wait for a retry is visible where a failing job's backoff is.
	await.True(t, 30*time.Second, "the retry's backoff in GET …/failure", func() bool {
		return strings.Contains(s.must(t, 200, "GET", "/api/job/flaky/failure", ""), "retry attempt 2")
	})
	ended := func(name string, shard, runs int) bool {
		n := 0
		for _, e := range w.retryEvents(t, name) {
			if e.kind == "end" && e.shard == shard {
				n++
			}
		}
		return n >= runs
	}
	await.True(t, 30*time.Second, "flaky's shard 1 succeeds on its third run, doomed's fails three times", func() bool {
		return ended("flaky", 1, 3) && ended("doomed", 1, 3) && ended("flaky", 0, 1) && ended("doomed", 0, 1)
	})
	quiet(t, s, "flaky", "doomed")

	for _, name := range []string{"flaky", "doomed"} {
		var shard1 []retryEvent
		shard0 := 0
		for _, e := range w.retryEvents(t, name) {
			switch {
			case e.shard == 0 && e.kind == "start":
				shard0++
			case e.shard == 1:
				shard1 = append(shard1, e)
			}
		}
		if shard0 != 1 || len(shard1) != 6 {
			t.Fatalf("%s: shard 0 ran %d times, shard 1 logged %v; want 1 run and 3 runs of shard 1", name, shard0, shard1)
		}
		rcs := []int{shard1[1].rc, shard1[3].rc, shard1[5].rc}
		if name == "flaky" {
			if rcs[0] != 1 || rcs[1] != 1 || rcs[2] != 0 {
				t.Fatalf("flaky: exit codes of shard 1's runs %v; want 1 1 0", rcs)
			}
			// The backoff: 2 s before the first retry, 4 s before the second, within 10 %.
			for k, backoff := range []time.Duration{2 * time.Second, 4 * time.Second} {
				gap := shard1[2*k+2].at.Sub(shard1[2*k+1].at)
				t.Logf("flaky: retry %d started %v after the failure (backoff %v)", k+1, gap.Round(time.Millisecond), backoff)
				if gap < backoff || gap > backoff+backoff/10 {
					t.Errorf("flaky: retry %d started %v after the failure; want %v within 10 %%", k+1, gap, backoff)
				}
			}
		} else if rcs[0] != 1 || rcs[1] != 1 || rcs[2] != 1 {
			t.Fatalf("doomed: exit codes %v; want 1 1 1", rcs)
		}
	}
	// No fourth attempt of doomed's shard.
	holdsFor(t, 2*time.Second, "doomed is not run a fourth time", func() bool { return !ended("doomed", 1, 4) })

	for name, failed := range map[string]bool{"flaky": false, "doomed": true} {
		var f struct {
			Fires []struct {
				Triggered bool     `json:"triggered"`
				Tasks     int      `json:"tasks"`
				TaskIDs   []string `json:"taskIds"`
				Attempts  int      `json:"attempts"`
				Failed    string   `json:"failed"`
			} `json:"fires"`
		}
		body := s.must(t, 200, "GET", "/api/job/"+name+"/fires", "")
		if err := json.Unmarshal([]byte(body), &f); err != nil || len(f.Fires) != 1 {
			t.Fatalf("%s: fires %s (%v); want the one triggered run", name, body, err)
		}
		e := f.Fires[0]
		if !e.Triggered || e.Tasks != 4 || len(e.TaskIDs) != 4 || e.Attempts != 3 || (e.Failed != "") != failed {
			t.Errorf("%s: ledger entry %s; want triggered, 4 tasks, attempt 3, failed=%v", name, body, failed)
		}
		if failed && !strings.Contains(e.Failed, "3 attempts") {
			t.Errorf("%s: failed %q; want the attempts named", name, e.Failed)
		}
	}
}
