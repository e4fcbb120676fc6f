// Package binpack places shards on agents (SPEC §5.5). It is pure: the scheduler gathers the
// cycle's work and offers, Pack decides, and the scheduler does the I/O. Every task it cannot
// place comes back with the reasons, and how many agents turned it down for each.
//
//	BINPACK: tasks largest first, each onto the fitting agent with the least cpu left after it
//	         (best fit), so that busy agents fill up and idle ones stay free.
//	SPREAD:  the job's sharding strategy (scheduler/sharding) over the agents sorted by hostname
//	         names a preferred agent per shard; if the shard does not fit there it goes to the
//	         least-loaded agent that fits.
//
// An agent is never over-committed. An app's executor resources are counted once per agent
// where that app has no executor yet. A job marked Integrity (a READY run) places all its
// shards or none.
package binpack

import (
	"sort"

	"github.com/ejcloud/ejcloud/scheduler/sharding"
)

// Placements.
const (
	Spread  = "SPREAD"
	Binpack = "BINPACK"
)

// Reasons a task was not placed.
const (
	ReasonCPU       = "cpu"
	ReasonMem       = "mem"
	ReasonIntegrity = "integrity" // it fit, but not every shard of its job did
	ReasonNoAgents  = "no-offers"
)

// epsilon absorbs float error in sums of fractional cpus such as 0.1.
const epsilon = 1e-9

// Resources is an amount of cpu and memory.
type Resources struct {
	CPUs  float64
	MemMB float64
}

func (r Resources) plus(o Resources) Resources { return Resources{r.CPUs + o.CPUs, r.MemMB + o.MemMB} }

// Agent is what the cycle's offers hold on one agent.
type Agent struct {
	ID       string
	Hostname string
	Free     Resources
	// Executors lists the apps whose executor is alive on the agent: their tasks need no
	// executor resources there.
	Executors map[string]bool
}

// Group is a job's shards to place in this cycle.
type Group struct {
	Job       string
	App       string
	Items     []int     // shard items to place
	Total     int       // the job's shardingTotalCount, for the SPREAD strategy
	Need      Resources // per shard
	Executor  Resources // the app executor's own resources
	Placement string    // Spread (default) or Binpack
	Strategy  string    // sharding strategy for Spread; default AVG_ALLOCATION
	// Integrity: all Items are placed, or none (a READY run); failover relaunches may place
	// partially.
	Integrity bool
}

// Unplaced is a shard that found no room, with the count of agents rejected per reason.
type Unplaced struct {
	Group   int
	Item    int
	Reasons map[string]int
}

// Result says where each shard goes.
type Result struct {
	// Placed[g][k] is the index in agents of Items[k] of groups[g], or -1.
	Placed   [][]int
	Unplaced []Unplaced
}

// Pack places the groups, in the order given (the scheduler puts failover work first), on
// the agents. It never mutates its arguments.
func Pack(groups []Group, agents []Agent) Result {
	p := newPacker(agents)
	res := Result{Placed: make([][]int, len(groups))}
	order := make([]int, len(groups))
	for i := range order {
		order[i] = i
	}
	// BINPACK takes tasks largest first; relative order among equals (and of SPREAD jobs,
	// which do not compete for best fit) stays as given.
	sort.SliceStable(order, func(a, b int) bool {
		ga, gb := groups[order[a]], groups[order[b]]
		if ga.Integrity != gb.Integrity {
			return !ga.Integrity // failover work first
		}
		if ga.Placement == Binpack && gb.Placement == Binpack {
			return ga.Need.CPUs > gb.Need.CPUs || ga.Need.CPUs == gb.Need.CPUs && ga.Need.MemMB > gb.Need.MemMB
		}
		return false
	})
	for _, g := range order {
		res.Placed[g], res.Unplaced = p.place(g, groups[g], res.Unplaced)
	}
	return res
}

// agentState is an agent during packing.
type agentState struct {
	free  Resources
	execs map[string]bool // apps whose executor is alive or placed in this Pack
}

