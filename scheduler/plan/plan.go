// Package plan holds the leader's decisions, apart from its I/O (issue 14): from a read-only
// snapshot of the model it decides what an offer cycle may launch and which queue entries are
// stale, and what a status update means. It reads no ZooKeeper, calls no Mesos and keeps no
// clock: the leader gathers the facts, asks, and then writes and calls.
//
//	leader: snapshot (model) → plan.Eligible → binpack.Pack → plan.Parts → write-ahead → ACCEPT
//	leader: update + facts (model) → plan.Meaning → EndTask (group commit) → ack
package plan

import (
	"maps"
	"slices"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/scheduler/binpack"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/taskid"
)

// Snapshot is what an offer cycle reads of the model.
type Snapshot struct {
	Ready     []state.ReadyEntry
	Failovers []state.FailoverEntry
	Running   []state.RunningEntry
	Jobs      map[string]config.Job // at least every job with an entry in Ready or Failovers
	// JobVersions are the config node versions Jobs were read at: a launch is written ahead
	// only if each is still current (state.Launch.Configs).
	JobVersions map[string]int32
	Apps        map[string]config.App
	OffApps     map[string]bool // disabled apps
	OffJobs     map[string]bool // disabled jobs
	Stopped     map[string]bool // jobs stopped for a failure relaunching cannot heal
}

// Work is what a cycle may launch: one binpack group per job, failover groups first.
type Work struct {
	Groups   []binpack.Group
	Jobs     []config.Job                     // per group
	Apps     map[string]config.App            // by name
	Ready    map[string]state.ReadyEntry      // by job, for READY groups
	Failover map[string][]state.FailoverEntry // by job, for FAILOVER groups
	Versions map[string]int32                 // by job: Snapshot.JobVersions
	// Entries whose job no longer exists: the leader removes them.
	StaleReady    []string
	StaleFailover []state.FailoverEntry
	// Beyond names the jobs with failover entries of shards at or beyond their
	// shardingTotalCount, which an update lowered: the leader drops them (state.DropBeyond).
	Beyond []string
	// Settled are the ready entries of DAEMON jobs whose every shard runs: nothing is left for
	// them to launch, and the leader removes them.
	Settled []state.ReadyEntry
}

// Eligible gathers a cycle's work (SPEC §5.4 step 1): failover items first (each once, not
// while its shard runs, not before due says its backoff ran out), then ready jobs with no
// running task and no failover item; disabled and stopped jobs, jobs of disabled or missing
// apps, and the entries of jobs that no longer exist are left out. A job with a failover item,
// launched now or backed off, holds its whole-job runs back. A job whose runs may overlap
// (concurrencyPolicy Allow) waits for none of its running tasks or failover items: only a
// shard's second failover entry waits for the next cycle, so that each relaunch replaces one
// failed task.
func Eligible(s Snapshot, due func(taskid.Meta) bool) Work {
	w := Work{Apps: s.Apps, Ready: map[string]state.ReadyEntry{}, Failover: map[string][]state.FailoverEntry{}, Versions: s.JobVersions}
	runningShard := map[taskid.Meta]bool{}
	runningJob := map[string]bool{}
	for _, r := range s.Running {
		runningShard[r.Meta] = true
		runningJob[r.Meta.JobName] = true
	}
	usable := func(name string) (config.Job, bool) {
		j, ok := s.Jobs[name]
		if !ok {
			return j, false
		}
		_, appOK := s.Apps[j.AppName]
		return j, appOK && !s.OffJobs[name] && !s.OffApps[j.AppName] && !s.Stopped[name]
	}
	failingJob := map[string]bool{}
	relaunching := map[taskid.Meta]bool{}
	for _, f := range s.Failovers {
		if _, exists := s.Jobs[f.Meta.JobName]; !exists {
			w.StaleFailover = append(w.StaleFailover, f)
			continue
		}
		j, ok := usable(f.Meta.JobName)
		overlap := j.ConcurrencyPolicy == config.Allow
		// A shard queued before an update lowered the job's shardingTotalCount no longer
		// exists: run with its old item, it would take a slice the others take. The leader
		// drops it (Beyond), and fails its run.
		if _, exists := s.Jobs[f.Meta.JobName]; exists && f.Meta.Item >= s.Jobs[f.Meta.JobName].ShardingTotalCount {
			if !slices.Contains(w.Beyond, f.Meta.JobName) {
				w.Beyond = append(w.Beyond, f.Meta.JobName)
			}
			continue
		}
		if !ok || (runningShard[f.Meta] && !overlap) {
			continue
		}
		if !overlap {
			failingJob[f.Meta.JobName] = true
		}
		if !due(f.Meta) || relaunching[f.Meta] {
			continue
		}
		relaunching[f.Meta] = true
		w.Failover[f.Meta.JobName] = append(w.Failover[f.Meta.JobName], f)
	}
	for _, name := range slices.Sorted(maps.Keys(w.Failover)) {
		j := s.Jobs[name]
		g := Group(j, s.Apps[j.AppName])
		for _, f := range w.Failover[name] {
			g.Items = append(g.Items, f.Meta.Item)
		}
		w.Groups, w.Jobs = append(w.Groups, g), append(w.Jobs, j)
	}
	for _, r := range s.Ready {
		if _, exists := s.Jobs[r.JobName]; !exists {
			w.StaleReady = append(w.StaleReady, r.JobName)
			continue
		}
		j, ok := usable(r.JobName)
		// A DAEMON job's shards run for ever, each on its own: its ready entry (a shard killed
		// while the others run, say, by an agent's shutdown) launches the shards not running,
		// rather than waiting for the others to end, which they never do.
		daemon := j.JobExecutionType == config.Daemon
		if !ok || (runningJob[r.JobName] && j.ConcurrencyPolicy != config.Allow && !daemon) || failingJob[r.JobName] {
			continue
		}
		g := Group(j, s.Apps[j.AppName])
		g.Integrity = true
		for i := 0; i < j.ShardingTotalCount; i++ {
			if !daemon || !runningShard[taskid.Meta{JobName: r.JobName, Item: i}] {
				g.Items = append(g.Items, i)
			}
		}
		if len(g.Items) == 0 {
			w.Settled = append(w.Settled, r) // a DAEMON job whose every shard runs
			continue
		}
		w.Ready[r.JobName] = r
		w.Groups, w.Jobs = append(w.Groups, g), append(w.Jobs, j)
	}
	return w
}

