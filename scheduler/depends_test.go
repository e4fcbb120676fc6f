package scheduler

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/scheduler/plan"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/taskid"
)

// A queued run left out of the cycle says why, in the job's own terms (issue 19).
func TestWaitReasons(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	job := func(name, policy string) config.Job {
		return config.Job{JobName: name, JobExecutionType: config.Transient, ConcurrencyPolicy: policy}
	}
	shard := func(job string, item int) taskid.Meta { return taskid.Meta{JobName: job, Item: item} }
	snap := plan.Snapshot{
		Ready: []state.ReadyEntry{{JobName: "forbid", Count: 1}, {JobName: "replace", Count: 1}, {JobName: "retrying", Count: 1},
			{JobName: "chosen", Count: 1}, {JobName: "dep", Count: 1}},
		Running: []state.RunningEntry{{Meta: shard("forbid", 0)}, {Meta: shard("forbid", 1)}, {Meta: shard("replace", 0)}},
		Failovers: []state.FailoverEntry{{Meta: shard("retrying", 1)}, {Meta: shard("lost", 0)}, {Meta: shard("lost", 1)},
			{Meta: shard("lost", 2)}},
		Jobs: map[string]config.Job{"forbid": job("forbid", config.Forbid), "replace": job("replace", config.Replace),
			"retrying": job("retrying", config.Forbid), "chosen": job("chosen", config.Forbid), "dep": job("dep", config.Forbid),
			"lost": job("lost", config.Forbid)},
	}
	for name, j := range snap.Jobs {
		j.ShardingTotalCount = 3
		snap.Jobs[name] = j
	}
	// lost's shard 0 is launched this cycle, 1 waits for its failover backoff, 2's ran out.
	w := plan.Work{Jobs: []config.Job{snap.Jobs["chosen"], snap.Jobs["lost"]},
		Failover: map[string][]state.FailoverEntry{"lost": {{Meta: shard("lost", 0)}}}}
	retries := map[taskid.Meta]state.RetryState{shard("retrying", 1): {Attempt: 2, NotBefore: now.Add(time.Second)}}
	relaunchAt := func(m taskid.Meta) time.Time {
		switch m {
		case shard("lost", 0), shard("lost", 1):
			return now.Add(5 * time.Second)
		case shard("lost", 2):
			return now.Add(-time.Second)
		}
		return time.Time{}
	}
	waiting := newWaits()
	waiting.why["dep"] = "dependsOn: waiting for x"
	waiting.add("dep", waitDependency+"x", 3)
	waitReasons(snap, w, retries, relaunchAt, now, waiting)
	want := map[string]string{
		"forbid":   "concurrencyPolicy Forbid: waiting for the last run to end (2 shards running)",
		"replace":  "concurrencyPolicy Replace: waiting for the 1 killed shards",
		"retrying": "waiting for shard 1's retry (attempt 2) at 2026-11-24T10:00:01Z",
		"dep":      "dependsOn: waiting for x",
	}
	for job, w := range want {
		if !strings.HasPrefix(waiting.why[job], w) {
			t.Errorf("%s: %q; want %q", job, waiting.why[job], w)
		}
	}
	if r, ok := waiting.why["chosen"]; ok {
		t.Errorf("a run the cycle chose waits: %q", r)
	}
	// The stable reasons of GET /api/job/unplaced, with the shards waiting for each.
	wantReasons := map[string]map[string]int{
		"forbid":   {"waiting: concurrency policy Forbid": 3},
		"replace":  {"waiting: concurrency policy Replace": 3},
		"retrying": {"waiting: retry backoff until 2026-11-24T10:00:01Z": 1},
		"dep":      {"waiting: dependency x": 3},
		"lost":     {"waiting: failover backoff until 2026-11-24T10:00:05Z": 1},
	}
	if !reflect.DeepEqual(waiting.reasons, wantReasons) {
		t.Errorf("reasons %v; want %v", waiting.reasons, wantReasons)
	}
	// "until" never names a time before the wait ends.
	if u := until(now.Add(time.Millisecond)); u != "2026-11-24T10:00:01Z" {
		t.Errorf("until 1 ms after a whole second: %s", u)
	}
}

