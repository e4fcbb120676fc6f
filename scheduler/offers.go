package scheduler

import (
	"context"
	"sort"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"
	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/scheduler/binpack"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/taskid"
)

// refuseSeconds is the filter on declined offers (SPEC §5.4 step 5).
const refuseSeconds = 5

// maxLaunchTasks bounds one write-ahead multi (a task node is ~150 bytes of request).
const maxLaunchTasks = 2000

// work is what the cycle may launch.
type work struct {
	groups   []binpack.Group
	jobs     []config.Job // per group
	apps     map[string]config.App
	ready    map[string]state.ReadyEntry      // by job, for READY groups
	failover map[string][]state.FailoverEntry // by job, for FAILOVER groups
}

// cycle is the offer cycle of SPEC §5.4: eligible work, placement, the write-ahead multi,
// ACCEPT per agent and DECLINE of everything else. No offer outlives the cycle.
func (ld *leader) cycle(ctx context.Context, offers []mesos.Offer) {
	w, err := ld.eligible(ctx)
	if err != nil {
		ld.log.WithError(err).Warn("cannot read the queues; declining the offers")
		ld.decline(ctx, offers)
		return
	}
	ld.log.WithFields(logrus.Fields{"offers": len(offers), "groups": len(w.groups)}).Debug("offer cycle")
	if len(w.groups) == 0 {
		ld.decline(ctx, offers)
		if !ld.suppressed {
			ld.call(ctx, calls.Suppress())
			ld.suppressed = true
		}
		return
	}
	agents, byAgent := agentsOf(offers)
	res := binpack.Pack(w.groups, agents)
	ld.recordUnplaced(w, res)

	// Each job's part of the launch: its tasks and the queue entries they consume.
	type part struct {
		launch state.Launch
		tasks  map[string][]mesos.TaskInfo // by agent
	}
	var parts []part
	for g, placed := range res.Placed {
		job := w.jobs[g]
		group := w.groups[g]
		kind := taskid.Ready
		if !group.Integrity {
			kind = taskid.Failover
		}
		p := part{tasks: map[string][]mesos.TaskInfo{}}
		for k, a := range placed {
			if a < 0 {
				continue
			}
			agent := agents[a]
			like := byAgent[agent.ID][0].Resources
			id := taskid.New(taskid.Meta{JobName: job.JobName, Item: group.Items[k]}, kind, agent.ID)
			exec := ld.executorFor(w.apps[job.AppName], agent.ID, like)
			p.tasks[agent.ID] = append(p.tasks[agent.ID], taskInfo(id, job, exec, like))
			p.launch.Tasks = append(p.launch.Tasks, id)
		}
		if len(p.launch.Tasks) == 0 {
			continue
		}
		if group.Integrity {
			p.launch.Ready = append(p.launch.Ready, w.ready[job.JobName])
		} else {
			for _, f := range w.failover[job.JobName] {
				for k, a := range placed {
					if a >= 0 && group.Items[k] == f.Meta.Item {
						p.launch.Failover = append(p.launch.Failover, f)
					}
				}
			}
		}
		parts = append(parts, p)
	}
	// The write-ahead goes in multis of whole jobs, each below ZooKeeper's request limit
	// (jute.maxbuffer, 1 MB: about 5,000 task nodes); a burst larger than one multi would
	// otherwise never launch. A job whose multi fails is not launched this cycle.
	tasks := map[string][]mesos.TaskInfo{} // by agent
	for len(parts) > 0 {
		var chunk state.Launch
		n := 0
		for n < len(parts) && (n == 0 || len(chunk.Tasks)+len(parts[n].launch.Tasks) <= maxLaunchTasks) {
			l := parts[n].launch
			chunk.Tasks = append(chunk.Tasks, l.Tasks...)
			chunk.Ready = append(chunk.Ready, l.Ready...)
			chunk.Failover = append(chunk.Failover, l.Failover...)
			n++
		}
		if err := ld.store.RecordLaunch(ctx, chunk); err != nil {
			ld.log.WithError(err).WithField("tasks", len(chunk.Tasks)).Warn("write-ahead of a launch failed; those tasks are not launched this cycle")
		} else {
			for _, p := range parts[:n] {
				for agentID, ts := range p.tasks {
					tasks[agentID] = append(tasks[agentID], ts...)
				}
			}
		}
		parts = parts[n:]
	}
	if len(tasks) == 0 {
		ld.decline(ctx, offers)
		return
	}
	for agentID, ts := range tasks {
		ids := make([]mesos.OfferID, 0, len(byAgent[agentID]))
		for _, o := range byAgent[agentID] {
			ids = append(ids, o.ID)
		}
		for _, t := range ts {
			ld.executors[t.Executor.ExecutorID.Value] = *t.Executor
			ld.stale.heardOf(t.TaskID.Value, false, time.Now())
		}
		ld.call(ctx, calls.Accept(calls.OfferOperations{calls.OpLaunch(ts...)}.WithOffers(ids...)).With(calls.RefuseSeconds(refuseSeconds*1e9)))
		ld.log.WithFields(logrus.Fields{"agent": agentID, "tasks": len(ts)}).Info("launched")
		ld.inst.metrics.add(func(m *metrics) { m.launched += len(ts) })
	}
	var unused []mesos.Offer
	for agentID, os := range byAgent {
		if len(tasks[agentID]) == 0 {
			unused = append(unused, os...)
		}
	}
	ld.decline(ctx, unused)
}

