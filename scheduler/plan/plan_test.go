package plan

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/scheduler/binpack"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/taskid"
)

func job(name string, shards int) config.Job {
	return config.Job{JobName: name, AppName: "app", JobExecutionType: config.Transient, ShardingTotalCount: shards,
		CPUCount: 1, MemoryMB: 64, Placement: config.Binpack, JobShardingStrategyType: config.AvgAllocation}
}

func meta(job string, item int) taskid.Meta { return taskid.Meta{JobName: job, Item: item} }

// groups renders a Work's groups as "job:items" ("*" marks a READY, whole-job group).
func groups(w Work) []string {
	var out []string
	for _, g := range w.Groups {
		mark := ""
		if g.Integrity {
			mark = "*"
		}
		out = append(out, fmt.Sprintf("%s%s:%v", g.Job, mark, g.Items))
	}
	return out
}

func TestEligible(t *testing.T) {
	apps := map[string]config.App{"app": {AppName: "app", CPUCount: 0.5, MemoryMB: 32}}
	jobs := map[string]config.Job{"a": job("a", 2), "b": job("b", 3), "c": job("c", 1), "o": job("o", 2), "d": job("d", 3)}
	d := jobs["d"]
	d.JobExecutionType = config.Daemon
	jobs["d"] = d
	o := jobs["o"]
	o.ConcurrencyPolicy, o.ShardsIndependent = config.Allow, true
	jobs["o"] = o
	ready := func(names ...string) []state.ReadyEntry {
		var out []state.ReadyEntry
		for _, n := range names {
			out = append(out, state.ReadyEntry{JobName: n, Count: 1})
		}
		return out
	}
	fo := func(ms ...taskid.Meta) []state.FailoverEntry {
		var out []state.FailoverEntry
		for _, m := range ms {
			out = append(out, state.FailoverEntry{Meta: m})
		}
		return out
	}
	always := func(taskid.Meta) bool { return true }
	for _, tc := range []struct {
		name          string
		snap          Snapshot
		due           func(taskid.Meta) bool
		want          []string
		staleReady    []string
		staleFailover []state.FailoverEntry
		beyond        []string
		settled       []state.ReadyEntry
	}{
		{name: "ready jobs launch whole", snap: Snapshot{Ready: ready("a", "b")}, want: []string{"a*:[0 1]", "b*:[0 1 2]"}},
		{name: "failover items first, then ready", snap: Snapshot{Ready: ready("a"), Failovers: fo(meta("b", 2), meta("b", 0))},
			want: []string{"b:[2 0]", "a*:[0 1]"}},
		{name: "a job with a failover item holds its whole-job run back", snap: Snapshot{Ready: ready("b"), Failovers: fo(meta("b", 1))},
			want: []string{"b:[1]"}},
		{name: "a backed-off item stays queued and still holds the run back", snap: Snapshot{Ready: ready("b", "a"), Failovers: fo(meta("b", 1))},
			due: func(taskid.Meta) bool { return false }, want: []string{"a*:[0 1]"}},
		{name: "a job with a running task does not run again", snap: Snapshot{Ready: ready("a", "b"),
			Running: []state.RunningEntry{{Meta: meta("a", 1)}}}, want: []string{"b*:[0 1 2]"}},
		{name: "a failover item whose shard runs waits", snap: Snapshot{Failovers: fo(meta("b", 1), meta("b", 2)),
			Running: []state.RunningEntry{{Meta: meta("b", 1)}}}, want: []string{"b:[2]"}},
		{name: "an Allow job runs again while it runs", snap: Snapshot{Ready: ready("o"), Running: []state.RunningEntry{{Meta: meta("o", 1)}}},
			want: []string{"o*:[0 1]"}},
		{name: "an Allow job's shard is relaunched while it runs, once per cycle; its runs do not wait for relaunches",
			snap: Snapshot{Ready: ready("o"), Failovers: fo(meta("o", 1), meta("o", 1), meta("o", 0)), Running: []state.RunningEntry{{Meta: meta("o", 1)}}},
			want: []string{"o:[1 0]", "o*:[0 1]"}},
		{name: "disabled job, disabled app and stopped job are left out",
			snap: Snapshot{Ready: ready("a", "b", "c"), OffJobs: map[string]bool{"a": true}, Stopped: map[string]bool{"c": true}},
			want: []string{"b*:[0 1 2]"}},
		{name: "a disabled app leaves all its jobs out", snap: Snapshot{Ready: ready("a", "b"), OffApps: map[string]bool{"app": true}}},
		{name: "a failover item beyond the job's shardingTotalCount (lowered since) is not relaunched, but dropped",
			snap: Snapshot{Failovers: fo(meta("b", 3), meta("b", 1))}, want: []string{"b:[1]"}, beyond: []string{"b"}},
		{name: "a DAEMON job's ready entry launches the shards not running, the others running on",
			snap: Snapshot{Ready: ready("d"), Running: []state.RunningEntry{{Meta: meta("d", 1)}}}, want: []string{"d*:[0 2]"}},
		{name: "a DAEMON job whose shards all run launches nothing, its ready entry settled",
			snap:    Snapshot{Ready: ready("d"), Running: []state.RunningEntry{{Meta: meta("d", 0)}, {Meta: meta("d", 1)}, {Meta: meta("d", 2)}}},
			settled: ready("d")},
		{name: "entries of deleted jobs are stale", snap: Snapshot{Ready: ready("gone", "a"), Failovers: fo(meta("gone", 3))},
			want: []string{"a*:[0 1]"}, staleReady: []string{"gone"}, staleFailover: fo(meta("gone", 3))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.snap.Jobs == nil {
				tc.snap.Jobs = jobs
			}
			if tc.snap.Apps == nil {
				tc.snap.Apps = apps
			}
			due := tc.due
			if due == nil {
				due = always
			}
			w := Eligible(tc.snap, due)
			if got := groups(w); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("groups = %v; want %v", got, tc.want)
			}
			if !reflect.DeepEqual(w.Beyond, tc.beyond) || !reflect.DeepEqual(w.Settled, tc.settled) {
				t.Errorf("beyond = %v, settled = %v; want %v, %v", w.Beyond, w.Settled, tc.beyond, tc.settled)
			}
			if !reflect.DeepEqual(w.StaleReady, tc.staleReady) || !reflect.DeepEqual(w.StaleFailover, tc.staleFailover) {
				t.Errorf("stale = %v, %v; want %v, %v", w.StaleReady, w.StaleFailover, tc.staleReady, tc.staleFailover)
			}
			for i, g := range w.Groups {
				if g.Executor != (binpack.Resources{CPUs: 0.5, MemMB: 32}) || g.Need != (binpack.Resources{CPUs: 1, MemMB: 64}) || w.Jobs[i].JobName != g.Job {
					t.Errorf("group %d = %+v (job %s); want the job's and app's resources", i, g, w.Jobs[i].JobName)
				}
			}
		})
	}
}

