// Package gen generates the bin-packing workloads that the tests, the benchmarks and
// binpack-bench share: the kinds of issue 16 (agents of several sizes, tasks of mixed cpu to
// memory ratios, some that all fit and some that overflow) and random ones for property tests.
// Every workload is a pure function of its name or seed.
package gen

import (
	"fmt"
	"math/rand"
)

// Shape is an amount of cpu and memory: an agent's offer or a task's need.
type Shape struct {
	CPUs  float64
	MemMB float64
}

// Workload is agents and tasks in the order a scheduler would hand them over.
type Workload struct {
	Name  string
	Hosts []Shape
	Tasks []Shape
}

const gb = 1024

// The agent sizes of issue 16: 4 cpu/8 GB, 16/64, 64/256.
var (
	small  = Shape{4, 8 * gb}
	medium = Shape{16, 64 * gb}
	large  = Shape{64, 256 * gb}
)

// Kinds are the kinds of workload in issue 16's table, in its order, then the two uniform ones
// of the speed goals.
func Kinds() []Workload {
	mixedHosts := hosts(small, 200, medium, 100, large, 40) // 4,960 cpu, 18,240 GB
	mixedTasks := []Shape{{0.5, 1 * gb}, {1, 2 * gb}, {2, 4 * gb}, {1, 8 * gb}, {4, 4 * gb}, {2, 16 * gb}, {0.25, 512}, {3, 6 * gb}}
	halfHalf := []Shape{{6, 4 * gb}, {1, 24 * gb}}
	return []Workload{
		// ~55 % of the cpu and ~50 % of the memory: all fit.
		{Name: "mixed-hosts-fit", Hosts: mixedHosts, Tasks: tasks(1, mixedTasks, 1500)},
		// ~6 GB per cpu against 2–4 GB per cpu offered: memory decides.
		{Name: "memory-bound", Hosts: mixedHosts, Tasks: tasks(2, []Shape{{0.5, 3 * gb}, {1, 6 * gb}, {0.5, 5 * gb}, {2, 10 * gb}, {0.25, 2 * gb}}, 2400)},
		// About 500 of each: 6 cpu/4 GB and 1 cpu/24 GB on 16 cpu/64 GB agents. No agent takes
		// three memory-heavy tasks, so at least 250 agents; two of each fill both dimensions
		// to 14/16 and 56/64.
		{Name: "identical-half-cpu-half-mem", Hosts: hosts(medium, 400), Tasks: tasks(3, halfHalf, 1000)},
		{Name: "identical-half-half-too-few-hosts", Hosts: hosts(medium, 120), Tasks: tasks(3, halfHalf, 1000)},
		// About twice what fits.
		{Name: "mixed-hosts-overflow", Hosts: mixedHosts, Tasks: tasks(4, mixedTasks, 5000)},
		{Name: "small-hosts-overflow", Hosts: hosts(small, 60), Tasks: tasks(5, mixedTasks, 300)},
		{Name: "2k-hosts-15k-small-tasks", Hosts: hosts(small, 1000, medium, 700, large, 300), Tasks: tasks(6, []Shape{{0.25, 512}, {0.5, 1 * gb}, {0.5, 2 * gb}, {1, 2 * gb}, {1, 4 * gb}, {0.1, 256}}, 15000)},
		{Name: "uniform-10k-tasks-1k-hosts", Hosts: hosts(Shape{32, 128 * gb}, 1000), Tasks: tasks(7, []Shape{{1, 1 * gb}}, 10000)},
		{Name: "uniform-200-tasks-10k-hosts", Hosts: hosts(Shape{8, 32 * gb}, 10000), Tasks: tasks(8, []Shape{{1, 1 * gb}}, 200)},
	}
}

// Kind returns the kind named name.
func Kind(name string) (Workload, error) {
	for _, w := range Kinds() {
		if w.Name == name {
			return w, nil
		}
	}
	return Workload{}, fmt.Errorf("no workload kind %q", name)
}

// hosts expands shape, count, shape, count, ….
func hosts(spec ...any) []Shape {
	var out []Shape
	for k := 0; k+1 < len(spec); k += 2 {
		for range spec[k+1].(int) {
			out = append(out, spec[k].(Shape))
		}
	}
	return out
}

// tasks draws n tasks from shapes, each equally likely, in a shuffled order.
func tasks(seed int64, shapes []Shape, n int) []Shape {
	rnd := rand.New(rand.NewSource(seed))
	out := make([]Shape, n)
	for i := range out {
		out[i] = shapes[rnd.Intn(len(shapes))]
	}
	return out
}

// Random is a heterogeneous workload: 1–4 agent shapes, 1–6 task shapes of mixed cpu to
// memory ratios, and tasks totalling 30–160 % of the offered cpu or memory, whichever fills
// first, so that about half of the workloads overflow (at most 1,500 tasks, to keep property
// tests quick).
func Random(seed int64) Workload {
	rnd := rand.New(rand.NewSource(seed))
	w := Workload{Name: fmt.Sprintf("random-%d", seed)}
	var offered Shape
	for range 1 + rnd.Intn(4) {
		h := Shape{float64(int(1) << (1 + rnd.Intn(6))), 0} // 2–64 cpu
		h.MemMB = h.CPUs * float64(int(gb)<<rnd.Intn(4))    // 1–8 GB per cpu
		for range 1 + rnd.Intn(30) {
			w.Hosts = append(w.Hosts, h)
			offered.CPUs += h.CPUs
			offered.MemMB += h.MemMB
		}
	}
	rnd.Shuffle(len(w.Hosts), func(i, j int) { w.Hosts[i], w.Hosts[j] = w.Hosts[j], w.Hosts[i] })
	shapes := make([]Shape, 1+rnd.Intn(6))
	for k := range shapes {
		cpus := []float64{0.1, 0.25, 0.5, 1, 2, 3, 4, 8}[rnd.Intn(8)]
		shapes[k] = Shape{cpus, float64(int(cpus * float64(gb) * (0.25 + 16*rnd.Float64())))} // 0.25–16 GB per cpu
	}
	fill := 0.3 + 1.3*rnd.Float64()
	var need Shape
	for len(w.Tasks) < 1500 && need.CPUs < fill*offered.CPUs && need.MemMB < fill*offered.MemMB {
		t := shapes[rnd.Intn(len(shapes))]
		w.Tasks = append(w.Tasks, t)
		need.CPUs += t.CPUs
		need.MemMB += t.MemMB
	}
	return w
}