func (ld *leader) decline(ctx context.Context, offers []mesos.Offer) {
	if len(offers) == 0 {
		return
	}
	ids := make([]mesos.OfferID, len(offers))
	for i, o := range offers {
		ids[i] = o.ID
	}
	ld.call(ctx, calls.Decline(ids...).With(calls.RefuseSeconds(refuseSeconds*1e9)))
	ld.inst.metrics.add(func(m *metrics) { m.declined += len(ids) })
}

// executorFor returns the ExecutorInfo for an app on an agent: the one already running there,
// byte for byte (Mesos refuses any other), else one built from the app's current config.
func (ld *leader) executorFor(app config.App, agentID string, like []mesos.Resource) mesos.ExecutorInfo {
	id := taskid.Executor{AppName: app.AppName, AgentID: agentID}.String()
	if e, ok := ld.executors[id]; ok {
		return e
	}
	return executorInfo(ld.sub.frameworkID, app, agentID, like)
}

// agentsOf sums the offers per agent for the packer.
func agentsOf(offers []mesos.Offer) ([]binpack.Agent, map[string][]mesos.Offer) {
	byAgent := map[string][]mesos.Offer{}
	for _, o := range offers {
		byAgent[o.AgentID.Value] = append(byAgent[o.AgentID.Value], o)
	}
	ids := make([]string, 0, len(byAgent))
	for id := range byAgent {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	agents := make([]binpack.Agent, 0, len(ids))
	for _, id := range ids {
		a := binpack.Agent{ID: id, Hostname: byAgent[id][0].Hostname, Executors: map[string]bool{}}
		for _, o := range byAgent[id] {
			for _, r := range o.Resources {
				if r.Scalar == nil {
					continue
				}
				switch r.Name {
				case "cpus":
					a.Free.CPUs += r.Scalar.Value
				case "mem":
					a.Free.MemMB += r.Scalar.Value
				}
			}
			for _, e := range o.ExecutorIDs {
				if ex, err := taskid.ParseExecutor(e.Value); err == nil {
					a.Executors[ex.AppName] = true
				}
			}
		}
		agents = append(agents, a)
	}
	return agents, byAgent
}

// eligible gathers the cycle's work (SPEC §5.4 step 1): failover items first (each once,
// not while the shard runs, not before its backoff ran out), then ready jobs with no running
// task and no failover item; disabled and stopped jobs and disabled apps are skipped, and the
// entries of jobs that no longer exist are removed.
func (ld *leader) eligible(ctx context.Context) (work, error) {
	w := work{apps: map[string]config.App{}, ready: map[string]state.ReadyEntry{}, failover: map[string][]state.FailoverEntry{}}
	// The queues are read before the jobs: an entry is written only for a job that exists, so
	// every entry's job is in the later job list unless it was really deleted. Read the other
	// way round, a job registered and triggered in between would look deleted, and its entry
	// would be removed.
	ready, err := ld.store.Ready(ctx)
	if err != nil {
		return w, err
	}
	fos, err := ld.store.Failovers(ctx)
	if err != nil {
		return w, err
	}
	if len(ready) == 0 && len(fos) == 0 {
		return w, nil
	}
	// Only the jobs with work queued: reading every job each cycle made ZooKeeper the
	// bottleneck of a busy scheduler (the soak: 200 jobs, ~20 cycles a second).
	queued := map[string]bool{}
	for _, r := range ready {
		queued[r.JobName] = true
	}
	for _, f := range fos {
		queued[f.Meta.JobName] = true
	}
	byName, err := ld.store.JobsNamed(ctx, sortedKeys(queued))
	if err != nil {
		return w, err
	}
	apps, err := ld.store.Apps(ctx)
	if err != nil {
		return w, err
	}
	for _, a := range apps {
		w.apps[a.AppName] = a
	}
	offApps, offJobs, err := ld.store.Disabled(ctx)
	if err != nil {
		return w, err
	}
	stopped, err := ld.store.StoppedJobs(ctx)
	if err != nil {
		return w, err
	}
	running, err := ld.store.Running(ctx)
	if err != nil {
		return w, err
	}
	runningShard := map[taskid.Meta]bool{}
	runningJob := map[string]bool{}
	for _, r := range running {
		runningShard[r.Meta] = true
		runningJob[r.Meta.JobName] = true
	}
	usable := func(name string) (config.Job, bool) {
		j, ok := byName[name]
		if !ok {
			return j, false
		}
		_, appOK := w.apps[j.AppName]
		return j, appOK && !offJobs[name] && !offApps[j.AppName] && !stopped[name]
	}
	now := time.Now()
	failingJob := map[string]bool{} // jobs with a failover item, launched now or backed off
	for _, f := range fos {
		if _, exists := byName[f.Meta.JobName]; !exists {
			ld.store.RemoveFailover(ctx, f.Meta)
			continue
		}
		if _, ok := usable(f.Meta.JobName); !ok || runningShard[f.Meta] {
			continue
		}
		// A backed-off item stays queued, and holds its job's whole-job runs back with it.
		failingJob[f.Meta.JobName] = true
		if !ld.relaunch.due(f.Meta, now) {
			continue
		}
		w.failover[f.Meta.JobName] = append(w.failover[f.Meta.JobName], f)
	}
	for _, name := range sortedKeys(w.failover) {
		j := byName[name]
		g := ld.group(j, w.apps[j.AppName])
		for _, f := range w.failover[name] {
			g.Items = append(g.Items, f.Meta.Item)
		}
		w.groups, w.jobs = append(w.groups, g), append(w.jobs, j)
	}
	for _, r := range ready {
		if _, exists := byName[r.JobName]; !exists {
			ld.store.RemoveReady(ctx, r.JobName)
			continue
		}
		j, ok := usable(r.JobName)
		if !ok || runningJob[r.JobName] || failingJob[r.JobName] {
			continue
		}
		g := ld.group(j, w.apps[j.AppName])
		g.Integrity = true
		for i := 0; i < j.ShardingTotalCount; i++ {
			g.Items = append(g.Items, i)
		}
		w.ready[r.JobName] = r
		w.groups, w.jobs = append(w.groups, g), append(w.jobs, j)
	}
	return w, nil
}

func (ld *leader) group(j config.Job, app config.App) binpack.Group {
	return binpack.Group{Job: j.JobName, App: j.AppName, Total: j.ShardingTotalCount,
		Need: binpack.Resources{CPUs: j.CPUCount, MemMB: j.MemoryMB}, Executor: binpack.Resources{CPUs: app.CPUCount, MemMB: app.MemoryMB},
		Placement: j.Placement, Strategy: j.JobShardingStrategyType}
}

// recordUnplaced keeps, per job, why its shards found no room, for the API and console.
func (ld *leader) recordUnplaced(w work, res binpack.Result) {
	reasons := map[string]map[string]int{}
	for _, u := range res.Unplaced {
		job := w.jobs[u.Group].JobName
		if reasons[job] == nil {
			reasons[job] = map[string]int{}
		}
		for r, n := range u.Reasons {
			reasons[job][r] = max(reasons[job][r], n)
		}
	}
	ld.mu.Lock()
	ld.unplaced = reasons
	ld.mu.Unlock()
	ld.inst.metrics.add(func(m *metrics) {
		for _, u := range res.Unplaced {
			for r := range u.Reasons {
				m.unplaced[r]++
			}
		}
	})
	for job, r := range reasons {
		ld.log.WithFields(logrus.Fields{"job": job, "reasons": r}).Info("shards not placed this cycle")
	}
}

// Unplaced returns, per job, why its shards were not placed in the last cycle.
func (s *instance) Unplaced() map[string]map[string]int {
	s.mu.Lock()
	ld := s.ld
	s.mu.Unlock()
	if ld == nil {
		return nil
	}
	ld.mu.Lock()
	defer ld.mu.Unlock()
	out := map[string]map[string]int{}
	for k, v := range ld.unplaced {
		out[k] = v
	}
	return out
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