func TestPartsAndChunks(t *testing.T) {
	failed := taskid.NewInRun(meta("b", 2), taskid.Ready, "S0", taskid.NewRun())
	snap := Snapshot{
		Jobs:        map[string]config.Job{"a": job("a", 2), "b": job("b", 3)},
		JobVersions: map[string]int32{"a": 3, "b": 9},
		Apps:        map[string]config.App{"app": {AppName: "app"}},
		Ready:       []state.ReadyEntry{{JobName: "a", Count: 2, Version: 7}},
		Failovers:   []state.FailoverEntry{{Meta: meta("b", 0), Version: 1}, {Meta: meta("b", 2), TaskID: failed.String(), Version: 4}},
	}
	w := Eligible(snap, func(taskid.Meta) bool { return true })
	agents := []binpack.Agent{{ID: "S0"}, {ID: "S1"}}
	// b's item 0 found no room; item 2 and both of a's shards did.
	res := binpack.Result{Placed: [][]int{{-1, 1}, {0, 1}}, Unplaced: []binpack.Unplaced{{Group: 0, Reasons: map[string]int{"cpu": 2}}}}
	parts := Parts(w, res, agents)
	if len(parts) != 2 {
		t.Fatalf("parts = %+v; want one per job", parts)
	}
	b, a := parts[0], parts[1]
	if len(b.Tasks) != 1 || b.Tasks[0].ID.Meta != meta("b", 2) || b.Tasks[0].ID.Type != taskid.Failover || b.Tasks[0].ID.AgentID != "S1" {
		t.Errorf("b's tasks = %+v; want item 2 as FAILOVER on S1", b.Tasks)
	}
	if b.Tasks[0].Replaces != failed.String() || a.Tasks[0].Replaces != "" {
		t.Errorf("b's relaunch replaces %q, a's task %q; want the failed task, and nothing", b.Tasks[0].Replaces, a.Tasks[0].Replaces)
	}
	if b.Tasks[0].ID.Run() != failed.Run() {
		t.Errorf("b's relaunch is of run %q; want the failed task's, %q", b.Tasks[0].ID.Run(), failed.Run())
	}
	if !reflect.DeepEqual(b.Launch.Failover, []state.FailoverEntry{{Meta: meta("b", 2), TaskID: failed.String(), Version: 4}}) || b.Launch.Ready != nil {
		t.Errorf("b consumes %+v / %+v; want only the failover entry of item 2, at its version", b.Launch.Failover, b.Launch.Ready)
	}
	if len(a.Tasks) != 2 || a.Tasks[0].ID.Type != taskid.Ready || a.Tasks[0].ID.AgentID != "S0" || a.Tasks[1].ID.AgentID != "S1" {
		t.Errorf("a's tasks = %+v; want both shards as READY on S0 and S1", a.Tasks)
	}
	if run := a.Tasks[0].ID.Run(); run == "" || a.Tasks[1].ID.Run() != run || run == failed.Run() {
		t.Errorf("a's tasks are of runs %q and %q; want one new run, not b's %q", run, a.Tasks[1].ID.Run(), failed.Run())
	}
	if !reflect.DeepEqual(a.Launch.Ready, []state.ReadyEntry{{JobName: "a", Count: 2, Version: 7}}) {
		t.Errorf("a consumes %+v; want its ready entry as read", a.Launch.Ready)
	}
	if !reflect.DeepEqual(a.Launch.Configs, []state.JobAt{{JobName: "a", Version: 3}}) || !reflect.DeepEqual(b.Launch.Configs, []state.JobAt{{JobName: "b", Version: 9}}) {
		t.Errorf("configs checked: a %+v, b %+v; want each job's as read (3, 9)", a.Launch.Configs, b.Launch.Configs)
	}
	if u := Unplaced(w, res); !reflect.DeepEqual(u, map[string]map[string]int{"b": {"cpu": 2}}) {
		t.Errorf("unplaced = %v", u)
	}
	for _, tc := range []struct {
		sizes []int
		max   int
		want  [][]int
	}{
		{sizes: []int{1, 2, 3}, max: 3, want: [][]int{{1, 2}, {3}}},
		{sizes: []int{5, 1}, max: 3, want: [][]int{{5}, {1}}}, // a part larger than max goes alone, whole
		{sizes: []int{1, 1, 1}, max: 10, want: [][]int{{1, 1, 1}}},
		{sizes: nil, max: 10, want: nil},
	} {
		var ps []Part
		for _, n := range tc.sizes {
			ps = append(ps, Part{Tasks: make([]Placement, n)})
		}
		var got [][]int
		for _, c := range Chunks(ps, tc.max) {
			var sizes []int
			for _, p := range c {
				sizes = append(sizes, len(p.Tasks))
			}
			got = append(got, sizes)
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("Chunks(%v, %d) = %v; want %v", tc.sizes, tc.max, got, tc.want)
		}
	}
}

