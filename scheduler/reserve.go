package scheduler

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/scheduler/binpack"
	"github.com/ejcloud/ejcloud/scheduler/plan"
	"github.com/ejcloud/ejcloud/taskid"
)

// starving remembers since when each READY run has been left out for want of resources, so
// that one left out for --reserve-after goes first (plan.Reserve). Owned by the event loop.
type starving struct {
	since map[string]time.Time // by job
	job   string               // the run the last cycle reserved for, and the agents it held
	held  []string
}

// reserveTries bounds the runs one cycle tries to reserve for, the longest left out first:
// one that nothing could make room for (too large for any agent) must not keep the next from
// its turn, and each try packs twice more.
const reserveTries = 3

// pack places the cycle's work: binpack.Pack, unless READY runs have been left out for
// --reserve-after, when the one left out longest that can be helped goes first (plan.Reserve).
func (ld *leader) pack(ctx context.Context, w plan.Work, agents []binpack.Agent, now time.Time) binpack.Result {
	var res binpack.Result
	first, reserved := -1, false
	var held []string
	if starved := ld.longestStarved(w, now); len(starved) > 0 {
		freeable, err := ld.freeable(ctx)
		if err != nil {
			ld.log.WithError(err).Warn("cannot read what the running tasks hold; no agent is held this cycle")
			starved = nil
		}
		for _, g := range starved[:min(len(starved), reserveTries)] {
			if res, held, reserved = plan.Reserve(w.Groups, g, agents, freeable); reserved {
				first = g
				break
			}
		}
	}
	if !reserved {
		res = binpack.Pack(w.Groups, agents)
	}
	ld.noteReservation(w, first, reserved, held)
	ld.noteStarving(w, res, now)
	return res
}

// longestStarved returns the indexes in w.Groups of the READY runs left out for
// --reserve-after or longer, the longest first.
func (ld *leader) longestStarved(w plan.Work, now time.Time) []int {
	if ld.cfg.ReserveAfter <= 0 {
		return nil
	}
	var out []int
	for g, grp := range w.Groups {
		since, ok := ld.starving.since[w.Jobs[g].JobName]
		if grp.Integrity && ok && now.Sub(since) >= ld.cfg.ReserveAfter {
			out = append(out, g)
		}
	}
	slices.SortStableFunc(out, func(a, b int) int {
		return ld.starving.since[w.Jobs[a].JobName].Compare(ld.starving.since[w.Jobs[b].JobName])
	})
	return out
}

// noteStarving starts the clock of each READY run res leaves out for want of resources (cpu,
// memory, every shard not fitting, or agents held for another), and stops that of every other:
// placed, gone from the queue, or waiting for something else. A run that found no offers at
// all keeps its clock as it is: nothing was taken from it.
func (ld *leader) noteStarving(w plan.Work, res binpack.Result, now time.Time) {
	if ld.starving.since == nil {
		ld.starving.since = map[string]time.Time{}
	}
	left := map[int]map[string]int{}
	for _, u := range res.Unplaced {
		if left[u.Group] == nil {
			left[u.Group] = map[string]int{}
		}
		maps.Copy(left[u.Group], u.Reasons)
	}
	keep := map[string]bool{}
	for g, grp := range w.Groups {
		job := w.Jobs[g].JobName
		rs, out := left[g]
		if !grp.Integrity || !out {
			continue
		}
		if _, ok := ld.starving.since[job]; ok {
			keep[job] = true
			continue
		}
		if len(rs) > 1 || rs[binpack.ReasonNoAgents] == 0 {
			ld.starving.since[job], keep[job] = now, true
		}
	}
	maps.DeleteFunc(ld.starving.since, func(job string, _ time.Time) bool { return !keep[job] })
}

// noteReservation logs which run goes first when that changes, at Info, and the agents held
// for it when they change, at Debug: offers come agent by agent, and the agents a cycle holds
// are among those it was offered.
func (ld *leader) noteReservation(w plan.Work, first int, reserved bool, held []string) {
	job := ""
	if reserved {
		job = w.Jobs[first].JobName
	}
	if job == ld.starving.job && slices.Equal(held, ld.starving.held) {
		return
	}
	was := ld.starving.job
	ld.starving.job, ld.starving.held = job, held
	log := ld.log.WithFields(logrus.Fields{"job": job, "agents": held, "after": ld.cfg.ReserveAfter})
	switch {
	case job == was:
		log.Debug("agents held for the run left out longest")
	case job == "":
		ld.log.WithField("job", was).Info("no run left out past --reserve-after any longer: nothing goes first, no agent is held")
	default:
		log.Info("a run left out for want of resources goes before the others; agents that would fit it once this framework's tasks there end are held for it")
	}
}

// freeable returns, by agent, the cpus and memory this framework's running TRANSIENT tasks
// hold there, which come back when they end (DAEMON tasks do not end by themselves), at
// their jobs' current config (read from the model).
func (ld *leader) freeable(ctx context.Context) (map[string]binpack.Resources, error) {
	running, err := ld.store.Running(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the running queue: %w", err)
	}
	names := map[string]bool{}
	for _, r := range running {
		names[r.Meta.JobName] = true
	}
	jobs, _, err := ld.store.JobsNamed(ctx, slices.Sorted(maps.Keys(names)))
	if err != nil {
		return nil, fmt.Errorf("read the running tasks' jobs: %w", err)
	}
	out := map[string]binpack.Resources{}
	for _, r := range running {
		j, ok := jobs[r.Meta.JobName]
		id, err := taskid.Parse(r.TaskID)
		if !ok || err != nil || j.JobExecutionType != config.Transient {
			continue
		}
		f := out[id.AgentID]
		f.CPUs += j.CPUCount
		f.MemMB += j.MemoryMB
		out[id.AgentID] = f
	}
	return out, nil
}
