package binpack

import (
	"fmt"
	"testing"

	"github.com/ejcloud/ejcloud/scheduler/binpack/internal/gen"
)

// workload makes jobs × shards tasks of one size and n identical agents.
func workload(jobs, shards int, need Resources, n int, free Resources) ([]Group, []Agent) {
	gs := make([]Group, jobs)
	for j := range gs {
		gs[j] = Group{Job: fmt.Sprintf("job%d", j), App: "app", Items: items(shards), Total: shards, Need: need, Placement: Binpack, Integrity: true}
	}
	as := make([]Agent, n)
	for i := range as {
		as[i] = Agent{ID: fmt.Sprintf("S%d", i), Hostname: fmt.Sprintf("host%05d", i), Free: free}
	}
	return gs, as
}

// generated turns a generated workload into one single-shard BINPACK job per task, in the
// workload's order, as binpack-bench does.
func generated(w gen.Workload) ([]Group, []Agent) {
	gs := make([]Group, len(w.Tasks))
	for k, t := range w.Tasks {
		gs[k] = Group{Job: fmt.Sprintf("t%d", k), App: "app", Items: items(1), Total: 1, Need: Resources{t.CPUs, t.MemMB}, Placement: Binpack, Integrity: true}
	}
	as := make([]Agent, len(w.Hosts))
	for i, h := range w.Hosts {
		as[i] = Agent{ID: fmt.Sprintf("S%d", i), Hostname: fmt.Sprintf("host%05d", i), Free: Resources{h.CPUs, h.MemMB}}
	}
	return gs, as
}

func agentsUsed(res Result) (used, placed int) {
	seen := map[int]bool{}
	for _, p := range res.Placed {
		for _, i := range p {
			if i >= 0 {
				seen[i] = true
				placed++
			}
		}
	}
	return len(seen), placed
}

func benchPack(b *testing.B, gs []Group, as []Agent, wantPlaced, maxAgents int) {
	used, placed := agentsUsed(Pack(gs, as))
	if placed != wantPlaced || used > maxAgents {
		b.Fatalf("placed %d tasks on %d agents; want %d on at most %d", placed, used, wantPlaced, maxAgents)
	}
	b.ResetTimer()
	for b.Loop() {
		Pack(gs, as)
	}
	b.ReportMetric(float64(used), "agents-used")
}

// Goal (issue 5): ≤ 45 ms, ≤ 313 agents.
func BenchmarkPack10kTasksOnto1kAgents(b *testing.B) {
	gs, as := workload(100, 100, Resources{1, 1024}, 1000, Resources{32, 131072})
	benchPack(b, gs, as, 10000, 313)
}

// Goal (issue 5): ≤ 3.5 ms, ≤ 25 agents.
func BenchmarkPack200TasksOnto10kAgents(b *testing.B) {
	gs, as := workload(20, 10, Resources{1, 1024}, 10000, Resources{8, 32768})
	benchPack(b, gs, as, 200, 25)
}

func BenchmarkPackSpread(b *testing.B) {
	gs, as := workload(100, 100, Resources{1, 1024}, 1000, Resources{32, 131072})
	for i := range gs {
		gs[i].Placement = Spread
	}
	benchPack(b, gs, as, 10000, 1000)
}

// BenchmarkPackKinds packs issue 16's kinds of workload, one single-shard job per task;
// BenchmarkReferenceKinds (fenzo_test.go) runs Fenzo's full scan on the same inputs.
func BenchmarkPackKinds(b *testing.B) {
	for _, w := range gen.Kinds() {
		b.Run(w.Name, func(b *testing.B) {
			gs, as := generated(w)
			used, placed := agentsUsed(Pack(gs, as))
			for b.Loop() {
				Pack(gs, as)
			}
			b.ReportMetric(float64(used), "agents-used")
			b.ReportMetric(float64(placed), "tasks-placed")
		})
	}
}
