package integration

import (
	"encoding/json"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/integration/audit"
	"github.com/ejcloud/ejcloud/internal/await"
)

// A 20 s window without a leader (issue 19): the leader is SIGKILLed right after an anchor slot
// and the standby is started only 20 s later, so nine slots of each job fall while no instance
// leads. The new leader reads each job's fire ledger and applies its misfirePolicy: skip runs
// none of them (2.1.5), fireOnce one, fireAll nine; the ledger says so slot by slot, every fired
// slot names the task it produced, and the runs the scripts recorded are exactly those.
//
// The cron repeats every minute: an anchor second, nine slots 6 to 22 s after it, and then
// nothing for 38 s, in which the standby takes over: so the counts do not depend on how long
// the takeover takes.
func TestLeaderlessWindowByMisfirePolicy(t *testing.T) {
	t.Parallel()
	w := newWorld(t, 1)
	first := startScheduler(t, w.zk, w.mesos)
	leaderOf(t, first)
	first.must(t, 204, "POST", "/api/app", w.appJSON(""))

	anchor := time.Now().Add(8 * time.Second).Truncate(time.Second)
	secs := []string{fmt.Sprint(anchor.Second())}
	var missed []time.Time
	for d := 6; d <= 22; d += 2 {
		missed = append(missed, anchor.Add(time.Duration(d)*time.Second))
		secs = append(secs, fmt.Sprint((anchor.Second()+d)%60))
	}
	expr := strings.Join(secs, ",") + " * * * * ?"
	policies := map[string]string{"skip": "skip", "once": "fireOnce", "all": "fireAll"}
	jobs := map[string]string{}
	var audited []audit.Job
	for name, policy := range policies {
		jobs[name] = withFields(w.jobJSON(name, 1, expr, false, ""), map[string]any{"misfire": policy != "skip", "misfirePolicy": policy})
		first.must(t, 204, "POST", "/api/job/register", jobs[name])
		a := cronJob(t, name, 1, expr)
		a.Misfire = policy != "skip"
		audited = append(audited, a)
	}
	if time.Now().After(anchor.Add(-time.Second)) {
		t.Fatalf("registration took until %v, too close to the anchor slot %v", time.Now(), anchor)
	}

	// The anchor slot runs under the first leader; then it dies, before the first missed slot.
	await.True(t, 5*time.Second+time.Until(anchor), "each job runs the anchor slot", func() bool {
		for name := range policies {
			if len(w.runs(name)["0"]) != 1 {
				return false
			}
		}
		return true
	})
	first.stop(syscall.SIGKILL)
	killed := time.Now()
	if !killed.Before(missed[0].Add(-500 * time.Millisecond)) {
		t.Fatalf("the leader was killed at %v, too close to the first missed slot %v", killed, missed[0])
	}
	t.Logf("leader killed %v after the anchor slot", killed.Sub(anchor).Round(time.Millisecond))
	// The leaderless window is the condition under test: at least 20 s, and past the last
	// missed slot.
	time.Sleep(time.Until(later(killed.Add(20*time.Second), missed[len(missed)-1].Add(time.Second))))
	standby := startScheduler(t, w.zk, w.mesos)
	leaderOf(t, standby)
	took := time.Since(killed)
	t.Logf("the standby leads %v after the kill", took.Round(time.Millisecond))
	if next := anchor.Add(time.Minute); time.Now().After(next.Add(-10 * time.Second)) {
		t.Fatalf("the takeover came too late for the test's quiet period (next anchor %v)", next)
	}

	want := map[string]int{"skip": 1, "once": 2, "all": 10}
	seen := ""
	await.True(t, 30*time.Second, "the catch-up runs", func() bool {
		seen = ""
		done := true
		for name, n := range want {
			runs, running, ready := len(w.runs(name)["0"]), tasks(t, standby, "running", name), tasks(t, standby, "ready", name)
			seen += fmt.Sprintf(" %s: %d runs, %d running, %d ready;", name, runs, running, ready)
			if runs != n || running != 0 || ready != 0 {
				done = false
			}
		}
		if !done && time.Since(killed) > 50*time.Second {
			t.Logf("still:%s", seen)
		}
		return done
	})
	if time.Now().After(anchor.Add(time.Minute - time.Second)) {
		t.Fatal("the catch-up ran into the next minute's anchor slot: the counts are not the window's")
	}
	for name := range policies {
		stopFires(t, standby, jobs[name])
	}
	for name, n := range want {
		if got := len(w.runs(name)["0"]); got != n {
			t.Errorf("%s: %d runs; want %d (the anchor and %d of the 9 missed slots)", name, got, n, n-1)
		}
	}

	// The ledger: the anchor fired, then each missed slot once with its outcome; the fired ones
	// name their task, and the tasks are distinct.
	ledger := func(name string) jobFires {
		var f jobFires
		body := standby.must(t, 200, "GET", "/api/job/"+name+"/fires?limit=64", "")
		if err := json.Unmarshal([]byte(body), &f); err != nil {
			t.Fatalf("fires of %s: %v in %s", name, err, body)
		}
		return f
	}
	wantLedger := map[string]string{
		"skip": "fired@0 skipped@6-22x9",
		"once": "fired@0 merged@6-20x8 fired@22",
		"all":  "fired@0 fired@6 fired@8 fired@10 fired@12 fired@14 fired@16 fired@18 fired@20 fired@22",
	}
	for name, wantSlots := range wantLedger {
		f := ledger(name)
		var got []string
		ids := map[string]bool{}
		for i := len(f.Fires) - 1; i >= 0; i-- { // oldest first
			e := f.Fires[i]
			s := fmt.Sprintf("%s@%v", e.Outcome, e.Slot.Sub(anchor).Seconds())
			if e.Count > 1 {
				s += fmt.Sprintf("-%vx%d", e.Through.Sub(anchor).Seconds(), e.Count)
			}
			got = append(got, s)
			if e.Outcome == "fired" {
				if e.Tasks != 1 || len(e.TaskIDs) != 1 || ids[e.TaskIDs[0]] {
					t.Errorf("%s: fired slot %v has tasks %d %v; want its own one task", name, e.Slot, e.Tasks, e.TaskIDs)
				} else {
					ids[e.TaskIDs[0]] = true
				}
			}
		}
		if strings.Join(got, " ") != wantSlots {
			t.Errorf("%s: ledger %s\nwant:      %s", name, strings.Join(got, " "), wantSlots)
		}
		if f.LastSlot == nil || !f.LastSlot.Equal(missed[len(missed)-1]) {
			t.Errorf("%s: last slot handled %v; want %v", name, f.LastSlot, missed[len(missed)-1])
		}
	}
	quiet(t, standby, "skip", "once", "all")
	mustAudit(t, w, audited...)
}

// jobFires is GET /api/job/{jobName}/fires.
type jobFires struct {
	LastSlot *time.Time `json:"lastSlot"`
	Fires    []struct {
		Slot    time.Time `json:"slot"`
		Through time.Time `json:"through"`
		Count   int       `json:"count"`
		Outcome string    `json:"outcome"`
		Reason  string    `json:"reason"`
		Tasks   int       `json:"tasks"`
		TaskIDs []string  `json:"taskIds"`
	} `json:"fires"`
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// withFields sets fields of a job's JSON.
func withFields(jobJSON string, fields map[string]any) string {
	var j map[string]any
	json.Unmarshal([]byte(jobJSON), &j)
	for k, v := range fields {
		j[k] = v
	}
	b, _ := json.Marshal(j)
	return string(b)
}
