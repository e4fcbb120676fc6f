package binpack

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/scheduler/binpack/internal/gen"
)

// reference does what Fenzo 0.11.1's cpuMemBinPacker does, written from its description
// rather than from our packer: the tasks in the order given; for each, every host it fits on
// is scored by the mean of its cpu and memory utilisation after taking it (relative to the
// host's offer), and the highest score wins, the first host among equals. In goodEnough mode
// (what Fenzo users run) the scan stops at the first host scoring above 0.5. It returns the
// host of each task (-1: none), the tasks placed and the hosts used.
func reference(w gen.Workload, goodEnough bool) (hostOf []int, placed, used int) {
	free := slices.Clone(w.Hosts)
	taken := make([]bool, len(w.Hosts))
	hostOf = make([]int, len(w.Tasks))
	utilisation := func(offer, free, need float64) float64 {
		if offer <= 0 {
			return 1
		}
		return (offer - free + need) / offer
	}
	for t, need := range w.Tasks {
		best, bestScore := -1, 0.0
		for h, f := range free {
			if need.CPUs > f.CPUs+1e-9 || need.MemMB > f.MemMB+1e-9 {
				continue
			}
			s := (utilisation(w.Hosts[h].CPUs, f.CPUs, need.CPUs) + utilisation(w.Hosts[h].MemMB, f.MemMB, need.MemMB)) / 2
			if best < 0 || s > bestScore {
				best, bestScore = h, s
			}
			if goodEnough && s > 0.5 {
				break
			}
		}
		hostOf[t] = best
		if best < 0 {
			continue
		}
		free[best].CPUs -= need.CPUs
		free[best].MemMB -= need.MemMB
		placed++
		if !taken[best] {
			taken[best] = true
			used++
		}
	}
	return hostOf, placed, used
}

// sharded turns a workload into BINPACK jobs, in its order, joining runs of equal tasks into
// failover jobs of several shards at random, so that Pack sees both single tasks and jobs.
func sharded(w gen.Workload, rnd *rand.Rand) ([]Group, []Agent) {
	_, as := generated(w)
	var gs []Group
	for k := 0; k < len(w.Tasks); {
		n := 1
		for rnd.Intn(2) == 0 && k+n < len(w.Tasks) && w.Tasks[k+n] == w.Tasks[k] {
			n++
		}
		t := w.Tasks[k]
		gs = append(gs, Group{Job: fmt.Sprint("j", k), App: "app", Items: items(n), Total: n, Need: Resources{t.CPUs, t.MemMB}, Placement: Binpack})
		k += n
	}
	return gs, as
}

// checkFits fails if res over-commits an agent (no executors: every shard needs Need).
func checkFits(t *testing.T, gs []Group, as []Agent, res Result) {
	t.Helper()
	used := make([]Resources, len(as))
	for g, placed := range res.Placed {
		for _, i := range placed {
			if i >= 0 {
				used[i] = used[i].plus(gs[g].Need)
			}
		}
	}
	for i, u := range used {
		if u.CPUs > as[i].Free.CPUs+1e-6 || u.MemMB > as[i].Free.MemMB+1e-6 {
			t.Fatalf("agent %d over-committed: %v of %v", i, u, as[i].Free)
		}
	}
}