// A dependency's run for a logical time is its first run launched at or after it.
func TestDependencyRun(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	l := state.Ledger{Fires: []state.FireEntry{
		{Slot: at.Add(-10 * time.Second), Outcome: state.OutcomeFired, Launched: at.Add(-9 * time.Second), Ended: at.Add(-8 * time.Second)},
		{Slot: at, Outcome: state.OutcomeMerged},
		{Slot: at.Add(-5 * time.Second), Outcome: state.OutcomeFired, Launched: at.Add(time.Second), Failed: "x"},
		{Slot: at.Add(10 * time.Second), Outcome: state.OutcomeFired, Launched: at.Add(11 * time.Second)},
	}}
	run, ok := dependencyRun(l, at)
	if !ok || !run.Launched.Equal(at.Add(time.Second)) || run.Succeeded() {
		t.Fatalf("run %+v, %v; want the failed one launched 1 s after", run, ok)
	}
	if _, ok := dependencyRun(l, at.Add(time.Minute)); ok {
		t.Fatal("a run found for a logical time none was launched after")
	}
	// A run skipped because its own dependency failed is this logical time's run, failed: a
	// chain passes the failure down instead of waiting for the next run.
	chain := state.Ledger{Fires: []state.FireEntry{
		{Slot: at, Outcome: state.OutcomeSkipped, Reason: "upstream failed", Failed: "upstream failed", Ended: at.Add(3 * time.Second)},
		{Slot: at.Add(10 * time.Second), Outcome: state.OutcomeFired, Launched: at.Add(11 * time.Second), Ended: at.Add(12 * time.Second)},
	}}
	if run, ok := dependencyRun(chain, at); !ok || run.Slot != at || run.Succeeded() {
		t.Fatalf("run %+v, %v; want the skipped run of the logical time, failed", run, ok)
	}
}

// A run succeeded only if every shard did: one that ended lost without a failover, or killed,
// fails the run in the fire ledger, so that the jobs depending on it (dependsOn) are skipped
// rather than run on top of it.
func TestARunSucceedsOnlyIfEveryShardDid(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		second  mesos.TaskState
		source  mesos.TaskStatus_Source
		success bool
	}{
		{"every shard finished", mesos.TASK_FINISHED, mesos.SOURCE_EXECUTOR, true},
		{"a shard lost without failover", mesos.TASK_LOST, mesos.SOURCE_MASTER, false},
		{"a shard killed", mesos.TASK_KILLED, mesos.SOURCE_EXECUTOR, false},
		{"a shard's infrastructure failure without failover", mesos.TASK_FAILED, mesos.SOURCE_EXECUTOR, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			base, jobs := burstJobs(t, ctx, 1, 2)
			ld := testLeader(benchModel(t, ctx, base), &ackRecorder{})
			ld.inst.ld = ld
			if err := ld.inst.Trigger(ctx, jobs[0]); err != nil {
				t.Fatal(err)
			}
			ld.cycle(ctx, burstOffers(0))
			running, err := base.RunningOf(ctx, jobs[0])
			if err != nil || len(running) != 2 {
				t.Fatalf("%d tasks running (%v); want 2", len(running), err)
			}
			first, _ := taskid.Parse(running[0].TaskID)
			second, _ := taskid.Parse(running[1].TaskID)
			end := upd(second, tc.second, "u2")
			end.Source = tc.source.Enum()
			ld.updates(ctx, []mesos.TaskStatus{upd(first, mesos.TASK_FINISHED, "u1"), end})
			led, _, err := base.FireLedger(ctx, jobs[0])
			if err != nil || len(led.Fires) != 1 {
				t.Fatalf("ledger %+v (%v); want the triggered run", led.Fires, err)
			}
			if run := led.Fires[0]; run.Ended.IsZero() || run.Succeeded() != tc.success {
				t.Fatalf("run %+v: ended %v, succeeded %v; want ended, succeeded %v", run, !run.Ended.IsZero(), run.Succeeded(), tc.success)
			}
		})
	}
}

// A skip's reason quotes its dependency's failure, but not one that is itself an upstream
// failure: down a chain a → b → c, reasons stay one level deep.
func TestUpstreamFailedReasonsDoNotNest(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 24, 10, 0, 0, 0, time.UTC)
	b := upstreamFailed("a", at, "retries exhausted after 3 attempts")
	if b != `upstream failed: "a"'s run of 2026-11-24T10:00:00Z failed (retries exhausted after 3 attempts)` {
		t.Fatalf("b's reason %q", b)
	}
	if c := upstreamFailed("b", at, b); c != `upstream failed: "b"'s run of 2026-11-24T10:00:00Z failed` {
		t.Fatalf("c's reason %q; want b named, without b's own reason nested", c)
	}
}
