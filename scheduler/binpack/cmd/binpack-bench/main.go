// Command binpack-bench times binpack.Pack on a workload file, so that other packers can be
// compared with ours on identical inputs:
//
//	{"hosts":[{"name":"h","cpus":32,"memoryMB":131072,"count":1000}],
//	 "tasks":[{"id":"t","cpus":1,"memoryMB":1024,"count":10000}]}
//
// "count" expands an entry into name0 … name{count-1}. It prints JSON: {"medianMs","minMs",
// "maxMs","tasksAssigned","hostsUsed","cpuUtilisationOfUsedHosts"}.
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
)

type workload struct {
	Hosts []struct {
		Name     string  `json:"name"`
		CPUs     float64 `json:"cpus"`
		MemoryMB float64 `json:"memoryMB"`
		Count    int     `json:"count"`
	} `json:"hosts"`
	Tasks []struct {
		ID       string  `json:"id"`
		CPUs     float64 `json:"cpus"`
		MemoryMB float64 `json:"memoryMB"`
		Count    int     `json:"count"`
	} `json:"tasks"`
}

type report struct {
	MedianMs                  float64 `json:"medianMs"`
	MinMs                     float64 `json:"minMs"`
	MaxMs                     float64 `json:"maxMs"`
	TasksAssigned             int     `json:"tasksAssigned"`
	HostsUsed                 int     `json:"hostsUsed"`
	CPUUtilisationOfUsedHosts float64 `json:"cpuUtilisationOfUsedHosts"`
}

func main() {
	fs := flag.NewFlagSet("binpack-bench", flag.ContinueOnError)
	reps := fs.Int("reps", 10, "timed runs of Pack")
	warmup := fs.Int("warmup", 2, "untimed runs first")
	placement := fs.String("placement", binpack.Binpack, "BINPACK or SPREAD")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: binpack-bench [flags] WORKLOAD.json   (- for standard input)")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == flag.ErrHelp {
			os.Exit(0)
		}
		os.Exit(2)
	}
	if fs.NArg() != 1 || *reps < 1 || *warmup < 0 || *placement != binpack.Binpack && *placement != binpack.Spread {
		fs.Usage()
		os.Exit(2)
	}
	rep, err := run(fs.Arg(0), *reps, *warmup, *placement)
	if err != nil {
		fmt.Fprintln(os.Stderr, "binpack-bench:", err)
		os.Exit(1)
	}
	json.NewEncoder(os.Stdout).Encode(rep)
}

func run(path string, reps, warmup int, placement string) (report, error) {
	var in io.Reader = os.Stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return report{}, err
		}
		defer f.Close()
		in = f
	}
	var w workload
	dec := json.NewDecoder(in)
	dec.DisallowUnknownFields()
	if err := dec.Decode(&w); err != nil {
		return report{}, fmt.Errorf("read workload: %w", err)
	}
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
	used := map[int]float64{}
	for g, placed := range res.Placed {
		for _, a := range placed {
			if a >= 0 {
				rep.TasksAssigned++
				used[a] += groups[g].Need.CPUs
			}
		}
	}
	var usedCPU, totalCPU float64
	for a, c := range used {
		usedCPU += c
		totalCPU += agents[a].Free.CPUs
	}
	rep.HostsUsed = len(used)
	if totalCPU > 0 {
		rep.CPUUtilisationOfUsedHosts = usedCPU / totalCPU
	}
	return rep, nil
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