type packer struct {
	agents []Agent
	state  []agentState
	// byCPU holds agent indices sorted by free cpu (then memory, then index); pos is the
	// inverse. Best fit is a binary search plus a short scan.
	byCPU []int
	pos   []int
	// byHost is the agents sorted by hostname, for SPREAD.
	byHost []int
}

func newPacker(agents []Agent) *packer {
	p := &packer{agents: agents, state: make([]agentState, len(agents)), byCPU: make([]int, len(agents)), pos: make([]int, len(agents))}
	for i, a := range agents {
		p.state[i] = agentState{free: a.Free, execs: a.Executors}
		p.byCPU[i] = i
	}
	sort.Slice(p.byCPU, func(x, y int) bool { return p.less(p.byCPU[x], p.byCPU[y]) })
	for k, i := range p.byCPU {
		p.pos[i] = k
	}
	return p
}

func (p *packer) less(i, j int) bool {
	a, b := p.state[i].free, p.state[j].free
	if a.CPUs != b.CPUs {
		return a.CPUs < b.CPUs
	}
	if a.MemMB != b.MemMB {
		return a.MemMB < b.MemMB
	}
	return i < j
}

// need returns what a shard of g takes on agent i: the shard, plus the executor if the app
// has none there yet.
func (p *packer) need(i int, g *Group) Resources {
	if p.state[i].execs[g.App] {
		return g.Need
	}
	return g.Need.plus(g.Executor)
}

func (p *packer) fits(i int, g *Group) bool {
	n, f := p.need(i, g), p.state[i].free
	return n.CPUs <= f.CPUs+epsilon && n.MemMB <= f.MemMB+epsilon
}

// take books a shard of g on agent i and keeps byCPU sorted; it returns the undo record.
func (p *packer) take(i int, g *Group) undo {
	u := undo{agent: i, free: p.state[i].free, execs: p.state[i].execs}
	n := p.need(i, g)
	st := &p.state[i]
	st.free = Resources{st.free.CPUs - n.CPUs, st.free.MemMB - n.MemMB}
	if !st.execs[g.App] {
		execs := make(map[string]bool, len(st.execs)+1) // copy: Agent.Executors is the caller's
		for k, v := range st.execs {
			execs[k] = v
		}
		execs[g.App] = true
		st.execs = execs
	}
	p.fix(i)
	return u
}

type undo struct {
	agent int
	free  Resources
	execs map[string]bool
}

func (p *packer) rollback(us []undo) {
	for k := len(us) - 1; k >= 0; k-- {
		u := us[k]
		p.state[u.agent].free, p.state[u.agent].execs = u.free, u.execs
		p.fix(u.agent)
	}
}

// fix moves agent i to its place in byCPU after its free resources changed.
func (p *packer) fix(i int) {
	k := p.pos[i]
	for k > 0 && p.less(i, p.byCPU[k-1]) {
		p.byCPU[k] = p.byCPU[k-1]
		p.pos[p.byCPU[k]] = k
		k--
	}
	for k < len(p.byCPU)-1 && p.less(p.byCPU[k+1], i) {
		p.byCPU[k] = p.byCPU[k+1]
		p.pos[p.byCPU[k]] = k
		k++
	}
	p.byCPU[k], p.pos[i] = i, k
}

// bestFit returns the fitting agent with the least cpu left after placing a shard of g, or -1.
func (p *packer) bestFit(g *Group) int {
	start := sort.Search(len(p.byCPU), func(k int) bool { return p.state[p.byCPU[k]].free.CPUs+epsilon >= g.Need.CPUs })
	best, bestLeft := -1, 0.0
	for k := start; k < len(p.byCPU); k++ {
		i := p.byCPU[k]
		if best >= 0 && p.state[i].free.CPUs-g.Need.CPUs-g.Executor.CPUs > bestLeft+epsilon {
			break // every later agent leaves more cpu than the best so far, even with an executor to start
		}
		if p.fits(i, g) {
			if left := p.state[i].free.CPUs - p.need(i, g).CPUs; best < 0 || left < bestLeft-epsilon {
				best, bestLeft = i, left
			}
		}
	}
	return best
}