func TestDecide(t *testing.T) {
	transient := job("t", 1)
	failover := job("f", 1)
	failover.Failover = true
	daemon := job("d", 1)
	daemon.JobExecutionType = config.Daemon
	for _, tc := range []struct {
		name string
		f    Facts
		want Meaning
	}{
		{"staging is heard", Facts{State: mesos.TASK_STAGING}, Meaning{Kind: Heard}},
		{"starting is heard", Facts{State: mesos.TASK_STARTING}, Meaning{Kind: Heard}},
		{"killing is heard", Facts{State: mesos.TASK_KILLING}, Meaning{Kind: Heard}},
		{"unreachable", Facts{State: mesos.TASK_UNREACHABLE}, Meaning{Kind: Unreachable}},
		{"the shard's running task runs", Facts{State: mesos.TASK_RUNNING, Job: transient, Current: true}, Meaning{Kind: Running}},
		{"a task that is not the shard's is killed", Facts{State: mesos.TASK_RUNNING, Job: transient}, Meaning{Kind: Kill}},
		{"a task of a deleted job is killed", Facts{State: mesos.TASK_RUNNING, JobGone: true, Current: true}, Meaning{Kind: Kill}},
		{"a task of a disabled job is killed", Facts{State: mesos.TASK_RUNNING, Job: transient, Disabled: true, Current: true}, Meaning{Kind: Kill}},
		{"a task an update restarted is killed", Facts{State: mesos.TASK_RUNNING, Job: transient, Current: true, Restarted: true}, Meaning{Kind: Kill}},
		{"finished ends", Facts{State: mesos.TASK_FINISHED}, Meaning{Kind: End}},
		{"the job's own failure ends without relaunch", Facts{State: mesos.TASK_FAILED, JobFailed: true, Job: failover}, Meaning{Kind: End}},
		{"an infrastructure failure without failover", Facts{State: mesos.TASK_FAILED, Job: transient}, Meaning{Kind: End, Failed: true}},
		{"an infrastructure failure with failover relaunches", Facts{State: mesos.TASK_LOST, Job: failover}, Meaning{Kind: End, Follow: state.Failover, Failed: true}},
		{"a daemon's lost task relaunches", Facts{State: mesos.TASK_GONE, Job: daemon}, Meaning{Kind: End, Follow: state.Failover, Failed: true}},
		{"a disabled job's failure does not relaunch", Facts{State: mesos.TASK_ERROR, Job: failover, Disabled: true}, Meaning{Kind: End, Failed: true}},
		{"a deleted job's failure is no failure", Facts{State: mesos.TASK_DROPPED, JobGone: true}, Meaning{Kind: End}},
		{"a task that never ran is queued again without failover", Facts{State: mesos.TASK_DROPPED, Job: transient, NeverRan: true}, Meaning{Kind: End, Follow: state.Failover, Failed: true}},
		{"a dropped task that may have run is not, without failover", Facts{State: mesos.TASK_DROPPED, Job: transient}, Meaning{Kind: End, Failed: true}},
		{"a task that never ran, of a disabled job, is not", Facts{State: mesos.TASK_DROPPED, Job: transient, NeverRan: true, Disabled: true}, Meaning{Kind: End, Failed: true}},
		{"a killed daemon runs again", Facts{State: mesos.TASK_KILLED, Job: daemon}, Meaning{Kind: End, Follow: state.Rerun}},
		{"a killed disabled daemon does not", Facts{State: mesos.TASK_KILLED, Job: daemon, Disabled: true}, Meaning{Kind: End}},
		{"a killed transient task just ends", Facts{State: mesos.TASK_KILLED, Job: failover}, Meaning{Kind: End}},
		{"a lost shard beyond the lowered total is not relaunched", Facts{State: mesos.TASK_LOST, Job: failover, Item: 1}, Meaning{Kind: End, Failed: true}},
		{"a killed daemon shard beyond the lowered total does not run again", Facts{State: mesos.TASK_KILLED, Job: daemon, Item: 1}, Meaning{Kind: End}},
		{"a replaced run's lost task is not relaunched", Facts{State: mesos.TASK_LOST, Job: failover, Replaced: true}, Meaning{Kind: End, Failed: true}},
		{"a replaced run's task reported running is killed", Facts{State: mesos.TASK_RUNNING, Job: failover, Current: true, Replaced: true}, Meaning{Kind: Kill}},
		{"a running shard beyond the lowered total is killed", Facts{State: mesos.TASK_RUNNING, Job: daemon, Current: true, Item: 1}, Meaning{Kind: Kill}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Decide(tc.f); got != tc.want {
				t.Errorf("Decide(%+v) = %+v; want %+v", tc.f, got, tc.want)
			}
		})
	}
}

