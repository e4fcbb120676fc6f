package binpack

import (
	"fmt"
	"math/rand"
	"reflect"
	"sync"
	"testing"

	"github.com/ejcloud/ejcloud/scheduler/binpack/internal/gen"
)

func agents(spec ...float64) []Agent {
	var out []Agent
	for i := 0; i+1 < len(spec); i += 2 {
		out = append(out, Agent{ID: fmt.Sprintf("S%d", i/2), Hostname: fmt.Sprintf("host%d", i/2), Free: Resources{spec[i], spec[i+1]}})
	}
	return out
}

func items(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

func TestPack(t *testing.T) {
	tests := []struct {
		name       string
		groups     []Group
		agents     []Agent
		wantPlaced [][]int
		wantReason []map[string]int // reasons of the unplaced, in order
	}{
		{
			name:       "binpack picks the agent left with the least cpu",
			groups:     []Group{{Job: "j", App: "a", Items: items(1), Need: Resources{1, 100}, Placement: Binpack}},
			agents:     agents(4, 1000, 2, 1000, 8, 1000),
			wantPlaced: [][]int{{1}},
		},
		{
			name:       "binpack fills one agent before the next",
			groups:     []Group{{Job: "j", App: "a", Items: items(4), Need: Resources{1, 100}, Placement: Binpack}},
			agents:     agents(3, 1000, 3, 1000),
			wantPlaced: [][]int{{0, 0, 0, 1}},
		},
		{
			name:       "the executor is counted once per agent",
			groups:     []Group{{Job: "j", App: "a", Items: items(2), Need: Resources{1, 100}, Executor: Resources{0.5, 64}, Placement: Binpack}},
			agents:     agents(2.5, 1000),
			wantPlaced: [][]int{{0, 0}}, // 1 + 0.5 + 1: the second shard does not pay for the executor again
		},
		{
			name:   "an alive executor needs no resources",
			groups: []Group{{Job: "j", App: "a", Items: items(2), Need: Resources{1, 100}, Executor: Resources{0.5, 64}, Placement: Binpack}},
			agents: []Agent{{ID: "S0", Hostname: "h0", Free: Resources{2, 1000}, Executors: map[string]bool{"a": true}},
				{ID: "S1", Hostname: "h1", Free: Resources{5, 1000}}},
			wantPlaced: [][]int{{0, 0}},
		},
		{
			name:       "spread follows AVG_ALLOCATION over agents sorted by hostname",
			groups:     []Group{{Job: "j", App: "a", Items: items(4), Total: 4, Need: Resources{1, 100}}},
			agents:     []Agent{{ID: "S0", Hostname: "b", Free: Resources{8, 8000}}, {ID: "S1", Hostname: "a", Free: Resources{8, 8000}}},
			wantPlaced: [][]int{{1, 1, 0, 0}},
		},
		{
			name:       "spread falls back to the least-loaded agent that fits",
			groups:     []Group{{Job: "j", App: "a", Items: items(2), Total: 2, Need: Resources{2, 100}}},
			agents:     agents(1, 1000, 3, 1000, 6, 1000),
			wantPlaced: [][]int{{2, 1}},
		},
		{
			name: "integrity: a READY job that does not fit whole places nothing and frees what it took",
			groups: []Group{
				{Job: "big", App: "a", Items: items(3), Need: Resources{2, 100}, Placement: Binpack, Integrity: true},
				{Job: "small", App: "a", Items: items(2), Need: Resources{2, 100}, Placement: Binpack, Integrity: true},
			},
			agents:     agents(2, 1000, 2, 1000),
			wantPlaced: [][]int{{-1, -1, -1}, {0, 1}},
			wantReason: []map[string]int{{ReasonIntegrity: 1}, {ReasonIntegrity: 1}, {ReasonCPU: 2}},
		},
		{
			name:       "failover work places partially",
			groups:     []Group{{Job: "fo", App: "a", Items: []int{3, 5}, Need: Resources{2, 100}, Placement: Binpack}},
			agents:     agents(3, 1000),
			wantPlaced: [][]int{{0, -1}},
			wantReason: []map[string]int{{ReasonCPU: 1}},
		},
		{
			name:       "reasons count the agents turned away per resource",
			groups:     []Group{{Job: "j", App: "a", Items: items(1), Need: Resources{2, 2048}, Placement: Binpack}},
			agents:     agents(1, 4096, 4, 1024, 1, 512),
			wantPlaced: [][]int{{-1}},
			wantReason: []map[string]int{{ReasonCPU: 2, ReasonMem: 2}},
		},
		{
			name:       "no offers",
			groups:     []Group{{Job: "j", App: "a", Items: items(1), Need: Resources{1, 1}}},
			wantPlaced: [][]int{{-1}},
			wantReason: []map[string]int{{ReasonNoAgents: 1}},
		},
		{
			name: "failover work goes first",
			groups: []Group{
				{Job: "ready", App: "a", Items: items(1), Need: Resources{2, 100}, Placement: Binpack, Integrity: true},
				{Job: "fo", App: "a", Items: []int{7}, Need: Resources{2, 100}, Placement: Binpack},
			},
			agents:     agents(2, 1000),
			wantPlaced: [][]int{{-1}, {0}},
			wantReason: []map[string]int{{ReasonCPU: 1}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := fmt.Sprint(tc.agents)
			got := Pack(tc.groups, tc.agents)
			if !reflect.DeepEqual(got.Placed, tc.wantPlaced) {
				t.Fatalf("Pack placed %v; want %v", got.Placed, tc.wantPlaced)
			}
			var reasons []map[string]int
			for _, u := range got.Unplaced {
				reasons = append(reasons, u.Reasons)
			}
			if !reflect.DeepEqual(reasons, tc.wantReason) {
				t.Fatalf("Pack reasons %v; want %v", reasons, tc.wantReason)
			}
			if fmt.Sprint(tc.agents) != before {
				t.Fatal("Pack changed its input")
			}
		})
	}
}

// No agent is ever over-committed, whatever the input.
func TestPackNeverOvercommits(t *testing.T) {
	rnd := rand.New(rand.NewSource(7))
	for round := 0; round < 300; round++ {
		var as []Agent
		for i := rnd.Intn(20); i >= 0; i-- {
			as = append(as, Agent{ID: fmt.Sprint(i), Hostname: fmt.Sprint(rnd.Intn(5)), Free: Resources{float64(rnd.Intn(16)) / 2, float64(rnd.Intn(8000))}})
		}
		var gs []Group
		for g := rnd.Intn(8); g >= 0; g-- {
			place := Spread
			if rnd.Intn(2) == 0 {
				place = Binpack
			}
			gs = append(gs, Group{Job: fmt.Sprint("j", g), App: fmt.Sprint("a", rnd.Intn(3)), Items: items(1 + rnd.Intn(10)), Total: 10,
				Need: Resources{0.1 + float64(rnd.Intn(20))/10, float64(1 + rnd.Intn(1000))}, Executor: Resources{0.1, 32},
				Placement: place, Integrity: rnd.Intn(2) == 0, Strategy: []string{"AVG_ALLOCATION", "ODEVITY", "ROUND_ROBIN"}[rnd.Intn(3)]})
		}
		res := Pack(gs, as)
		used := make([]Resources, len(as))
		execs := make([]map[string]bool, len(as))
		for g, placed := range res.Placed {
			complete := true
			for _, i := range placed {
				if i < 0 {
					complete = false
					continue
				}
				if execs[i] == nil {
					execs[i] = map[string]bool{}
				}
				used[i] = used[i].plus(gs[g].Need)
				if !execs[i][gs[g].App] {
					execs[i][gs[g].App] = true
					used[i] = used[i].plus(gs[g].Executor)
				}
			}
			if gs[g].Integrity && !complete {
				for _, i := range placed {
					if i >= 0 {
						t.Fatalf("round %d: integrity group %d partly placed: %v", round, g, placed)
					}
				}
			}
		}
		for i, u := range used {
			if u.CPUs > as[i].Free.CPUs+1e-6 || u.MemMB > as[i].Free.MemMB+1e-6 {
				t.Fatalf("round %d: agent %d over-committed: used %v of %v", round, i, u, as[i].Free)
			}
		}
	}
}

// On alike agents (one offer, no executors), fewest agents chooses as best score does, which
// is why Pack does not run it there (common.alike).
func TestFewestAgentsIsBestScoreOnAlikeAgents(t *testing.T) {
	for seed := int64(1); seed <= 400; seed++ {
		w := gen.Random(seed)
		for i := range w.Hosts {
			w.Hosts[i] = w.Hosts[0]
		}
		gs, as := sharded(w, rand.New(rand.NewSource(seed)))
		for i := range gs {
			gs[i].Integrity = seed%2 == 0 // READY jobs roll back; failover ones place partly
		}
		c := newCommon(gs, as)
		if !c.alike() {
			t.Fatalf("seed %d: agents of one offer not alike", seed)
		}
		for _, tr := range c.tries() {
			want := newCommon(gs, as).run(try{order: tr.order, rule: bestScore})
			got := newCommon(gs, as).run(try{order: tr.order, rule: fewestAgents})
			if !reflect.DeepEqual(got.res.Placed, want.res.Placed) {
				t.Fatalf("seed %d: fewest agents places %v; best score %v", seed, got.res.Placed, want.res.Placed)
			}
		}
	}
}

// Pack runs the likeliest try first and stops the others once they cannot win; it must keep
// what running every try in full keeps: the first of the best.
func TestPackKeepsWhatRunningEveryTryWould(t *testing.T) {
	for seed := int64(1); seed <= 1000; seed++ {
		w := gen.Random(seed)
		gs, as := sharded(w, rand.New(rand.NewSource(seed)))
		for i := range gs {
			gs[i].Integrity = seed%3 == 0 // READY jobs: all shards or none
			if seed%5 == 0 {
				gs[i].Executor = Resources{0.5, 64}
			}
			if seed%7 == 0 && i%4 == 0 {
				gs[i].Placement = Spread
			}
		}
		c := newCommon(gs, as)
		var want outcome
		for k, tr := range c.tries() {
			if tr.ifShort && k > 0 && want.placed == c.shards {
				continue
			}
			if o := newCommon(gs, as).run(tr); k == 0 || o.better(want) {
				want = o
			}
		}
		if got := Pack(gs, as); !reflect.DeepEqual(got.Placed, want.res.Placed) {
			t.Fatalf("seed %d: Pack places %v; the first best try %v", seed, got.Placed, want.res.Placed)
		}
	}
}

// The bounds that let Pack skip a try hold on what every try places: no kind of shard places
// more than kindCap, nor on fewer agents than hostsHolding; no try places more than capSum,
// nor every shard on fewer than minHosts agents; and no try beats one that unbeatable passes.
func TestPackBoundsHoldOnEveryTry(t *testing.T) {
	skipped := 0
	for seed := int64(1); seed <= 600; seed++ {
		gs, as := variedWorkload(seed, false)
		c := newCommon(gs, as)
		if c.kindFits == nil {
			t.Fatalf("seed %d: %d kinds on %d offers not counted", seed, c.nKinds, len(c.first.buckets))
		}
		var outs []outcome
		for _, tr := range c.tries() {
			outs = append(outs, newCommon(gs, as).run(tr))
		}
		for k, o := range outs {
			if o.placed > c.capSum || o.placed == c.shards && o.hosts < c.minHosts {
				t.Fatalf("seed %d, try %d: %d shards on %d agents; bounds: at most %d shards, every shard on at least %d agents",
					seed, k, o.placed, o.hosts, c.capSum, c.minHosts)
			}
			placed := make([]int, c.nKinds)
			agents := make([]map[int]bool, c.nKinds)
			for g, at := range o.res.Placed {
				kind := c.kindOf[g]
				for _, i := range at {
					if i >= 0 {
						placed[kind]++
						if agents[kind] == nil {
							agents[kind] = map[int]bool{}
						}
						agents[kind][i] = true
					}
				}
			}
			for kind := range placed {
				if placed[kind] > c.kindCap[kind] || len(agents[kind]) < c.hostsHolding(kind, placed[kind]) {
					t.Fatalf("seed %d, try %d, kind %d: %d shards on %d agents; bounds: at most %d shards, on at least %d agents",
						seed, k, kind, placed[kind], len(agents[kind]), c.kindCap[kind], c.hostsHolding(kind, placed[kind]))
				}
			}
			if c.unbeatable(&o) {
				skipped++
				for j, other := range outs {
					if other.better(o) {
						t.Fatalf("seed %d: try %d passes as unbeatable (%d shards on %d agents), but try %d places %d on %d",
							seed, k, o.placed, o.hosts, j, other.placed, other.hosts)
					}
				}
			}
		}
	}
	if skipped == 0 {
		t.Fatal("no try passed as unbeatable: the test checks nothing")
	}
	t.Logf("%d tries passed as unbeatable", skipped)
}

// Packs running at once, each in memory an earlier Pack used (scratchPool), give what they
// give one at a time, and share nothing that the race detector would see.
func TestPackConcurrentCallsShareNothing(t *testing.T) {
	type input struct {
		gs   []Group
		as   []Agent
		want Result
	}
	var inputs []input
	for seed := int64(1); seed <= 24; seed++ {
		w := gen.Random(seed)
		gs, as := sharded(w, rand.New(rand.NewSource(seed)))
		for i := range gs {
			gs[i].Integrity = seed%2 == 0
			if seed%3 == 0 {
				gs[i].Executor = Resources{0.5, 64}
			}
		}
		inputs = append(inputs, input{gs, as, Pack(gs, as)})
	}
	var wg sync.WaitGroup
	errs := make(chan string, 4)
	for worker := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 3 * len(inputs) {
				in := inputs[(round*(worker+1))%len(inputs)]
				if got := Pack(in.gs, in.as); !reflect.DeepEqual(got, in.want) {
					errs <- fmt.Sprintf("worker %d, round %d: Pack placed %v; alone it placed %v", worker, round, got.Placed, in.want.Placed)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}

// The bounds that stop a try early (bound.lost: shards it can still place, agents it must
// still use) hold on the try itself: run against its own full result, which it ties and wins
// ties with, no try is ever stopped.
func TestPackBoundsNeverStopATryThatTies(t *testing.T) {
	checked := 0
	for seed := int64(1); seed <= 600; seed++ {
		gs, as := variedWorkload(seed, true)
		c := newCommon(gs, as)
		for k, tr := range c.tries() {
			full := newCommon(gs, as).run(tr)
			if o := c.runUnless(tr, &bound{best: &full, winsTies: true}); o.abandoned {
				t.Fatalf("seed %d, try %d: stopped as unable to place %d shards on %d agents, which it does", seed, k, full.placed, full.hosts)
			}
			checked++
		}
	}
	t.Logf("%d tries", checked)
}

// variedWorkload is random workload seed, sharded, with READY jobs (every third seed) and
// executors (every fifth); with exotic, also executors that need no cpu and SPREAD jobs.
func variedWorkload(seed int64, exotic bool) ([]Group, []Agent) {
	gs, as := sharded(gen.Random(seed), rand.New(rand.NewSource(seed)))
	for i := range gs {
		gs[i].Integrity = seed%3 == 0
		if seed%5 == 0 {
			gs[i].Executor = Resources{0.5, 64}
			if exotic && i%3 == 0 {
				gs[i].Executor = Resources{0, 512} // no cpu: any memory per cpu
			}
		}
		if exotic && seed%7 == 0 && i%4 == 0 {
			gs[i].Placement = Spread
		}
	}
	return gs, as
}