// leastLoaded returns the fitting agent with the most free cpu, or -1.
func (p *packer) leastLoaded(g *Group) int {
	for k := len(p.byCPU) - 1; k >= 0; k-- {
		i := p.byCPU[k]
		if p.state[i].free.CPUs+epsilon < g.Need.CPUs {
			return -1
		}
		if p.fits(i, g) {
			return i
		}
	}
	return -1
}

// place places one group; with Integrity it undoes a partial placement.
func (p *packer) place(gi int, g Group, unplaced []Unplaced) ([]int, []Unplaced) {
	placed := make([]int, len(g.Items))
	var undos []undo
	var preferred []int // SPREAD: preferred agent per item, by position in Items
	if g.Placement != Binpack {
		preferred = p.spreadPreference(&g)
	}
	missing := 0
	for k := range g.Items {
		i := -1
		switch {
		case preferred != nil && preferred[k] >= 0 && p.fits(preferred[k], &g):
			i = preferred[k]
		case preferred != nil:
			i = p.leastLoaded(&g)
		default:
			i = p.bestFit(&g)
		}
		placed[k] = i
		if i < 0 {
			missing++
			continue
		}
		undos = append(undos, p.take(i, &g))
	}
	if missing == 0 || !g.Integrity {
		for k, i := range placed {
			if i < 0 {
				unplaced = append(unplaced, Unplaced{Group: gi, Item: g.Items[k], Reasons: p.reasons(&g)})
			}
		}
		return placed, unplaced
	}
	// The reasons of the shards that did not fit are those of the moment they failed, before
	// the rollback frees what the others took.
	failed := p.reasons(&g)
	p.rollback(undos)
	for k, i := range placed {
		reasons := map[string]int{ReasonIntegrity: 1}
		if i < 0 {
			reasons = failed
		}
		placed[k] = -1
		unplaced = append(unplaced, Unplaced{Group: gi, Item: g.Items[k], Reasons: reasons})
	}
	return placed, unplaced
}

// reasons counts, over all agents, which resource turned a shard of g away.
func (p *packer) reasons(g *Group) map[string]int {
	r := map[string]int{}
	if len(p.agents) == 0 {
		r[ReasonNoAgents] = 1
		return r
	}
	for i := range p.agents {
		n, f := p.need(i, g), p.state[i].free
		if n.CPUs > f.CPUs+epsilon {
			r[ReasonCPU]++
		}
		if n.MemMB > f.MemMB+epsilon {
			r[ReasonMem]++
		}
	}
	return r
}

// spreadPreference maps each item of g to its preferred agent under the job's strategy over the
// agents sorted by hostname.
func (p *packer) spreadPreference(g *Group) []int {
	if p.byHost == nil {
		p.byHost = make([]int, len(p.agents))
		for i := range p.byHost {
			p.byHost[i] = i
		}
		sort.SliceStable(p.byHost, func(x, y int) bool {
			a, b := p.agents[p.byHost[x]], p.agents[p.byHost[y]]
			if a.Hostname != b.Hostname {
				return a.Hostname < b.Hostname
			}
			return a.ID < b.ID
		})
	}
	strategy := g.Strategy
	if strategy == "" {
		strategy = sharding.AvgAllocation
	}
	total := g.Total
	for _, it := range g.Items {
		total = max(total, it+1)
	}
	byItem := map[int]int{}
	if shards, err := sharding.Shard(strategy, len(p.byHost), g.Job, total); err == nil {
		for inst, items := range shards {
			for _, it := range items {
				byItem[it] = p.byHost[inst]
			}
		}
	}
	pref := make([]int, len(g.Items))
	for k, it := range g.Items {
		pref[k] = -1
		if i, ok := byItem[it]; ok {
			pref[k] = i
		}
	}
	return pref
}
