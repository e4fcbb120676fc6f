// Command binpack-bench times binpack.Pack on a workload file, so that other packers can be
// compared with ours on identical inputs:
//
//	{"hosts":[{"name":"h","cpus":32,"memoryMB":131072,"count":1000}],
//	 "tasks":[{"id":"t","cpus":1,"memoryMB":1024,"count":10000}]}
//
// "count" expands an entry into name0 … name{count-1}; the tasks are packed in the order of
// the file. With --kind it packs one of the generated kinds of workload of issue 16 instead
// (agents of several sizes, tasks of mixed cpu to memory ratios, some overflowing; --kinds
// lists them), and --dump writes that workload in the format above, for other packers. It
// prints JSON: {"medianMs","minMs","maxMs","tasksAssigned","hostsUsed",
// "cpuUtilisationOfUsedHosts","memUtilisationOfUsedHosts"}.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"time"

	"github.com/ejcloud/ejcloud/scheduler/binpack"
	"github.com/ejcloud/ejcloud/scheduler/binpack/internal/gen"
)

type workload struct {
	Hosts []hostEntry `json:"hosts"`
	Tasks []taskEntry `json:"tasks"`
}

type report struct {
	MedianMs                  float64 `json:"medianMs"`
	MinMs                     float64 `json:"minMs"`
	MaxMs                     float64 `json:"maxMs"`
	TasksAssigned             int     `json:"tasksAssigned"`
	HostsUsed                 int     `json:"hostsUsed"`
	CPUUtilisationOfUsedHosts float64 `json:"cpuUtilisationOfUsedHosts"`
	MemUtilisationOfUsedHosts float64 `json:"memUtilisationOfUsedHosts"`
}

type hostEntry = struct {
	Name     string  `json:"name"`
	CPUs     float64 `json:"cpus"`
	MemoryMB float64 `json:"memoryMB"`
	Count    int     `json:"count"`
}

type taskEntry = struct {
	ID       string  `json:"id"`
	CPUs     float64 `json:"cpus"`
	MemoryMB float64 `json:"memoryMB"`
	Count    int     `json:"count"`
}

// generated is the workload of a generated kind, one entry per host and per task.
func generated(kind string) (workload, error) {
	g, err := gen.Kind(kind)
	if err != nil {
		return workload{}, err
	}
	var w workload
	for i, h := range g.Hosts {
		w.Hosts = append(w.Hosts, hostEntry{Name: fmt.Sprintf("h%d", i), CPUs: h.CPUs, MemoryMB: h.MemMB})
	}
	for i, t := range g.Tasks {
		w.Tasks = append(w.Tasks, taskEntry{ID: fmt.Sprintf("t%d", i), CPUs: t.CPUs, MemoryMB: t.MemMB})
	}
	return w, nil
}

func main() {
	fs := flag.NewFlagSet("binpack-bench", flag.ContinueOnError)
	reps := fs.Int("reps", 10, "timed runs of Pack")
	warmup := fs.Int("warmup", 2, "untimed runs first")
	placement := fs.String("placement", binpack.Binpack, "BINPACK or SPREAD")
	kind := fs.String("kind", "", "pack this generated kind of workload instead of a file")
	kinds := fs.Bool("kinds", false, "list the generated kinds of workload")
	dump := fs.Bool("dump", false, "with --kind: print the workload as JSON instead of packing it")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: binpack-bench [flags] WORKLOAD.json   (- for standard input)")
		fmt.Fprintln(fs.Output(), "       binpack-bench [flags] --kind KIND [--dump]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == flag.ErrHelp {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if *kinds {
		for _, w := range gen.Kinds() {
			fmt.Println(w.Name)
		}
		return
	}
	if fs.NArg() != 1 && *kind == "" || fs.NArg() != 0 && *kind != "" || *dump && *kind == "" ||
		*reps < 1 || *warmup < 0 || *placement != binpack.Binpack && *placement != binpack.Spread {
		fs.Usage()
		os.Exit(2)
	}
	var w workload
	var err error
	if *kind != "" {
		w, err = generated(*kind)
	} else {
		w, err = read(fs.Arg(0))
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "binpack-bench:", err)
		os.Exit(1)
	}
	if *dump {
		json.NewEncoder(os.Stdout).Encode(w)
		return
	}
	rep := run(w, *reps, *warmup, *placement)
	json.NewEncoder(os.Stdout).Encode(rep)
}

// read reads a workload file, - for standard input.
func read(path string) (workload, error) {
	var in io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return workload{}, err
		}
		defer f.Close()
		in = f
	}
	var w workload
	dec := json.NewDecoder(in)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return workload{}, fmt.Errorf("read workload: %w", err)
	}
	return w, nil
}

func run(w workload, reps, warmup int, placement string) report {
	var agents []binpack.Agent
	for _, h := range w.Hosts {
		for _, name := range expand(h.Name, h.Count) {
			agents = append(agents, binpack.Agent{ID: name, Hostname: name, Free: binpack.Resources{CPUs: h.CPUs, MemMB: h.MemoryMB}})
		}
	}
	var groups []binpack.Group
	for _, t := range w.Tasks {
		for _, id := range expand(t.ID, t.Count) {
			groups = append(groups, binpack.Group{Job: id, Items: []int{0}, Total: 1, Placement: placement,
				Need: binpack.Resources{CPUs: t.CPUs, MemMB: t.MemoryMB}})
		}
	}
	for range warmup {
		binpack.Pack(groups, agents)
	}
	times := make([]float64, reps)
	var res binpack.Result
	for i := range times {
		start := time.Now()
		res = binpack.Pack(groups, agents)
		times[i] = float64(time.Since(start).Microseconds()) / 1000
	}
	sort.Float64s(times)
	rep := report{MedianMs: times[len(times)/2], MinMs: times[0], MaxMs: times[len(times)-1]}
	used := map[int]binpack.Resources{}
	for g, placed := range res.Placed {
		for _, a := range placed {
			if a >= 0 {
				rep.TasksAssigned++
				u := used[a]
				used[a] = binpack.Resources{CPUs: u.CPUs + groups[g].Need.CPUs, MemMB: u.MemMB + groups[g].Need.MemMB}
			}
		}
	}
	var usedCPU, totalCPU, usedMem, totalMem float64
	for a, u := range used {
		usedCPU += u.CPUs
		totalCPU += agents[a].Free.CPUs
		usedMem += u.MemMB
		totalMem += agents[a].Free.MemMB
	}
	rep.HostsUsed = len(used)
	if totalCPU > 0 {
		rep.CPUUtilisationOfUsedHosts = usedCPU / totalCPU
	}
	if totalMem > 0 {
		rep.MemUtilisationOfUsedHosts = usedMem / totalMem
	}
	return rep
}

func expand(name string, count int) []string {
	if count <= 0 {
		return []string{name}
	}
	out := make([]string, count)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d", name, i)
	}
	return out
}
