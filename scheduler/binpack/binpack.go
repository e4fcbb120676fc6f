// Package binpack places shards on agents (SPEC §5.5). It is pure: the scheduler gathers the
// cycle's work and offers, Pack decides, and the scheduler does the I/O. Every task it cannot
// place comes back with the reasons, and how many agents turned it down for each.
//
//	BINPACK: each shard goes to the fitting agent that is fullest after taking it, fullness
//	         being the mean of its cpu and memory use, each relative to what the agent offered
//	         in this cycle (the score of Fenzo's cpuMemBinPacker), so that busy agents fill up
//	         in both dimensions and idle ones stay free; one of the tries below opens the
//	         largest idle agent when no busy one fits.
//	SPREAD:  the job's sharding strategy (scheduler/sharding) over the agents sorted by hostname
//	         names a preferred agent per shard; if the shard does not fit there it goes to the
//	         least-loaded agent that fits.
//
// No single greedy order is best everywhere: largest first packs tightest when all fits but
// leaves the many small tasks out when not, and Fenzo's "good enough" rule (the first agent
// scoring above 0.5) beats its own full scan on mixed agent sizes. So Pack runs a few orders
// and rules (see tries) and keeps the result that places the most failover shards, then the
// most shards, then uses the fewest agents (the first try among equals). The try likeliest to
// win runs first, and the others stop as soon as they cannot beat it: their agents used only
// grow, and what they can still place is bounded by the cpu and memory that shards can still
// use on each agent (see common.usable). A try that could at best tie is not run at all when
// the result kept provably cannot be beaten: how many shards of each kind fit on each offer
// bounds the shards any packing places and the agents it needs (see unbeatable). Two tries
// are Fenzo's own rules on the given order, so Pack never places fewer tasks, nor uses more
// agents when all fit, than cpuMemBinPacker would on the same input (fenzo_test.go checks it,
// and that those two tries choose exactly as a plain implementation of Fenzo's rules).
//
// Agents with the same offer, the same free resources and the same executors are one bucket:
// a scan looks at buckets, not agents, so its cost does not grow with the number of identical
// agents. Most placements need no scan at all: a kind of shard's next choice is redone from
// its last one and the few agents changed since (see choose). A Pack works in the memory of
// the one before (scratchPool).
//
// An agent is never over-committed. An app's executor resources are counted once per agent
// where that app has no executor yet. A job marked Integrity (a READY run) places all its
// shards or none. Failover work (not Integrity) is placed before READY runs, and within each,
// SPREAD jobs (in the order given) before BINPACK jobs.
package binpack

import (
	"math"
	"math/bits"
	"slices"
	"sort"
	"strings"
	"sync"

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

// goodEnough is the score at which Fenzo's "good enough" rule stops looking.
const goodEnough = 0.5

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
// Reasons is read-only: entries with equal reasons share one map.
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

// Pack places the groups on the agents: failover work (groups without Integrity) first, as
// the scheduler asks. It never mutates its arguments.
func Pack(groups []Group, agents []Agent) Result {
	s := scratchPool.Get().(*scratch)
	c := newCommonIn(groups, agents, s)
	defer c.release(s)
	ts := c.tries()
	var best outcome
	bestRank := -1 // in ts: the preferred try among equal results is the first
	for _, k := range c.runOrder(ts) {
		t := ts[k]
		if t.ifShort && bestRank >= 0 && best.placed == c.shards {
			continue
		}
		if bestRank >= 0 && k > bestRank && c.unbeatable(&best) {
			continue // it could at best tie, and ties go to the earlier try
		}
		var o outcome
		if bestRank < 0 {
			o = c.runUnless(t, nil)
		} else if o = c.runUnless(t, &bound{best: &best, winsTies: k < bestRank}); o.abandoned {
			c.spareRes = append(c.spareRes, o)
			continue
		}
		if bestRank < 0 || o.better(best) || !best.better(o) && k < bestRank {
			if bestRank >= 0 {
				c.spareRes = append(c.spareRes, best)
			}
			best, bestRank = o, k
		} else {
			c.spareRes = append(c.spareRes, o)
		}
	}
	res := best.result(c)
	c.spareRes = append(c.spareRes, best)
	return res
}

// scratch is the memory one Pack works in, kept for the next: a scheduler packs every cycle,
// and on mid-size inputs touching fresh memory costs as much as the packing.
type scratch struct {
	first, spare *packer
	outs         []outcome
	// The memory of common's slices per agent, per group and per try.
	set0, kindOf, ranks               []int32
	binpack, ready, largest, smallest []int
	info                              []groupInfo
	offer                             []Resources
	failAt                            []int32
	sortedFails                       []failure
}

// reuse is s n long: its memory if it has room, else new. The caller writes every element.
func reuse[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// release hands c's memory back to the pool, holding nothing of the caller's.
func (c *common) release(s *scratch) {
	s.first, s.spare = c.first, c.spare
	s.outs = append(s.outs[:0], c.spareRes...)
	s.set0, s.kindOf, s.info, s.offer, s.binpack, s.ready = c.set0, c.kindOf, c.info, c.offer, c.binpack, c.ready
	s.failAt, s.sortedFails = c.failAt, c.sortedFails
	if c.ranks != nil {
		s.ranks, s.largest, s.smallest = c.ranks, c.largest, c.smallest
	}
	for _, p := range []*packer{s.first, s.spare} {
		if p != nil {
			p.c, p.hasApp, p.hasAppOf = nil, nil, ""
		}
	}
	scratchPool.Put(s)
}

// runOrder is the order to run the tries in: the one likeliest to win first, so that the
// others are abandoned as soon as they cannot beat it (see bound). When the shards need more
// than the agents offer, nothing places them all and smallest first (the last try) places
// the most; otherwise, when the agents differ, fewest agents uses the fewest.
func (c *common) runOrder(ts []try) []int {
	order := make([]int, 0, len(ts))
	short := c.need.CPUs > c.total.CPUs+epsilon || c.need.MemMB > c.total.MemMB+epsilon
	for k := len(ts) - 1; short && k >= 0; k-- {
		if ts[k].ifShort {
			order = append(order, k)
		}
	}
	for k := range ts {
		if len(c.first.buckets) > 1 && ts[k].rule == fewestAgents && !slices.Contains(order, k) {
			order = append(order, k)
		}
	}
	for k := range ts {
		if !slices.Contains(order, k) {
			order = append(order, k)
		}
	}
	return order
}

// bound is the best outcome so far, which a try must beat (or equal, if it wins ties).
type bound struct {
	best     *outcome
	winsTies bool
}

// lost says whether a try that, after a whole group, has left out failedFailover shards of
// failover groups, can place at most maxPlaced shards in all and uses hosts agents can no
// longer beat the bound: its shards left out stay out, and its agents used stay used (a
// rollback frees only what its own group took).
func (b *bound) lost(c *common, failedFailover, maxPlaced, hosts int) bool {
	maxFailover := c.failoverShards - failedFailover
	switch {
	case maxFailover != b.best.failover:
		return maxFailover < b.best.failover
	case maxPlaced != b.best.placed:
		return maxPlaced < b.best.placed
	case hosts != b.best.hosts:
		return hosts > b.best.hosts
	}
	return !b.winsTies
}

// rule picks an agent for a BINPACK shard among those that fit.
type rule int

const (
	bestScore       rule = iota // the highest score; the lowest index among equals
	firstGoodEnough             // the lowest index scoring above goodEnough, else as bestScore
	// fewestAgents: as bestScore among the agents already holding a shard of this Pack, else
	// the empty agent offering the most (relative to the cluster), so that a few large agents
	// take what would otherwise spread over many small ones.
	fewestAgents
)

// try is one way of packing: the order of the BINPACK groups and the rule.
type try struct {
	order []int // BINPACK groups, within their phase (failover, then READY)
	rule  rule
	// ifShort: run only when no try so far placed every shard.
	ifShort bool
}

// tries are the orders and rules Pack runs, the first being preferred on equal results:
//   - largest first (size: the larger of the shard's shares of the cluster's cpu and memory),
//     best score: packs tight when all fits, with neither dimension stranded since the score
//     weighs both;
//   - largest first, fewest agents: far fewer agents when their sizes differ, since the best
//     score alone fills the small agents first (they fill fastest);
//   - the given order, best score, and the given order, good enough: Fenzo's two modes;
//   - smallest first, best score: places the most shards when not all fit (run only then).
func (c *common) tries() []try {
	given := c.binpack
	if len(given) == 0 {
		return []try{{order: given}}
	}
	// By size within each phase, as given among equals: a counting sort on the rank of the
	// size, as jobs come in few sizes. A size is a kind of shard's (its need's), so the kinds
	// are ranked, not the groups.
	size := make([]float64, c.nKinds)
	for k, n := range c.kindNeed {
		size[k] = max(share(n.CPUs, c.total.CPUs), share(n.MemMB, c.total.MemMB))
	}
	sizes := slices.Clone(size)
	slices.Sort(sizes)
	sizes = slices.Compact(sizes)
	kindRank := make([]int, c.nKinds)
	for k, z := range size {
		kindRank[k], _ = slices.BinarySearch(sizes, z)
	}
	var mem scratch
	if c.mem != nil {
		mem, c.mem = *c.mem, nil
	}
	ranks := reuse(mem.ranks, len(given))
	c.ranks = ranks
	for k, g := range given {
		ranks[k] = int32(kindRank[c.kindOf[g]])
	}
	failover := 0
	for failover < len(given) && !c.info[given[failover]].integrity {
		failover++
	}
	largest, smallest := given, given // one size: the given order is both
	if len(sizes) > 1 {
		// Smallest first, each phase by a counting sort; largest first is the same runs of
		// one size, taken from the last.
		smallest, largest = reuse(mem.smallest, len(given)), reuse(mem.largest, len(given))
		start, next := make([]int, len(sizes)+1), make([]int, len(sizes)+1)
		for _, phase := range [2][2]int{{0, failover}, {failover, len(given)}} {
			clear(start)
			for k := phase[0]; k < phase[1]; k++ {
				start[ranks[k]+1]++
			}
			start[0] = phase[0]
			for r := 1; r < len(start); r++ {
				start[r] += start[r-1]
			}
			copy(next, start)
			for k := phase[0]; k < phase[1]; k++ {
				r := ranks[k]
				smallest[next[r]] = given[k]
				next[r]++
			}
			at := phase[0]
			for r := len(sizes) - 1; r >= 0; r-- {
				at += copy(largest[at:], smallest[start[r]:start[r+1]])
			}
		}
		c.largest, c.smallest = largest, smallest
	}
	var out []try
	for _, t := range []try{{largest, bestScore, false}, {largest, fewestAgents, false}, {given, bestScore, false}, {given, firstGoodEnough, false}, {smallest, bestScore, true}} {
		if t.rule == fewestAgents && c.alike() {
			continue // it would choose as best score does
		}
		if !slices.ContainsFunc(out, func(o try) bool { return o.rule == t.rule && sameOrder(o.order, t.order) }) {
			out = append(out, t) // tasks all alike, or given largest first: one run will do
		}
	}
	return out
}

// sameOrder is slices.Equal, at once when both are the same slice (the given order is often
// both largest and smallest first).
func sameOrder(a, b []int) bool {
	if len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0]) {
		return true
	}
	return slices.Equal(a, b)
}