// The oracle: on random heterogeneous workloads Pack places at least as many tasks as the
// better of Fenzo's two modes and, when all fit, uses no more agents than the better of them.
func TestPackNeverWorseThanFenzo(t *testing.T) {
	start := time.Now()
	rounds, overflowed, beaten := 1000, 0, 0
	for seed := int64(1); seed <= int64(rounds); seed++ {
		w := gen.Random(seed)
		full, fullPlaced, fullUsed := reference(w, false)
		good, goodPlaced, goodUsed := reference(w, true)
		gs, as := sharded(w, rand.New(rand.NewSource(seed)))
		res := Pack(gs, as)
		checkFits(t, gs, as, res)
		used, placed := agentsUsed(res)
		t.Logf("seed %d: %d hosts, %d tasks: reference full scan %d placed on %d, good enough %d on %d; ours %d on %d",
			seed, len(w.Hosts), len(w.Tasks), fullPlaced, fullUsed, goodPlaced, goodUsed, placed, used)
		if want := max(fullPlaced, goodPlaced); placed < want {
			t.Fatalf("seed %d: placed %d tasks; the reference places %d", seed, placed, want)
		}
		if placed < len(w.Tasks) {
			overflowed++
		}
		for _, ref := range []struct {
			mode         string
			placed, used int
		}{{"full scan", fullPlaced, fullUsed}, {"good enough", goodPlaced, goodUsed}} {
			if ref.placed == len(w.Tasks) && used > ref.used {
				t.Fatalf("seed %d: all fit; ours uses %d hosts, the reference's %s %d", seed, used, ref.mode, ref.used)
			}
		}
		if placed > max(fullPlaced, goodPlaced) || placed == len(w.Tasks) && used < min(fullUsed, goodUsed) {
			beaten++
		}

		// Fenzo's own rules inside Pack, on buckets, choose exactly as the reference does.
		order := make([]int, len(gs))
		for g := range order {
			order[g] = g
		}
		for _, r := range []struct {
			rule   rule
			hostOf []int
		}{{bestScore, full}, {firstGoodEnough, good}} {
			o := newCommon(gs, as).run(try{order: order, rule: r.rule})
			var got []int
			for _, p := range o.res.Placed {
				got = append(got, p...)
			}
			if !slices.Equal(got, r.hostOf) {
				t.Fatalf("seed %d: rule %d places %v; the reference %v", seed, r.rule, got, r.hostOf)
			}
		}
	}
	// The generator must give the oracle work of both kinds.
	if overflowed < rounds/5 || rounds-overflowed < rounds/5 {
		t.Fatalf("%d of %d workloads overflowed; the generator should make both kinds", overflowed, rounds)
	}
	t.Logf("%d workloads, %d overflowing; ours strictly better than both reference modes on %d; %v", rounds, overflowed, beaten, time.Since(start))
}

// On issue 16's kinds of workload, Pack is at least as good as both reference modes, and the
// workloads are of the kind their names say.
func TestPackKinds(t *testing.T) {
	for _, w := range gen.Kinds() {
		t.Run(w.Name, func(t *testing.T) {
			_, fullPlaced, fullUsed := reference(w, false)
			_, goodPlaced, goodUsed := reference(w, true)
			gs, as := generated(w)
			res := Pack(gs, as)
			checkFits(t, gs, as, res)
			used, placed := agentsUsed(res)
			t.Logf("%d hosts, %d tasks: reference good enough %d placed on %d, full scan %d on %d; ours %d on %d",
				len(w.Hosts), len(w.Tasks), goodPlaced, goodUsed, fullPlaced, fullUsed, placed, used)
			if placed < max(fullPlaced, goodPlaced) {
				t.Fatalf("placed %d; the reference places %d", placed, max(fullPlaced, goodPlaced))
			}
			if fullPlaced == len(w.Tasks) && used > fullUsed || goodPlaced == len(w.Tasks) && used > goodUsed {
				t.Fatalf("all fit on %d hosts; the reference uses %d (full scan), %d (good enough)", used, fullUsed, goodUsed)
			}
			if overflow, want := placed < len(w.Tasks), strings.Contains(w.Name, "overflow") || strings.Contains(w.Name, "too-few"); overflow != want {
				t.Fatalf("placed %d of %d tasks: not what a workload named %s should be", placed, len(w.Tasks), w.Name)
			}
		})
	}
}

// BenchmarkReferenceKinds is Fenzo's full scan on BenchmarkPackKinds' workloads.
func BenchmarkReferenceKinds(b *testing.B) {
	for _, w := range gen.Kinds() {
		b.Run(w.Name, func(b *testing.B) {
			_, placed, used := reference(w, false)
			for b.Loop() {
				reference(w, false)
			}
			b.ReportMetric(float64(used), "agents-used")
			b.ReportMetric(float64(placed), "tasks-placed")
		})
	}
}

// BenchmarkReferenceGoodEnoughKinds is Fenzo's good enough mode on the same inputs.
func BenchmarkReferenceGoodEnoughKinds(b *testing.B) {
	for _, w := range gen.Kinds() {
		b.Run(w.Name, func(b *testing.B) {
			_, placed, used := reference(w, true)
			for b.Loop() {
				reference(w, true)
			}
			b.ReportMetric(float64(used), "agents-used")
			b.ReportMetric(float64(placed), "tasks-placed")
		})
	}
}
