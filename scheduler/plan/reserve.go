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

// ReserveTries bounds the starving runs one cycle tries (each try packs twice): those that
// cannot fit on any one offered agent even once its tasks end are passed over without a try.
const ReserveTries = 3

// Starving is a READY run Reserve may put first: its group's index, and the IDs of the agents
// held for it in earlier cycles.
type Starving struct {
	Group int
	Held  map[string]bool
}

// Reservation is what Reserve decided for the cycle.
type Reservation struct {
	// Group is the index of the run that went first (placed, or agents held for it); -1 when
	// none could be helped, and the caller keeps its own packing.
	Group int
	// Held lists the IDs of the agents held for it this cycle, in the order of agents; Fresh
	// says they are those a packing of all of this cycle's agents chose (the caller remembers
	// them), not only the earlier cycles' among those offered now.
	Held  []string
	Fresh bool
}

// Reserve packs a cycle in which READY runs (starved, the longest left out first) have been
// left out for too long for want of cpu or memory while smaller work took what each cycle
// freed: the packer keeps the packing that places the most shards, and a run that needs a whole
// agent never finds one free. Failover work keeps its precedence (SPEC §5.4); then the first of
// starved that can be helped goes first:
//
//   - if the offers hold it, it is placed before the other runs;
//   - if not, but they would once this framework's tasks that end by themselves have ended
//     (freeable, by agent ID: what its TRANSIENT tasks hold there), the agents it would use
//     are held: nothing else goes there this cycle, so that what their tasks free adds up
//     instead of going to smaller runs. Its shards are unplaced with ReasonHolding, and those
//     of others that lost an agent to it with ReasonReserved;
//   - if not even then, the agents held for it in earlier cycles that are offered now are held
//     again: Mesos offers an agent alone when a task there ends, and a run needing several
//     agents would lose each one's freed resources, cycle after cycle, to smaller runs;
//   - else the next of starved is tried. When none can be helped (each needs more than this
//     framework can free: an agent too small, another framework's tasks), Group is -1 and the
//     caller keeps its own packing: holding agents would starve the others for nothing.
func Reserve(groups []binpack.Group, starved []Starving, agents []binpack.Agent, freeable map[string]binpack.Resources) (binpack.Result, Reservation) {
	none := Reservation{Group: -1}
	var res binpack.Result
	res.Placed = make([][]int, len(groups))
	var failover []int
	for g := range groups {
		if !groups[g].Integrity {
			failover = append(failover, g)
		}
	}
	left := packSome(groups, failover, agents, nil, &res)
	potential := slices.Clone(left)
	for i := range potential {
		f := freeable[potential[i].ID]
		potential[i].Free.CPUs += f.CPUs
		potential[i].Free.MemMB += f.MemMB
	}
	tries := 0
	for _, s := range starved {
		if tries == ReserveTries {
			break
		}
		g := groups[s.Group]
		if !fitsOne(g, potential) && !offered(s.Held, agents) {
			continue
		}
		tries++
		var others []int
		for k := range groups {
			if k != s.Group && groups[k].Integrity {
				others = append(others, k)
			}
		}
		alone := binpack.Pack([]binpack.Group{g}, left)
		if len(alone.Unplaced) == 0 {
			res.Placed[s.Group] = alone.Placed[0]
			packSome(groups, others, less(left, groups[s.Group:s.Group+1], alone.Placed), nil, &res)
			return res, Reservation{Group: s.Group}
		}
		hold := make([]bool, len(agents))
		fresh := false
		if could := binpack.Pack([]binpack.Group{g}, potential); len(could.Unplaced) == 0 {
			for _, a := range could.Placed[0] {
				hold[a] = true
			}
			fresh = true
		} else {
			for i, a := range agents {
				hold[i] = s.Held[a.ID]
			}
		}
		var held []string
		for i, h := range hold {
			if h {
				held = append(held, agents[i].ID)
			}
		}
		if len(held) == 0 {
			continue
		}
		res.Placed[s.Group] = make([]int, len(g.Items))
		holding := map[string]int{ReasonHolding: len(held)}
		for k, item := range g.Items {
			res.Placed[s.Group][k] = -1
			res.Unplaced = append(res.Unplaced, binpack.Unplaced{Group: s.Group, Item: item, Reasons: holding})
		}
		packSome(groups, others, left, hold, &res)
		return res, Reservation{Group: s.Group, Held: held, Fresh: fresh}
	}
	return binpack.Result{}, none
}

// fitsOne says whether one shard of g fits on one of agents, its app's executor counted where
// none runs: a run none of whose shards fits anywhere cannot be helped by holding agents.
func fitsOne(g binpack.Group, agents []binpack.Agent) bool {
	const epsilon = 1e-9
	for _, a := range agents {
		need := g.Need
		if !a.Executors[g.App] {
			need.CPUs += g.Executor.CPUs
			need.MemMB += g.Executor.MemMB
		}
		if need.CPUs <= a.Free.CPUs+epsilon && need.MemMB <= a.Free.MemMB+epsilon {
			return true
		}
	}
	return false
}

// offered says whether any of agents is in held.
func offered(held map[string]bool, agents []binpack.Agent) bool {
	for _, a := range agents {
		if held[a.ID] {
			return true
		}
	}
	return false
}

// packSome packs groups[which] on agents, leaving out those hold marks, into res (indexes of
// the whole groups and agents), and returns agents less what it placed. Every shard unplaced
// while agents were held counts them as ReasonReserved; one that found no agent only because
// every agent offered was held says so rather than "no offers".
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
			if len(open) == 0 {
				delete(rs, binpack.ReasonNoAgents)
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