// alike says whether the agents are all alike (one offer, the same executors) and no shard
// needs an executor. Then fewest agents chooses as best score does: an agent that took
// something scores higher, for any shard, than an empty one (it is fuller, relative to the
// same offer), so both take a fitting used agent of the highest score if any, else the empty
// agent of the lowest index (all empty ones score, and offer, the same).
func (c *common) alike() bool { return len(c.first.buckets) == 1 && !c.execNeeded }

func share(x, total float64) float64 {
	if total <= 0 {
		return 0
	}
	return x / total
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// outcome is the result of one try.
type outcome struct {
	// at is the agent of every shard (-1: none), group after group: group g's from
	// common.off[g]. Only the kept try's becomes a Result, so a try writes no slice headers.
	at               []int32
	failover, placed int // shards placed: of failover groups, of all
	hosts            int // agents given at least one shard
	fails            []failure
	abandoned        bool   // it could not beat the best so far
	res              Result // filled by result
}

// result is o as a Result: Placed in one allocation, and the reasons of what is left out.
func (o *outcome) result(c *common) Result {
	all := make([]int, len(o.at))
	for k, i := range o.at {
		all[k] = int(i)
	}
	placed := make([][]int, len(c.groups))
	for g := range placed {
		n := c.info[g].n
		placed[g], all = all[:n:n], all[n:]
	}
	o.res = Result{Placed: placed, Unplaced: o.unplaced(c)}
	return o.res
}

func (o outcome) better(than outcome) bool {
	if o.failover != than.failover {
		return o.failover > than.failover
	}
	if o.placed != than.placed {
		return o.placed > than.placed
	}
	return o.hosts < than.hosts
}

// common is what the tries share: the input, the executor sets, the agents' first buckets.
type common struct {
	groups []Group
	agents []Agent
	sets   execSets
	set0   []int32 // each agent's executor set at the start
	shards int     // shards in all groups
	// failoverShards are the shards of the groups without Integrity.
	failoverShards int
	total          Resources
	maxOffer       Resources // the most cpu, the most memory an agent offers
	need           Resources // of all shards, without executors
	// minHosts is a lower bound on the agents any packing placing every shard uses.
	minHosts int
	// kindFits[k] are the counts of shards of kind k that fit on an empty agent of each offer,
	// most first, with how many agents offer it; kindCap[k] is how many of them all agents
	// hold (at most kindShards[k]). Nil when there are too many kinds and offers to count.
	kindFits [][]fitCount
	kindCap  []int
	capSum   int // the sum of kindCap: no packing places more
	// minNeed is the least cpu and the least memory any shard needs: a bucket with less
	// free can take nothing.
	minNeed Resources
	// memPerCPU are the least and the most memory per cpu of any shard's need or executor
	// (+Inf: some need no cpu), and usable0 the sum of usable over the agents at the start.
	memPerCPU [2]float64
	cpuPerMem float64 // 1/memPerCPU[0], or 0: no cap on cpu
	usable0   Resources
	// kindOf numbers each group's kind of shard (need, executor, app): nKinds in all.
	kindOf []int32
	nKinds int
	// info is what the tries read of each group, in 16 bytes rather than a Group's 136: a try
	// reads every group, in an order of its own, and thousands of Groups do not stay in cache.
	info []groupInfo
	// kinds are the kinds of shard, numbered as kindOf numbers them.
	kinds []shardKind
	// offer is each agent's Free: what its score is relative to.
	offer []Resources
	// failAt and sortedFails are the memory of outcome.unplaced's sort.
	failAt      []int32
	sortedFails []failure
	// ready is the memory of READY BINPACK groups; ranks, largest and smallest that of tries,
	// which takes the scratch's (mem) on its first call only.
	ready             []int
	ranks             []int32
	largest, smallest []int
	mem               *scratch
	// binpack are the BINPACK groups, failover ones first, each phase in the order given;
	// spread the others, failover ones ([0]), then READY ones ([1]).
	binpack []int
	spread  [2][]int
	// execNeeded: some group needs an executor; else the agents' executors matter to none.
	execNeeded bool
	// kindShards and kindNeed are each kind's shards and the need of one; cpuOrder and
	// memOrder the kinds by need of cpu, of memory, least first.
	kindShards         []int
	kindNeed           []Resources
	cpuOrder, memOrder []kindAmount
	byHost             []int   // agents sorted by hostname, for SPREAD; built on first use
	first              *packer // the agents bucketed, before any try
	spare              *packer // the memory of the tries' packers
	// spareRes holds the memory of tries' results no longer needed.
	spareRes []outcome
}

func newCommon(groups []Group, agents []Agent) *common {
	return newCommonIn(groups, agents, &scratch{})
}

// newCommonIn is newCommon in the memory of an earlier Pack.
func newCommonIn(groups []Group, agents []Agent, s *scratch) *common {
	c := &common{groups: groups, agents: agents, set0: reuse(s.set0, len(agents)), offer: reuse(s.offer, len(agents)), spare: s.spare, spareRes: s.outs, mem: s,
		failAt: s.failAt, sortedFails: s.sortedFails}
	if c.spare != nil {
		c.spare.c = c
	}
	for i, a := range agents {
		if len(a.Executors) > 0 && c.sets.ids == nil {
			c.sets.init() // else every set is the empty one, 0, and none is looked at
		}
		c.set0[i] = c.sets.of(a.Executors)
		c.offer[i] = a.Free
		c.total = c.total.plus(a.Free)
		c.maxOffer = Resources{max(c.maxOffer.CPUs, a.Free.CPUs), max(c.maxOffer.MemMB, a.Free.MemMB)}
	}
	var need Resources
	// Jobs come in few kinds, found by a hash of their need (not of the app's name).
	var kinds []shardKind
	// kind+1 per slot (0: empty), at most an eighth full, so that a kind is mostly in the
	// slot its hash names: kinds come in no order, and a probe that goes on is a branch
	// mispredicted.
	table, shift := kindTable(nil, 64)
	readyBinpack := reuse(s.ready, len(groups))[:0]
	c.binpack = reuse(s.binpack, len(groups))[:0]
	c.kindOf = reuse(s.kindOf, len(groups))
	c.info = reuse(s.info, len(groups))
	last := int32(-1) // the kind found last: jobs of a kind often come in runs
	for k := range groups {
		g := &groups[k]
		bp := g.Placement == Binpack
		c.info[k] = groupInfo{off: int32(c.shards), n: int32(len(g.Items)), integrity: g.Integrity, binpack: bp}
		// Failover groups first, then READY ones, each in the order given.
		switch {
		case bp && !g.Integrity:
			c.binpack = append(c.binpack, k)
		case bp:
			readyBinpack = append(readyBinpack, k)
		case !g.Integrity:
			c.spread[0] = append(c.spread[0], k)
		default:
			c.spread[1] = append(c.spread[1], k)
		}
		c.execNeeded = c.execNeeded || g.Executor != (Resources{})
		id := last
		if id < 0 || !kinds[id].is(g) {
			slot := kindSlot(g.Need, g.Executor, g.App, shift)
			for id = table[slot] - 1; id >= 0 && !kinds[id].is(g); id = table[slot] - 1 {
				slot = (slot + 1) & uint64(len(table)-1)
			}
			if id < 0 {
				id = int32(len(kinds))
				kinds = append(kinds, shardKind{g.Need, g.Executor, g.App})
				c.kindShards = append(c.kindShards, 0)
				table[slot] = id + 1
				if 8*len(kinds) > len(table) {
					table, shift = kindTable(kinds, 4*len(table))
				}
			}
		}
		c.kindOf[k], c.info[k].kind, last = id, id, id
		c.kindShards[id] += len(g.Items)
		c.shards += len(g.Items)
		if !g.Integrity {
			c.failoverShards += len(g.Items)
		}
		need = need.plus(Resources{g.Need.CPUs * float64(len(g.Items)), g.Need.MemMB * float64(len(g.Items))})
		if k == 0 || g.Need.CPUs < c.minNeed.CPUs {
			c.minNeed.CPUs = g.Need.CPUs
		}
		if k == 0 || g.Need.MemMB < c.minNeed.MemMB {
			c.minNeed.MemMB = g.Need.MemMB
		}
	}
	c.binpack, c.ready = append(c.binpack, readyBinpack...), readyBinpack
	if c.execNeeded && c.sets.ids == nil {
		c.sets.init()
	}
	c.nKinds, c.kinds = len(kinds), kinds
	c.need = need
	c.kindNeed = make([]Resources, len(kinds))
	for k, kd := range kinds {
		c.kindNeed[k] = kd.need
	}
	c.cpuOrder, c.memOrder = make([]kindAmount, len(kinds)), make([]kindAmount, len(kinds))
	for k := range kinds {
		c.cpuOrder[k] = kindAmount{int32(k), c.kindNeed[k].CPUs}
		c.memOrder[k] = kindAmount{int32(k), c.kindNeed[k].MemMB}
	}
	byNeed := func(a, b kindAmount) int { return cmpFloat(a.need, b.need) }
	slices.SortFunc(c.cpuOrder, byNeed)
	slices.SortFunc(c.memOrder, byNeed)
	c.memPerCPU = [2]float64{math.Inf(1), 0}
	ratio := func(r Resources) {
		if r == (Resources{}) {
			return // takes nothing
		}
		x := math.Inf(1)
		if r.CPUs > 0 {
			x = r.MemMB / r.CPUs
		}
		c.memPerCPU = [2]float64{min(c.memPerCPU[0], x), max(c.memPerCPU[1], x)}
	}
	for _, kd := range kinds {
		ratio(kd.need)
		ratio(kd.executor)
	}
	if r := c.memPerCPU[0]; r > 0 && !math.IsInf(r, 1) {
		c.cpuPerMem = 1 / r
	}
	c.first = c.bucketed(s.first)
	for _, b := range c.first.buckets {
		u := c.usable(b.key.free)
		n := float64(len(b.members))
		c.usable0 = Resources{c.usable0.CPUs + n*u.CPUs, c.usable0.MemMB + n*u.MemMB}
	}
	c.minHosts = max(hostsFor(c.first.buckets, need.CPUs, func(r Resources) float64 { return r.CPUs }),
		hostsFor(c.first.buckets, need.MemMB, func(r Resources) float64 { return r.MemMB }))
	c.countFits()
	for k := range c.kindFits {
		c.minHosts = max(c.minHosts, c.hostsHolding(k, c.kindShards[k]))
	}
	return c
}

// usable is what shards can use of free on one agent: nothing when less than any shard
// needs, and no more cpu than its memory holds at the least memory per cpu of any shard or
// executor, nor more memory than its cpu holds at the most. The sum over the agents sees
// fragmentation, which their total free does not: an agent with memory but no cpu left
// holds nothing.
func (c *common) usable(free Resources) Resources {
	if free.CPUs+epsilon < c.minNeed.CPUs || free.MemMB+epsilon < c.minNeed.MemMB {
		return Resources{}
	}
	u := free
	if c.cpuPerMem > 0 {
		u.CPUs = min(u.CPUs, (free.MemMB+epsilon)*c.cpuPerMem)
	}
	if r := c.memPerCPU[1]; !math.IsInf(r, 1) {
		u.MemMB = min(u.MemMB, (free.CPUs+epsilon)*r)
	}
	return u
}

// fitCount is how many shards of a kind fit on an empty agent of one offer, and how many
// agents offer it.
type fitCount struct{ fit, agents int }

// maxFitKindsOffers bounds the kinds × offers counted by countFits.
const maxFitKindsOffers = 1 << 14

// countFits fills kindFits, kindCap and capSum from the first buckets, if there are few
// enough kinds and offers.
func (c *common) countFits() {
	buckets := c.first.buckets
	if c.nKinds*len(buckets) > maxFitKindsOffers {
		return
	}
	c.kindFits, c.kindCap = make([][]fitCount, c.nKinds), make([]int, c.nKinds)
	for k, n := range c.kindNeed {
		fits := make([]fitCount, 0, len(buckets))
		held := 0
		for b := range buckets {
			f := fitsOn(n, buckets[b].key.offer, c.kindShards[k])
			fits = append(fits, fitCount{f, len(buckets[b].members)})
			held = min(c.kindShards[k], held+f*len(buckets[b].members))
		}
		slices.SortFunc(fits, func(a, b fitCount) int { return b.fit - a.fit })
		c.kindFits[k], c.kindCap[k] = fits, held
		c.capSum += held
	}
}

// fitsOn is how many shards needing n fit on an empty agent offering offer, at most most. It
// counts generously, so that bounds built on it hold: executors left out, and the float error
// of the packer's running subtraction (which epsilon absorbs) allowed for.
func fitsOn(n, offer Resources, most int) int {
	f := float64(most)
	if n.CPUs > 0 {
		f = min(f, math.Floor((offer.CPUs+epsilon)/n.CPUs*(1+1e-9)))
	}
	if n.MemMB > 0 {
		f = min(f, math.Floor((offer.MemMB+epsilon)/n.MemMB*(1+1e-9)))
	}
	return int(max(f, 0))
}

// hostsHolding is a lower bound on the agents that any packing placing m shards of kind k
// uses: the fewest agents, those holding the most first, that hold m. When no packing places
// m, one more than there are agents.
func (c *common) hostsHolding(k, m int) int {
	hosts := 0
	for _, f := range c.kindFits[k] {
		if m <= 0 {
			break
		}
		if f.fit == 0 {
			break
		}
		n := min(f.agents, (m+f.fit-1)/f.fit)
		hosts, m = hosts+n, m-n*f.fit
	}
	if m > 0 {
		return len(c.agents) + 1
	}
	return hosts
}

// unbeatable says whether no packing beats o: it places every failover shard, as many
// shards as any packing can, on no more agents than any packing placing that many needs.
// Any packing placing P shards places at least P minus what the other kinds can hold of each
// kind, which takes agents (hostsHolding).
func (c *common) unbeatable(o *outcome) bool {
	if o.failover != c.failoverShards {
		return false
	}
	if o.placed == c.shards && o.hosts <= c.minHosts {
		return true
	}
	if c.kindFits == nil || o.placed < c.capSum {
		return false
	}
	for k := range c.kindFits {
		if o.hosts <= c.hostsHolding(k, o.placed-(c.capSum-c.kindCap[k])) {
			return true
		}
	}
	return false
}

// hostsFor is how many agents, taking the largest first, it takes to offer need of one
// resource (of picks it from an offer): no packing of that much on these agents uses fewer.
// The agents come as buckets: equal offers, counted.
func hostsFor(buckets []bucket, need float64, of func(Resources) float64) int {
	if need <= epsilon {
		return 0
	}
	type size struct {
		offer float64
		count int
	}
	sizes := make([]size, 0, len(buckets))
	for _, b := range buckets {
		sizes = append(sizes, size{of(b.key.offer), len(b.members)})
	}
	slices.SortFunc(sizes, func(a, b size) int { return cmpFloat(b.offer, a.offer) })
	n, sum := 0, 0.0
	for _, s := range sizes {
		if s.offer <= 0 {
			break
		}
		k := min(s.count, int((need-sum-epsilon)/s.offer)+1)
		n, sum = n+k, sum+float64(k)*s.offer
		if sum+epsilon >= need {
			return n
		}
	}
	return n
}

// execSets interns the sets of apps with an executor on an agent, so that a bucket key holds
// a number, not a map.
type execSets struct {
	sets []map[string]bool
	ids  map[string]int32
	with map[withKey]int32
}

type withKey struct {
	set int32
	app string
}

func (s *execSets) init() {
	s.sets = []map[string]bool{{}}
	s.ids = map[string]int32{"": 0}
	s.with = map[withKey]int32{}
}

func (s *execSets) of(m map[string]bool) int32 {
	var apps []string
	for app, on := range m {
		if on {
			apps = append(apps, app)
		}
	}
	if len(apps) == 0 {
		return 0
	}
	sort.Strings(apps)
	key := strings.Join(apps, "\x00")
	if id, ok := s.ids[key]; ok {
		return id
	}
	set := make(map[string]bool, len(apps))
	for _, app := range apps {
		set[app] = true
	}
	id := int32(len(s.sets))
	s.sets = append(s.sets, set)
	s.ids[key] = id
	return id
}

// plus is set with app added.
func (s *execSets) plus(set int32, app string) int32 {
	if s.sets[set][app] {
		return set
	}
	if id, ok := s.with[withKey{set, app}]; ok {
		return id
	}
	m := make(map[string]bool, len(s.sets[set])+1)
	for a := range s.sets[set] {
		m[a] = true
	}
	m[app] = true
	id := s.of(m)
	s.with[withKey{set, app}] = id
	return id
}

// bucketKey is what makes agents interchangeable for the packer. The offer is the capacity
// that the score normalises by.
type bucketKey struct {
	offer Resources
	free  Resources
	set   int32
}

// bucketIndex finds a bucket by its key: an open-addressed table of bucket+1 (0: empty),
// copied in one move when a try starts, and hashing floats more cheaply than a map.
type bucketIndex struct {
	slots []int32 // a power of two long, at most half full
	n     int
}

func (x *bucketIndex) reset(agents int) {
	size := 16
	for size < 2*min(agents, 1024) {
		size *= 2
	}
	x.slots, x.n = slices.Grow(x.slots[:0], size)[:size], 0
	clear(x.slots)
}

// bucketHash hashes as keys compare: -0 as 0 (adding 0 makes it so).
func bucketHash(k bucketKey) uint64 {
	h := math.Float64bits(k.offer.CPUs+0) ^ math.Float64bits(k.offer.MemMB+0)>>1 ^ math.Float64bits(k.free.CPUs+0)>>2 ^
		math.Float64bits(k.free.MemMB+0)>>3 ^ uint64(k.set)
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	return h ^ h>>33
}

// find returns the bucket of key k, or -1 and the slot to add it at.
func (x *bucketIndex) find(buckets []bucket, k bucketKey) (slot uint64, b int32) {
	mask := uint64(len(x.slots) - 1)
	for slot = bucketHash(k) & mask; x.slots[slot] != 0; slot = (slot + 1) & mask {
		if b := x.slots[slot] - 1; buckets[b].key == k {
			return slot, b
		}
	}
	return slot, -1
}

// add puts bucket b, whose key find did not find, at slot.
func (x *bucketIndex) add(buckets []bucket, slot uint64, b int32) {
	x.slots[slot] = b + 1
	if x.n++; 2*x.n <= len(x.slots) {
		return
	}
	x.slots = make([]int32, 2*len(x.slots))
	for b := range buckets {
		slot, _ := x.find(buckets, buckets[b].key)
		x.slots[slot] = int32(b) + 1
	}
}

// bucket holds interchangeable agents in a min-heap of their indices: the lowest index goes
// first, as it would in a scan of the agents in order.
type bucket struct {
	key      bucketKey
	members  []int32
	inActive bool
}

// packer is the state of one try.
type packer struct {
	c       *common
	free    []Resources
	set     []int32
	bucket  []int32 // per agent
	heapPos []int32 // per agent: its position in its bucket's members
	buckets []bucket
	byKey   bucketIndex
	// active lists the buckets that may take a shard; empty ones leave it when a scan meets
	// them, and buckets with less than minNeed never join.
	active []int32
	used   []bool
	hosts  int
	// last is the agent the previous BINPACK shard went to, and the shard's kind: a shard of
	// the same kind goes there while it fits (see Pack's doc). -1: none.
	kinds []kindChoice // per kind of shard (common.kindOf)
	// loose are the agents last given shards, out of the buckets while they take more (a
	// bucket move costs a map look-up); scans look at them one by one. isLoose per agent.
	loose   []int32
	isLoose []bool
	// changes logs every agent's moves (takes and rollbacks), so that the reasons of a kind of
	// shard that failed before are brought up to date from what changed since. seen marks,
	// per agent, the last update (seenMark) that looked at it.
	changes  []change
	seen     []int32
	seenMark int32
	// failed holds the kinds of shard that found no room, and why. While no rollback freed
	// anything (gen unchanged), a shard of such a kind fails without a scan: agents only fill.
	failed []*kindReasons // per kind of shard (common.kindOf)
	gen    int
	// hasApp caches, per executor set, whether it holds app hasAppOf: 0 unknown, 1 no, 2 yes.
	hasApp   []int8
	hasAppOf string
	left     []int // the memory of runUnless's shards left per kind
	// usable is the sum of common.usable over the agents' free, kept only when bounded (the
	// try has a bound to meet); usedFree what the agents used have left.
	usable, usedFree Resources
	bounded          bool
	reasonsOf        []kindReasons // the memory of failed
}

// change is a move of an agent, with its state before: its state after is that before its
// next move, or its state now.
type change struct {
	agent   int32
	oldSet  int32
	oldFree Resources
}

type kindReasons struct {
	cpu, mem int // agents turning the kind away for cpu, for memory
	changes  int // len(changes) when cpu and mem were counted
	gen      int
}

type shardKind struct {
	need, executor Resources
	app            string
}

// groupInfo is a group as the tries read it: its shards are outcome.at[off:off+n], of kind
// kind (common.kindOf).
type groupInfo struct {
	off, n, kind       int32
	integrity, binpack bool
}

// kindSlot is the slot of a kind in a table of 1<<(64-shift) slots: the top bits of a
// product, which every bit of the amounts (whose low bits are mostly zero: 0.5, 2, 1024)
// reaches.
func kindSlot(need, executor Resources, app string, shift uint) uint64 {
	h := math.Float64bits(need.CPUs)*0x9e3779b97f4a7c15 ^ math.Float64bits(need.MemMB) ^
		math.Float64bits(executor.CPUs)>>7 ^ math.Float64bits(executor.MemMB)>>13 ^ uint64(len(app))
	return h * 0xff51afd7ed558ccd >> shift
}

// kindTable is an open-addressed table of size slots (a power of two) holding kinds, and
// the shift of kindSlot for it.
func kindTable(kinds []shardKind, size int) ([]int32, uint) {
	t, shift := make([]int32, size), uint(bits.LeadingZeros64(uint64(size-1)))
	for k := range kinds {
		slot := kindSlot(kinds[k].need, kinds[k].executor, kinds[k].app, shift)
		for t[slot] != 0 {
			slot = (slot + 1) & uint64(size-1)
		}
		t[slot] = int32(k) + 1
	}
	return t, shift
}

// is says whether g's shards are of kind k; the need, which differs most often, first.
func (k *shardKind) is(g *Group) bool {
	return k.need == g.Need && k.executor == g.Executor && k.app == g.App
}

// bucketed is the agents in their buckets, before any try, in p's memory if not nil.
func (c *common) bucketed(p *packer) *packer {
	n := len(c.agents)
	if p == nil {
		p = &packer{}
	}
	p.c = c
	p.free = slices.Grow(p.free[:0], n)[:n]
	p.set = append(p.set[:0], c.set0...)
	p.bucket = slices.Grow(p.bucket[:0], n)[:n]
	p.heapPos = slices.Grow(p.heapPos[:0], n)[:n]
	for b := range p.buckets {
		p.buckets[b].members = p.buckets[b].members[:0]
	}
	p.buckets, p.active = p.buckets[:0], p.active[:0]
	p.byKey.reset(n)
	for i, a := range c.agents {
		p.free[i] = a.Free
		if i > 0 && a.Free == c.agents[i-1].Free && p.set[i] == p.set[i-1] {
			// Like the agent before (offers come in runs of equal agents): its bucket, and
			// no map look-up. Indices grow, so the heap needs no sifting.
			b := p.bucket[i-1]
			p.bucket[i] = b
			p.heapPos[i] = int32(len(p.buckets[b].members))
			p.buckets[b].members = append(p.buckets[b].members, int32(i))
			continue
		}
		p.join(int32(i))
	}
	return p
}

// newPacker returns the packer of a try, at the start: a copy of the first one, so that the
// agents are bucketed once per Pack. Tries run one after the other and share its memory.
func (c *common) newPacker() *packer {
	f, p := c.first, c.spare
	if p == nil {
		p = &packer{c: c}
		c.spare = p
	}
	p.free = append(p.free[:0], f.free...)
	p.set = append(p.set[:0], f.set...)
	p.bucket = append(p.bucket[:0], f.bucket...)
	p.heapPos = append(p.heapPos[:0], f.heapPos...)
	old := p.buckets
	p.buckets = p.buckets[:0]
	for b, fb := range f.buckets {
		var members []int32
		if b < len(old) {
			members = old[b].members[:0] // read before the append below overwrites old[b]
		}
		p.buckets = append(p.buckets, bucket{key: fb.key, members: append(members, fb.members...), inActive: fb.inActive})
	}
	p.byKey.slots, p.byKey.n = append(p.byKey.slots[:0], f.byKey.slots...), f.byKey.n
	p.active = append(p.active[:0], f.active...)
	p.used = resetBools(p.used, len(c.agents))
	p.isLoose = resetBools(p.isLoose, len(c.agents))
	p.loose = p.loose[:0]
	p.changes, p.seenMark = p.changes[:0], 0
	if cap(p.changes) < c.shards {
		p.changes = make([]change, 0, c.shards) // a take each, rollbacks aside
	}
	if len(p.failed) != c.nKinds {
		p.failed, p.reasonsOf = make([]*kindReasons, c.nKinds), make([]kindReasons, c.nKinds)
		p.kinds = make([]kindChoice, c.nKinds)
	}
	clear(p.failed)
	for k := range p.kinds {
		p.kinds[k] = kindChoice{agent: -1}
	}
	p.hosts, p.gen, p.usable, p.usedFree = 0, 0, c.usable0, Resources{}
	return p
}

func resetInt32s(b []int32, n int) []int32 {
	if cap(b) < n {
		return make([]int32, n)
	}
	b = b[:n]
	clear(b)
	return b
}

func resetBools(b []bool, n int) []bool {
	if cap(b) < n {
		return make([]bool, n)
	}
	b = b[:n]
	clear(b)
	return b
}

func (p *packer) key(i int32) bucketKey {
	return bucketKey{offer: p.c.offer[i], free: p.free[i], set: p.set[i]}
}

// join puts agent i in the bucket of its current state.
func (p *packer) join(i int32) {
	k := p.key(i)
	slot, b := p.byKey.find(p.buckets, k)
	if b < 0 {
		b = int32(len(p.buckets))
		var members []int32 // an earlier Pack's, if any
		if len(p.buckets) < cap(p.buckets) {
			members = p.buckets[:b+1][b].members[:0]
		}
		p.buckets = append(p.buckets, bucket{key: k, members: members})
		p.byKey.add(p.buckets, slot, b)
	}
	bk := &p.buckets[b]
	p.bucket[i] = b
	bk.members = append(bk.members, i)
	p.heapPos[i] = int32(len(bk.members) - 1)
	p.up(bk, len(bk.members)-1)
	if !bk.inActive && k.free.CPUs+epsilon >= p.c.minNeed.CPUs && k.free.MemMB+epsilon >= p.c.minNeed.MemMB {
		bk.inActive = true
		p.active = append(p.active, b)
	}
}

// leave takes agent i out of its bucket.
func (p *packer) leave(i int32) {
	bk := &p.buckets[p.bucket[i]]
	h, last := int(p.heapPos[i]), len(bk.members)-1
	if h != last {
		bk.members[h] = bk.members[last]
		p.heapPos[bk.members[h]] = int32(h)
	}
	bk.members = bk.members[:last]
	if h < last {
		p.down(bk, h)
		p.up(bk, h)
	}
}

func (p *packer) up(bk *bucket, h int) {
	m := bk.members
	for h > 0 {
		parent := (h - 1) / 2
		if m[parent] <= m[h] {
			return
		}
		m[parent], m[h] = m[h], m[parent]
		p.heapPos[m[parent]], p.heapPos[m[h]] = int32(parent), int32(h)
		h = parent
	}
}

func (p *packer) down(bk *bucket, h int) {
	m := bk.members
	for {
		c := 2*h + 1
		if c >= len(m) {
			return
		}
		if c+1 < len(m) && m[c+1] < m[c] {
			c++
		}
		if m[h] <= m[c] {
			return
		}
		m[h], m[c] = m[c], m[h]
		p.heapPos[m[h]], p.heapPos[m[c]] = int32(h), int32(c)
		h = c
	}
}

// need returns what a shard of kind k takes on an agent with executor set set: the shard,
// plus the executor if the app has none there yet.
func (p *packer) need(set int32, k int32) Resources {
	if !p.c.execNeeded {
		return p.c.kindNeed[k] // small enough to inline: most Packs need no executor
	}
	return p.needExec(set, k)
}

func (p *packer) needExec(set int32, k int32) Resources {
	kd := &p.c.kinds[k]
	if kd.executor == (Resources{}) || p.has(set, kd.app) {
		return kd.need
	}
	return kd.need.plus(kd.executor)
}

// has says whether executor set set holds app.
func (p *packer) has(set int32, app string) bool {
	if app != p.hasAppOf || p.hasApp == nil {
		p.hasAppOf = app
		p.hasApp = make([]int8, len(p.c.sets.sets))
	}
	for int(set) >= len(p.hasApp) {
		p.hasApp = append(p.hasApp, 0)
	}
	if p.hasApp[set] == 0 {
		p.hasApp[set] = 1
		if p.c.sets.sets[set][app] {
			p.hasApp[set] = 2
		}
	}
	return p.hasApp[set] == 2
}

func fitsIn(n, free Resources) bool {
	return n.CPUs <= free.CPUs+epsilon && n.MemMB <= free.MemMB+epsilon
}

func (p *packer) fits(i int32, k int32) bool { return fitsIn(p.need(p.set[i], k), p.free[i]) }

// score is how full an agent offering offer, with free left, is after taking n: the mean of
// its cpu and memory use relative to the offer (Fenzo's cpuMemBinPacker).
func score(offer, free, n Resources) float64 {
	return (use(offer.CPUs, free.CPUs, n.CPUs) + use(offer.MemMB, free.MemMB, n.MemMB)) / 2
}

func use(offer, free, n float64) float64 {
	if offer <= 0 {
		return 1 // nothing offered is nothing left
	}
	return (offer - free + n) / offer
}

// maxLoose bounds the agents out of the buckets: enough for the agents that shards of a few
// kinds in turn go to, few enough for scans to look at one by one.
const maxLoose = 8

// take books a shard of kind k on agent i; it returns the undo record.
func (p *packer) take(i int32, k int32) undo {
	u := undo{agent: i, free: p.free[i], set: p.set[i]}
	n := p.need(p.set[i], k)
	if !p.isLoose[i] {
		if len(p.loose) == maxLoose {
			p.join(p.loose[0])
			p.isLoose[p.loose[0]] = false
			p.loose = append(p.loose[:0], p.loose[1:]...)
		}
		p.leave(i)
		p.loose = append(p.loose, i)
		p.isLoose[i] = true
	}
	if !p.used[i] {
		p.usedFree = p.usedFree.plus(p.free[i])
	}
	p.free[i] = Resources{p.free[i].CPUs - n.CPUs, p.free[i].MemMB - n.MemMB}
	if p.bounded {
		p.use(u.free, p.free[i])
	}
	p.usedFree = Resources{p.usedFree.CPUs - n.CPUs, p.usedFree.MemMB - n.MemMB}
	if app := p.c.kinds[k].app; p.c.execNeeded && !p.has(p.set[i], app) {
		p.set[i] = p.c.sets.plus(p.set[i], app)
	}
	p.changes = append(p.changes, change{i, u.set, u.free})
	if !p.used[i] {
		p.used[i] = true
		p.hosts++
		u.firstUse = true
	}
	return u
}

// settle puts the loose agents back in the buckets of their state.
func (p *packer) settle() {
	for _, i := range p.loose {
		p.join(i)
		p.isLoose[i] = false
	}
	p.loose = p.loose[:0]
}

// use brings p.usable up to date with an agent's free going from was to is.
func (p *packer) use(was, is Resources) {
	a, b := p.c.usable(was), p.c.usable(is)
	p.usable = Resources{p.usable.CPUs - a.CPUs + b.CPUs, p.usable.MemMB - a.MemMB + b.MemMB}
}

type undo struct {
	agent    int32
	free     Resources
	set      int32
	firstUse bool
}

func (p *packer) rollback(us []undo) {
	if len(us) == 0 {
		return // nothing taken, nothing freed: the choices and failures stay valid
	}
	p.settle()
	for k := len(us) - 1; k >= 0; k-- {
		u := us[k]
		p.leave(u.agent)
		p.changes = append(p.changes, change{u.agent, p.set[u.agent], p.free[u.agent]})
		freed := Resources{u.free.CPUs - p.free[u.agent].CPUs, u.free.MemMB - p.free[u.agent].MemMB}
		p.usedFree = p.usedFree.plus(freed)
		if p.bounded {
			p.use(p.free[u.agent], u.free)
		}
		p.free[u.agent], p.set[u.agent] = u.free, u.set
		p.join(u.agent)
		if u.firstUse {
			p.used[u.agent] = false
			p.hosts--
			p.usedFree = Resources{p.usedFree.CPUs - u.free.CPUs, p.usedFree.MemMB - u.free.MemMB}
		}
	}
	p.gen++ // freed room may now score better than the last choices, and take kinds of shard that failed before
}

// choose returns the agent for a BINPACK shard of kind k under rule r, or -1.
//
// Between rollbacks agents only fill up, and filling raises an agent's score for every kind of
// shard (what it took counts as used, and is at least what an executor it gained saves) until
// the shard no longer fits. So the agents that did not change since a kind's last choice rank
// as they did then, below the agent chosen: while that agent still fits, the choice is among
// it and the agents changed since (the log), not among all. Only when it no longer fits does
// the rule scan the buckets again.
func (p *packer) choose(k int32, r rule) int32 {
	kc := &p.kinds[k]
	if kc.agent >= 0 && kc.gen == p.gen && p.fits(kc.agent, k) {
		if i, flag, ok := p.refresh(kc, k, r); ok {
			kc.agent, kc.flag, kc.changes = i, flag, len(p.changes)
			return i
		}
	}
	i, flag := p.scan(k, r)
	*kc = kindChoice{agent: i, flag: flag, changes: len(p.changes), gen: p.gen}
	return i
}

// kindChoice is the last choice for a kind of shard: the agent, whether it was the first
// scoring above goodEnough (firstGoodEnough) or an empty agent (fewestAgents), and when.
type kindChoice struct {
	agent   int32
	flag    bool
	changes int // len(changes) then
	gen     int
}

// agentScore is agent i's score for a shard of kind k.
func (p *packer) agentScore(i int32, k int32) float64 {
	return score(p.c.offer[i], p.free[i], p.need(p.set[i], k))
}

// refresh redoes kc's choice, whose agent still fits, from the agents changed since; ok is
// false when that cannot tell (fewestAgents: the empty agent chosen is now used).
func (p *packer) refresh(kc *kindChoice, k int32, r rule) (agent int32, flag, ok bool) {
	h := kc.agent
	best, bestS := h, 0.0 // h's score, looked at only when needed: most logs hold no rival
	changed := p.changes[kc.changes:]
	switch {
	case r == firstGoodEnough && kc.flag:
		// Every unchanged agent before h scored at most goodEnough, or did not fit.
		for _, ch := range changed {
			if i := ch.agent; i < best && p.fits(i, k) && p.agentScore(i, k) > goodEnough {
				best = i
			}
		}
		return best, true, true
	case r == fewestAgents && kc.flag:
		// No used agent fit then; the agents used since are in the log, and h is the largest
		// agent still empty if it is still empty.
		found := false
		for _, ch := range changed {
			if i := ch.agent; p.fits(i, k) {
				if s := p.agentScore(i, k); !found || s > bestS || s == bestS && i < best {
					best, bestS, found = i, s, true
				}
			}
		}
		if found {
			return best, false, true
		}
		return h, true, !p.used[h]
	}
	good, scored := int32(-1), false
	if r == firstGoodEnough {
		if bestS, scored = p.agentScore(h, k), true; bestS > goodEnough {
			good = h
		}
	}
	for _, ch := range changed {
		i := ch.agent
		if i == h || !p.fits(i, k) {
			continue
		}
		if !scored {
			bestS, scored = p.agentScore(h, k), true
		}
		s := p.agentScore(i, k)
		if r == firstGoodEnough && s > goodEnough && (good < 0 || i < good) {
			good = i
		}
		if s > bestS || s == bestS && i < best {
			best, bestS = i, s
		}
	}
	if good >= 0 {
		return good, true, true
	}
	return best, false, true
}

// scan chooses among all the buckets; flag as in kindChoice. The choice does not depend on
// the order in which the candidates are looked at (ties go to the lowest index).
func (p *packer) scan(k int32, r rule) (agent int32, flag bool) {
	for a := 0; a < len(p.active); {
		if bk := &p.buckets[p.active[a]]; len(bk.members) == 0 {
			bk.inActive = false
			p.active[a] = p.active[len(p.active)-1]
			p.active = p.active[:len(p.active)-1]
			continue
		}
		a++
	}
	best, good, empty := int32(-1), int32(-1), int32(-1)
	bestScore, emptySize := 0.0, 0.0
	// One loop over the buckets' first agents, then the loose agents, so that the choice so
	// far stays in registers.
	nb := len(p.active)
	for c := range nb + len(p.loose) {
		var i, set int32
		var offer, free Resources
		if c < nb {
			bk := &p.buckets[p.active[c]]
			i, offer, free, set = bk.members[0], bk.key.offer, bk.key.free, bk.key.set
		} else {
			i = p.loose[c-nb]
			offer, free, set = p.c.offer[i], p.free[i], p.set[i]
		}
		n := p.need(set, k)
		if !fitsIn(n, free) {
			continue
		}
		if r == fewestAgents && free == offer {
			if size := share(offer.CPUs, p.c.total.CPUs) + share(offer.MemMB, p.c.total.MemMB); empty < 0 || size > emptySize || size == emptySize && i < empty {
				empty, emptySize = i, size
			}
			continue
		}
		s := score(offer, free, n)
		if r == firstGoodEnough && s > goodEnough && (good < 0 || i < good) {
			good = i
		}
		if best < 0 || s > bestScore || s == bestScore && i < best {
			best, bestScore = i, s
		}
	}
	switch {
	case good >= 0:
		return good, true
	case best < 0 && empty >= 0:
		return empty, true
	}
	return best, false
}

// leastLoaded returns the fitting agent with the most free cpu (then memory), or -1.
func (p *packer) leastLoaded(k int32) int32 {
	p.settle()
	best := int32(-1)
	var bestFree Resources
	for _, b := range p.active {
		bk := &p.buckets[b]
		if len(bk.members) == 0 || !fitsIn(p.need(bk.key.set, k), bk.key.free) {
			continue
		}
		f, i := bk.key.free, bk.members[0]
		if best < 0 || f.CPUs > bestFree.CPUs || f.CPUs == bestFree.CPUs && (f.MemMB > bestFree.MemMB || f.MemMB == bestFree.MemMB && i < best) {
			best, bestFree = i, f
		}
	}
	return best
}

// run packs every group under try t, with its Result.
func (c *common) run(t try) outcome {
	o := c.runUnless(t, nil)
	o.result(c)
	return o
}

// runUnless packs every group under try t, unless it can no longer beat b (nil: no bound);
// then it stops with abandoned set.
func (c *common) runUnless(t try, b *bound) outcome {
	p := c.newPacker()
	p.bounded = b != nil
	var o outcome
	if n := len(c.spareRes); n > 0 {
		spare := c.spareRes[n-1]
		c.spareRes = c.spareRes[:n-1]
		o.at, o.fails = slices.Grow(spare.at[:0], c.shards)[:c.shards], spare.fails[:0]
	} else {
		o.at = make([]int32, c.shards)
	}
	failedFailover := 0
	left := append(p.left[:0], c.kindShards...) // per kind: shards not yet tried
	p.left = left
	// closed: every kind of shard left found no room since the last rollback, so every group
	// left fails, and nothing changes: they fail without a look at the agents.
	closed := false
	// The bound on what is left costs O(kinds): it is looked at when a shard failed, else
	// every so many groups.
	every, since, leftAll := max(8, c.nKinds/4), 0, c.shards
	leftNeed := c.need // of the shards not yet tried, without executors
	place := func(g int) bool {
		gi := &c.info[g]
		n := int(gi.n)
		placed := o.at[gi.off : gi.off+gi.n]
		if closed && n > 0 {
			o.fails = append(o.fails, p.fail(g, placed))
			if !gi.integrity {
				failedFailover += n
			}
			return false
		}
		f, failed := p.place(g, gi, t.rule, placed)
		if failed {
			o.fails = append(o.fails, f)
		}
		got := n
		if failed {
			got = 0
			for _, i := range placed {
				if i >= 0 {
					got++
				}
			}
		}
		o.placed += got
		if !gi.integrity {
			o.failover += got
			failedFailover += n - got
		}
		left[gi.kind] -= n
		if b == nil {
			closed = closed || failed && c.nKinds <= maxClosedKinds && p.allHopeless(left)
			return false
		}
		leftAll -= n
		need := c.kinds[gi.kind].need
		leftNeed = Resources{leftNeed.CPUs - need.CPUs*float64(n), leftNeed.MemMB - need.MemMB*float64(n)}
		// A tie on shards placed with this bound means every shard left is placed: then the
		// agents they need can be counted.
		hosts := p.hosts // looked at only on a tie in failover shards and in shards
		if c.failoverShards-failedFailover == b.best.failover && o.placed+leftAll == b.best.placed {
			hosts += p.moreHosts(leftNeed)
		}
		if b.lost(c, failedFailover, o.placed+leftAll, hosts) {
			return true
		}
		// After a failure, nothing more is placed if every kind left has found no room.
		if failed && p.allHopeless(left) {
			return b.lost(c, failedFailover, o.placed, p.hosts)
		}
		if since++; since < every {
			return false
		}
		since = 0
		return b.lost(c, failedFailover, o.placed+p.mostMore(left), p.hosts)
	}
	next := 0 // in t.order
	for phase, integrity := range []bool{false, true} {
		for _, g := range c.spread[phase] {
			if place(g) {
				o.abandoned = true
				return o
			}
		}
		for ; next < len(t.order) && c.info[t.order[next]].integrity == integrity; next++ {
			if place(t.order[next]) {
				o.abandoned = true
				return o
			}
		}
	}
	o.hosts = p.hosts
	return o
}

// maxClosedKinds bounds the kinds that a run looks through, after a failure, to see whether
// all those left are hopeless.
const maxClosedKinds = 64

// allHopeless says whether every kind of shard with shards left found no room since the
// last rollback.
func (p *packer) allHopeless(left []int) bool {
	for k, n := range left {
		if n > 0 {
			if kr := p.failed[k]; kr == nil || kr.gen != p.gen {
				return false
			}
		}
	}
	return true
}

// fail fails group gi, of a kind that found no room since the last rollback, as place would:
// no shard placed, for the kind's reasons.
func (p *packer) fail(gi int, placed []int32) failure {
	info := &p.c.info[gi]
	for k := range placed {
		placed[k] = -1
	}
	f := failure{group: int32(gi), first: 0, rolledBack: info.integrity}
	if kr := p.failed[info.kind]; kr.changes == len(p.changes) {
		f.cpu, f.mem = int32(kr.cpu), int32(kr.mem) // up to date: nothing changes once closed
	} else {
		f.setReasons(p.reasons(info.kind))
	}
	return f
}

// moreHosts is a lower bound on the agents, beyond those used, that placing shards needing
// need (and perhaps executors) takes: what the agents used have left does not hold it, and
// no agent offers more than maxOffer.
func (p *packer) moreHosts(need Resources) int {
	more := func(need, free, offer float64) int {
		if need-free <= epsilon || offer <= 0 {
			return 0
		}
		return int(math.Ceil((need - free - epsilon) / offer))
	}
	return max(more(need.CPUs, p.usedFree.CPUs, p.c.maxOffer.CPUs), more(need.MemMB, p.usedFree.MemMB, p.c.maxOffer.MemMB))
}

// mostMore is an upper bound on the shards, of left per kind, that can still be placed: no
// more than the cpu usable on the agents takes, least first, nor their usable memory (see
// common.usable).
func (p *packer) mostMore(left []int) int {
	c := p.c
	// p.usable is a running sum of terms that are not whole numbers: allowed a little more.
	slack := epsilon * float64(len(c.agents)+1)
	return min(most(c.cpuOrder, left, p.usable.CPUs*(1+1e-9)+slack), most(c.memOrder, left, p.usable.MemMB*(1+1e-9)+slack))
}

// kindAmount is a kind of shard's need of one resource.
type kindAmount struct {
	kind int32
	need float64
}

// most is how many shards of left per kind fit in free of one resource, taking the kinds in
// order, least need first.
func most(order []kindAmount, left []int, free float64) int {
	count := 0
	for _, ka := range order {
		n := left[ka.kind]
		if n == 0 {
			continue
		}
		if ka.need <= 0 {
			count += n
			continue
		}
		m := n // a multiplication decides most kinds, which fit whole; it errs only upwards
		if float64(n)*ka.need > free+epsilon {
			m = min(n, int((free+epsilon)/ka.need))
		}
		count += m
		free -= float64(m) * ka.need
		if m < n {
			break
		}
	}
	return count
}

// failure is a group not wholly placed: its shards from first on found no room, for the
// reasons counted then (its shards before first were placed, or rolled back).
type failure struct {
	group, first int32 // 20 bytes, not 48: a try that leaves thousands out writes as many
	cpu, mem     int32
	noAgents     bool
	rolledBack   bool
}

// setReasons records the counts of agents turning the shard away.
func (f *failure) setReasons(cpu, mem int, noAgents bool) {
	f.cpu, f.mem, f.noAgents = int32(cpu), int32(mem), noAgents
}

// unplaced lists the shards that o did not place, in the order of the groups given, each
// group's shards in order. Only the kept outcome pays for the maps.
func (o *outcome) unplaced(c *common) []Unplaced {
	groups := c.groups
	// In the order of the groups: a group fails once at most, so a counting sort.
	if !slices.IsSortedFunc(o.fails, func(a, b failure) int { return int(a.group - b.group) }) {
		at := resetInt32s(c.failAt, len(groups)) // 1 + index in fails; 0: none
		for k, f := range o.fails {
			at[f.group] = int32(k) + 1
		}
		sorted := c.sortedFails[:0]
		for _, k := range at {
			if k > 0 {
				sorted = append(sorted, o.fails[k-1])
			}
		}
		copy(o.fails, sorted)
		c.failAt, c.sortedFails = at, sorted
	}
	n := 0
	for _, f := range o.fails {
		n += int(c.info[f.group].n) // at most
	}
	out := make([]Unplaced, 0, n)
	// Equal reasons share a map: a cycle that leaves thousands of shards out makes a few.
	type counts struct {
		cpu, mem int32
		noAgents bool
	}
	shared := map[counts]map[string]int{}
	integrity := map[string]int{ReasonIntegrity: 1}
	// The last few counts seen, looked through before the map: a few kinds of shard fail
	// in turn, each with the same counts.
	type seen struct {
		c       counts
		reasons map[string]int
	}
	var recent [4]seen
	for _, f := range o.fails {
		fc := counts{f.cpu, f.mem, f.noAgents}
		var reasons map[string]int
		for _, r := range recent {
			if r.reasons != nil && r.c == fc {
				reasons = r.reasons
				break
			}
		}
		if reasons == nil {
			reasons = shared[fc]
			if reasons == nil {
				reasons = newReasons(f)
				shared[fc] = reasons
			}
			copy(recent[1:], recent[:len(recent)-1])
			recent[0] = seen{fc, reasons}
		}
		for k, item := range groups[f.group].Items {
			r := reasons
			if k < int(f.first) {
				if !f.rolledBack {
					continue // placed
				}
				r = integrity
			}
			out = append(out, Unplaced{Group: int(f.group), Item: item, Reasons: r})
		}
	}
	return out
}

// newReasons is the reasons map of failure f.
func newReasons(f failure) map[string]int {
	reasons := map[string]int{}
	switch {
	case f.noAgents:
		reasons[ReasonNoAgents] = 1
	default:
		if f.cpu > 0 {
			reasons[ReasonCPU] = int(f.cpu)
		}
		if f.mem > 0 {
			reasons[ReasonMem] = int(f.mem)
		}
	}
	return reasons
}

// place places one group into placed (room for its items); with Integrity it undoes a
// partial placement. It says whether some shard found no room, and why.
func (p *packer) place(gi int, info *groupInfo, r rule, placed []int32) (failure, bool) {
	var undos []undo
	var preferred []int // SPREAD: preferred agent per item, by position in Items
	if !info.binpack {
		preferred = p.c.spreadPreference(&p.c.groups[gi])
	}
	kind := info.kind
	// A kind of shard that found no room still finds none while agents only fill up.
	hopeless := false
	if kr := p.failed[kind]; kr != nil {
		hopeless = kr.gen == p.gen
	}
	f := failure{group: int32(gi), first: -1}
	for k := range placed {
		i := int32(-1)
		switch {
		case f.first >= 0 || hopeless:
		case preferred != nil && preferred[k] >= 0 && p.fits(int32(preferred[k]), kind):
			i = int32(preferred[k])
		case preferred != nil:
			i = p.leastLoaded(kind)
		default:
			i = p.choose(kind, r)
		}
		placed[k] = i
		if i < 0 {
			if f.first < 0 {
				// Every later shard fails too: nothing changes until then.
				f.first = int32(k)
				f.setReasons(p.reasons(kind))
			}
			continue
		}
		u := p.take(i, kind)
		if info.integrity {
			undos = append(undos, u)
		}
	}
	if f.first < 0 {
		return f, false
	}
	if info.integrity {
		// The reasons are those of the moment the shard failed, before the rollback frees
		// what the others took.
		p.rollback(undos)
		for k := range placed {
			placed[k] = -1
		}
		f.rolledBack = true
	}
	return f, true
}

// reasons counts, over all agents, which resource turns a shard of kind kind away. The
// counts of a kind are kept, and brought up to date from the changes since, when it fails
// again.
func (p *packer) reasons(kind int32) (cpu, mem int, noAgents bool) {
	if len(p.c.agents) == 0 {
		return 0, 0, true
	}
	kr := p.failed[kind]
	if kr == nil {
		// The loose agents are out of the buckets: counted one by one.
		kr = &p.reasonsOf[kind]
		*kr = kindReasons{}
		for b := range p.buckets {
			bk := &p.buckets[b]
			kr.count(p, kind, bk.key.free, bk.key.set, len(bk.members))
		}
		for _, i := range p.loose {
			kr.count(p, kind, p.free[i], p.set[i], 1)
		}
		p.failed[kind] = kr
	} else {
		// An agent's moves since add up to one from its state before the first (that move's
		// old state) to its state now.
		if p.seenMark++; p.seenMark == 1 {
			p.seen = resetInt32s(p.seen, len(p.c.agents))
		}
		for _, ch := range p.changes[kr.changes:] {
			if p.seen[ch.agent] == p.seenMark {
				continue
			}
			p.seen[ch.agent] = p.seenMark
			kr.count(p, kind, ch.oldFree, ch.oldSet, -1)
			kr.count(p, kind, p.free[ch.agent], p.set[ch.agent], 1)
		}
	}
	kr.changes, kr.gen = len(p.changes), p.gen
	return kr.cpu, kr.mem, false
}

// count adds n agents with free left and executor set set.
func (kr *kindReasons) count(p *packer, kind int32, free Resources, set int32, n int) {
	need := p.need(set, kind)
	if need.CPUs > free.CPUs+epsilon {
		kr.cpu += n
	}
	if need.MemMB > free.MemMB+epsilon {
		kr.mem += n
	}
}

// spreadPreference maps each item of g to its preferred agent under the job's strategy over the
// agents sorted by hostname.
func (c *common) spreadPreference(g *Group) []int {
	if c.byHost == nil {
		c.byHost = make([]int, len(c.agents))
		for i := range c.byHost {
			c.byHost[i] = i
		}
		sort.SliceStable(c.byHost, func(x, y int) bool {
			a, b := c.agents[c.byHost[x]], c.agents[c.byHost[y]]
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
	if shards, err := sharding.Shard(strategy, len(c.byHost), g.Job, total); err == nil {
		for inst, items := range shards {
			for _, it := range items {
				byItem[it] = c.byHost[inst]
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