// Group is a job's binpack group, without its items.
func Group(j config.Job, app config.App) binpack.Group {
	return binpack.Group{Job: j.JobName, App: j.AppName, Total: j.ShardingTotalCount,
		Need: binpack.Resources{CPUs: j.CPUCount, MemMB: j.MemoryMB}, Executor: binpack.Resources{CPUs: app.CPUCount, MemMB: app.MemoryMB},
		Placement: j.Placement, Strategy: j.JobShardingStrategyType}
}

// Placement is one task to launch: its id (which names its agent) and its job.
type Placement struct {
	ID  taskid.ID
	Job config.Job
	App config.App
	// Replaces is, for a relaunch, the id of the failed task it replaces (the event trace's
	// originalTaskId).
	Replaces string
}

// Part is one job's share of a launch: its tasks and the queue entries they consume. A part
// is written ahead whole or not at all.
type Part struct {
	Launch state.Launch
	Tasks  []Placement
}

// Parts turns a placement into launch parts, one per job with a task placed. agents are the
// agents Pack was given.
func Parts(w Work, res binpack.Result, agents []binpack.Agent) []Part {
	var parts []Part
	for g, placed := range res.Placed {
		job := w.Jobs[g]
		group := w.Groups[g]
		kind := taskid.Ready
		if !group.Integrity {
			kind = taskid.Failover
		}
		// A READY launch is a new run; a relaunch stays in the run of the task it replaces
		// (one failover entry per item in a cycle), so that the fire ledger tells each run's
		// tasks whatever their number.
		run := taskid.NewRun()
		failed := map[int]string{} // failover: the failed task's id per item
		for _, f := range w.Failover[job.JobName] {
			failed[f.Meta.Item] = f.TaskID
		}
		var p Part
		for k, a := range placed {
			if a < 0 {
				continue
			}
			if !group.Integrity {
				run = taskid.RunIn(failed[group.Items[k]]) // "": a fresh one
			}
			id := taskid.NewInRun(taskid.Meta{JobName: job.JobName, Item: group.Items[k]}, kind, agents[a].ID, run)
			pl := Placement{ID: id, Job: job, App: w.Apps[job.AppName]}
			if !group.Integrity {
				pl.Replaces = failed[group.Items[k]]
			}
			p.Tasks = append(p.Tasks, pl)
			p.Launch.Tasks = append(p.Launch.Tasks, id)
		}
		if len(p.Tasks) == 0 {
			continue
		}
		if job.ConcurrencyPolicy == config.Allow {
			p.Launch.Overlapping = []string{job.JobName}
		}
		if v, ok := w.Versions[job.JobName]; ok {
			p.Launch.Configs = []state.JobAt{{JobName: job.JobName, Version: v}}
		}
		if group.Integrity {
			p.Launch.Ready = append(p.Launch.Ready, w.Ready[job.JobName])
		} else {
			for _, f := range w.Failover[job.JobName] {
				for k, a := range placed {
					if a >= 0 && group.Items[k] == f.Meta.Item {
						p.Launch.Failover = append(p.Launch.Failover, f)
					}
				}
			}
		}
		parts = append(parts, p)
	}
	return parts
}

// Chunks splits parts into write-ahead multis of whole parts of at most max tasks each (a part
// larger than max goes alone): ZooKeeper refuses a request over jute.maxbuffer (1 MB).
func Chunks(parts []Part, max int) [][]Part {
	var out [][]Part
	for len(parts) > 0 {
		n, tasks := 0, 0
		for n < len(parts) && (n == 0 || tasks+len(parts[n].Tasks) <= max) {
			tasks += len(parts[n].Tasks)
			n++
		}
		out = append(out, parts[:n])
		parts = parts[n:]
	}
	return out
}

// Unplaced sums, per job, why its shards found no room (the most agents that refused it for
// each reason).
func Unplaced(w Work, res binpack.Result) map[string]map[string]int {
	reasons := map[string]map[string]int{}
	for _, u := range res.Unplaced {
		job := w.Jobs[u.Group].JobName
		if reasons[job] == nil {
			reasons[job] = map[string]int{}
		}
		for r, n := range u.Reasons {
			reasons[job][r] = max(reasons[job][r], n)
		}
	}
	return reasons
}