func TestNeedsJob(t *testing.T) {
	for s, want := range map[mesos.TaskState]bool{mesos.TASK_STAGING: false, mesos.TASK_UNREACHABLE: false, mesos.TASK_FINISHED: false,
		mesos.TASK_RUNNING: true, mesos.TASK_KILLED: true, mesos.TASK_LOST: true, mesos.TASK_FAILED: true} {
		if got := NeedsJob(s, false); got != want {
			t.Errorf("NeedsJob(%v) = %v; want %v", s, got, want)
		}
	}
	if NeedsJob(mesos.TASK_FAILED, true) {
		t.Error("a job's own failure needs no read of the job")
	}
}

func TestNeverRan(t *testing.T) {
	for _, c := range []struct {
		state  mesos.TaskState
		reason mesos.TaskStatus_Reason
		want   bool
	}{
		{mesos.TASK_DROPPED, mesos.REASON_INVALID_OFFERS, true},
		{mesos.TASK_DROPPED, mesos.REASON_EXECUTOR_TERMINATED, true},
		{mesos.TASK_DROPPED, mesos.REASON_AGENT_RESTARTED, true},
		{mesos.TASK_DROPPED, mesos.REASON_RESOURCES_UNKNOWN, true},
		{mesos.TASK_DROPPED, mesos.REASON_RECONCILIATION, false}, // an agent that no longer reports it: it may have run
		{mesos.TASK_DROPPED, mesos.REASON_AGENT_REMOVED, false},
		{mesos.TASK_LOST, mesos.REASON_INVALID_OFFERS, false}, // only a partition-aware framework's DROPPED says so
	} {
		st := mesos.TaskStatus{State: c.state.Enum(), Reason: c.reason.Enum()}
		if got := NeverRan(st); got != c.want {
			t.Errorf("NeverRan(%v, %v) = %v; want %v", c.state, c.reason, got, c.want)
		}
	}
}

