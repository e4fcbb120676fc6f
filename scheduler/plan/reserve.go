package plan

import (
	"maps"
	"slices"

	"github.com/ejcloud/ejcloud/scheduler/binpack"
)

// Reasons Reserve adds to the unplaced shards' (SPEC §5.5's list is open).
const (
	// ReasonReserved counts the agents held for a run that has waited longer: a shard that
	// could have gone there did not.
	ReasonReserved = "reserved"
	// ReasonHolding counts the agents held for the starving run itself, as their tasks end.
	ReasonHolding = "holding"
)

// Reserve packs a cycle in which the READY run groups[first] has been left out for too long,
// for want of cpu or memory, while smaller work took what each cycle freed (the packer keeps
// the packing that places the most shards, and a run that needs a whole agent never finds one
// free). Failover work keeps its precedence (SPEC §5.4); then the starving run goes first:
//
//   - if the offers hold it, it is placed before the other runs;
//   - if not, but they would once this framework's tasks that end by themselves have ended
//     (freeable, by agent ID: what its TRANSIENT tasks hold there), the agents it would use
//     are held: nothing else goes there this cycle, so that what their tasks free adds up
//     instead of going to smaller runs. Its shards are unplaced with ReasonHolding, and those
//     of others that lost an agent to it with ReasonReserved;
//   - if not even then (it needs more than this framework can free: another framework's
//     tasks, or an agent too small), ok is false and the caller keeps its own packing: holding
//     agents would starve the others for nothing.
//
// held lists the IDs of the agents held, in the order of agents.
func Reserve(groups []binpack.Group, first int, agents []binpack.Agent, freeable map[string]binpack.Resources) (res binpack.Result, held []string, ok bool) {
	res.Placed = make([][]int, len(groups))
	var failover, others []int
	for g := range groups {
		switch {
		case g == first:
		case groups[g].Integrity:
			others = append(others, g)
		default:
			failover = append(failover, g)
		}
	}
	left := packSome(groups, failover, agents, nil, &res)

	alone := binpack.Pack([]binpack.Group{groups[first]}, left)
	if len(alone.Unplaced) == 0 {
		res.Placed[first] = alone.Placed[0]
		left = less(left, groups[first:first+1], alone.Placed)
		packSome(groups, others, left, nil, &res)
		return res, nil, true
	}
	potential := slices.Clone(left)
	for i := range potential {
		f := freeable[potential[i].ID]
		potential[i].Free.CPUs += f.CPUs
		potential[i].Free.MemMB += f.MemMB
	}
	could := binpack.Pack([]binpack.Group{groups[first]}, potential)
	if len(could.Unplaced) > 0 {
		return binpack.Result{}, nil, false
	}
	hold := make([]bool, len(agents))
	for _, a := range could.Placed[0] {
		hold[a] = true
	}
	for i, h := range hold {
		if h {
			held = append(held, agents[i].ID)
		}
	}
	res.Placed[first] = make([]int, len(groups[first].Items))
	holding := map[string]int{ReasonHolding: len(held)}
	for k, item := range groups[first].Items {
		res.Placed[first][k] = -1
		res.Unplaced = append(res.Unplaced, binpack.Unplaced{Group: first, Item: item, Reasons: holding})
	}
	packSome(groups, others, left, hold, &res)
	return res, held, true
}

// packSome packs groups[which] on agents, leaving out those hold marks, into res (indexes of
// the whole groups and agents), and returns agents less what it placed. Every shard unplaced
// while agents were held also counts them as ReasonReserved.
func packSome(groups []binpack.Group, which []int, agents []binpack.Agent, hold []bool, res *binpack.Result) []binpack.Agent {
	if len(which) == 0 {
		return agents
	}
	sub := make([]binpack.Group, len(which))
	for i, g := range which {
		sub[i] = groups[g]
	}
	open, index := agents, []int(nil) // index: an open agent's index in agents
	nHeld := 0
	for _, h := range hold {
		if h {
			nHeld++
		}
	}
	if nHeld > 0 {
		open = make([]binpack.Agent, 0, len(agents)-nHeld)
		for i, a := range agents {
			if !hold[i] {
				open = append(open, a)
				index = append(index, i)
			}
		}
	}
	r := binpack.Pack(sub, open)
	placed := r.Placed
	if index != nil {
		placed = make([][]int, len(r.Placed))
		for i, p := range r.Placed {
			placed[i] = make([]int, len(p))
			for k, a := range p {
				placed[i][k] = a
				if a >= 0 {
					placed[i][k] = index[a]
				}
			}
		}
	}
	for i, g := range which {
		res.Placed[g] = placed[i]
	}
	for _, u := range r.Unplaced {
		u.Group = which[u.Group]
		if nHeld > 0 { // Reasons may be shared: a copy
			rs := maps.Clone(u.Reasons)
			if rs == nil {
				rs = map[string]int{}
			}
			rs[ReasonReserved] = nHeld
			u.Reasons = rs
		}
		res.Unplaced = append(res.Unplaced, u)
	}
	return less(agents, sub, placed)
}

// less returns agents less what groups' shards take where placed puts them (indexes in
// agents): each shard's need, and its app's executor once per agent where none runs yet.
// agents is not changed.
func less(agents []binpack.Agent, groups []binpack.Group, placed [][]int) []binpack.Agent {
	out := slices.Clone(agents)
	cloned := make([]bool, len(out))
	for g, p := range placed {
		for _, a := range p {
			if a < 0 {
				continue
			}
			ag := &out[a]
			need := groups[g].Need
			if !ag.Executors[groups[g].App] {
				need.CPUs += groups[g].Executor.CPUs
				need.MemMB += groups[g].Executor.MemMB
				if !cloned[a] {
					ag.Executors, cloned[a] = maps.Clone(ag.Executors), true
					if ag.Executors == nil {
						ag.Executors = map[string]bool{}
					}
				}
				ag.Executors[groups[g].App] = true
			}
			ag.Free.CPUs -= need.CPUs
			ag.Free.MemMB -= need.MemMB
		}
	}
	return out
}
