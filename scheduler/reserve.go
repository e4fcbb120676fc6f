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
// that one left out for --reserve-after goes first (plan.Reserve), and which run agents are
// held for, and which: Mesos offers an agent alone when a task there ends, and the hold must
// outlast such cycles. Owned by the event loop.
type starving struct {
	since map[string]time.Time // by job
	job   string               // the run agents are held for, or that went first
	held  map[string]bool      // by agent ID: the agents held for it
}

// pack places the cycle's work: binpack.Pack, unless READY runs have been left out for
// --reserve-after, when the one left out longest that can be helped goes first (plan.Reserve).
func (ld *leader) pack(ctx context.Context, w plan.Work, agents []binpack.Agent, now time.Time) binpack.Result {
	var res binpack.Result
	r := plan.Reservation{Group: -1}
	if starved := ld.longestStarved(w, now); len(starved) > 0 {
		if freeable, err := ld.freeable(ctx); err != nil {
			ld.log.WithError(err).Warn("cannot read what the running tasks hold; no agent is held this cycle")
		} else {
			res, r = plan.Reserve(w.Groups, starved, agents, freeable)
		}
	}
	if r.Group < 0 {
		res = binpack.Pack(w.Groups, agents)
	}
	ld.noteStarving(w, res, now)
	ld.noteReservation(w, r)
	return res
}

// longestStarved returns the READY runs left out for --reserve-after or longer, the longest
// first, each with the agents held for it if it is the run agents are held for.
func (ld *leader) longestStarved(w plan.Work, now time.Time) []plan.Starving {
	if ld.cfg.ReserveAfter <= 0 {
		return nil
	}
	var out []plan.Starving
	for g, grp := range w.Groups {
		job := w.Jobs[g].JobName
		since, ok := ld.starving.since[job]
		if grp.Integrity && ok && now.Sub(since) >= ld.cfg.ReserveAfter {
			s := plan.Starving{Group: g}
			if job == ld.starving.job {
				s.Held = ld.starving.held
			}
			out = append(out, s)
		}
	}
	slices.SortStableFunc(out, func(a, b plan.Starving) int {
		return ld.starving.since[w.Jobs[a.Group].JobName].Compare(ld.starving.since[w.Jobs[b.Group].JobName])
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

// noteReservation remembers which run went first this cycle and the agents held for it, and
// logs when the run changes, at Info. A cycle that helped none (offered only agents that
// cannot help) changes nothing: the hold ends when the run is no longer left out (noteStarving
// has stopped its clock), placed or gone.
func (ld *leader) noteReservation(w plan.Work, r plan.Reservation) {
	was := ld.starving.job
	switch {
	case r.Group >= 0:
		job := w.Jobs[r.Group].JobName
		if job != ld.starving.job {
			ld.starving.job, ld.starving.held = job, nil
		}
		if r.Fresh {
			ld.starving.held = map[string]bool{}
			for _, a := range r.Held {
				ld.starving.held[a] = true
			}
		}
	}
	if _, left := ld.starving.since[ld.starving.job]; !left {
		ld.starving.job, ld.starving.held = "", nil
	}
	switch job := ld.starving.job; {
	case job == was:
	case job == "":
		ld.log.WithField("job", was).Info("the run left out past --reserve-after was placed (or is gone): no agent is held for it any longer")
	default:
		ld.log.WithFields(logrus.Fields{"job": job, "agents": slices.Sorted(maps.Keys(ld.starving.held)), "after": ld.cfg.ReserveAfter}).
			Info("a run left out for want of resources goes before the others; agents that would fit it once this framework's tasks there end are held for it")
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