func TestDecideRetry(t *testing.T) {
	retrying := config.Job{JobName: "j", JobExecutionType: config.Transient, Retry: &config.Retry{MaxAttempts: 3, Backoff: 2, MaxBackoff: 3}}
	cases := []struct {
		name string
		f    RetryFacts
		want RetryDecision
	}{
		{"no retry configured: failed at once", RetryFacts{Job: config.Job{JobExecutionType: config.Transient}, Attempt: 1}, RetryDecision{Failed: true, Attempts: 1}},
		{"first failure: retry after the backoff", RetryFacts{Job: retrying, Attempt: 1}, RetryDecision{Retry: true, Next: 2, Delay: 2 * time.Second}},
		{"second failure: the backoff doubles, bounded", RetryFacts{Job: retrying, Attempt: 2}, RetryDecision{Retry: true, Next: 3, Delay: 3 * time.Second}},
		{"last attempt failed", RetryFacts{Job: retrying, Attempt: 3}, RetryDecision{Failed: true, Attempts: 3}},
		{"a disabled job is not retried", RetryFacts{Job: retrying, Attempt: 1, Disabled: true}, RetryDecision{Failed: true, Attempts: 1}},
		{"a deleted job: nothing", RetryFacts{Job: retrying, Attempt: 1, JobGone: true}, RetryDecision{}},
	}
	for _, c := range cases {
		if got := DecideRetry(c.f); got != c.want {
			t.Errorf("%s: %+v; want %+v", c.name, got, c.want)
		}
	}
}
