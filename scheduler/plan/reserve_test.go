package plan

import (
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/ejcloud/ejcloud/scheduler/binpack"
)

// A run that needs a whole agent, among smaller ones that the packer prefers (they place more
// shards): Reserve puts it first when the offers hold it, holds the agents it would fit on
// once this framework's transient tasks there end when they do not, and gives up (ok false)
// when nothing this framework can free would make room.
func TestReserve(t *testing.T) {
	agent := func(id string, cpus float64, apps ...string) binpack.Agent {
		a := binpack.Agent{ID: id, Hostname: id, Free: binpack.Resources{CPUs: cpus, MemMB: 4096}, Executors: map[string]bool{}}
		for _, app := range apps {
			a.Executors[app] = true
		}
		return a
	}
	group := func(job string, shards int, cpus float64, ready bool) binpack.Group {
		g := binpack.Group{Job: job, App: "app", Total: shards, Need: binpack.Resources{CPUs: cpus, MemMB: 64},
			Executor: binpack.Resources{CPUs: 0.5, MemMB: 32}, Placement: binpack.Binpack, Integrity: ready}
		for i := range shards {
			g.Items = append(g.Items, i)
		}
		return g
	}
	big := group("big", 1, 3.5, true)
	smalls := []binpack.Group{group("s1", 1, 1, true), group("s2", 1, 1, true), group("s3", 1, 1, true), group("s4", 1, 1, true)}
	cases := []struct {
		name     string
		groups   []binpack.Group // the starving run is the first, unless starved says
		agents   []binpack.Agent
		freeable map[string]binpack.Resources
		starved  []Starving // default: the first group, nothing held before
		ok       bool
		first    int    // the group that goes first, when ok
		placed   string // per group: agent IDs, "-" for unplaced
		held     []string
		reasons  map[string]map[string]int // by job
		// fitsAnyway: binpack.Pack alone places the first run too; in every other case it
		// leaves it out, which is why Reserve exists.
		fitsAnyway bool
	}{
		{
			name:   "the offers hold it: it goes first, the smaller runs take what is left",
			groups: append([]binpack.Group{big}, smalls...),
			agents: []binpack.Agent{agent("A", 4, "app"), agent("B", 1, "app")},
			ok:     true, placed: "big:[A] s1:[B] s2:[-] s3:[-] s4:[-]",
			reasons: map[string]map[string]int{"s2": {binpack.ReasonCPU: 2}, "s3": {binpack.ReasonCPU: 2}, "s4": {binpack.ReasonCPU: 2}},
		},
		{
			name:   "its executor counts once on the agent it opens",
			groups: []binpack.Group{big, group("s1", 1, 0.5, true)},
			agents: []binpack.Agent{agent("A", 4.5)},
			ok:     true, placed: "big:[A] s1:[A]", fitsAnyway: true,
		},
		{
			name:     "room once the transient tasks on A end: A is held, B still takes work",
			groups:   append([]binpack.Group{big}, smalls...),
			agents:   []binpack.Agent{agent("A", 1, "app"), agent("B", 2, "app")},
			freeable: map[string]binpack.Resources{"A": {CPUs: 3}, "B": {CPUs: 1}},
			ok:       true, placed: "big:[-] s1:[B] s2:[B] s3:[-] s4:[-]", held: []string{"A"},
			reasons: map[string]map[string]int{"big": {ReasonHolding: 1},
				"s3": {binpack.ReasonCPU: 1, ReasonReserved: 1}, "s4": {binpack.ReasonCPU: 1, ReasonReserved: 1}},
		},
		{
			name:     "failover work keeps its precedence over the starving run",
			groups:   []binpack.Group{big, group("fo", 1, 1, false)},
			agents:   []binpack.Agent{agent("A", 4, "app")},
			freeable: map[string]binpack.Resources{"A": {CPUs: 1}},
			ok:       true, placed: "big:[-] fo:[A]", held: []string{"A"},
			reasons: map[string]map[string]int{"big": {ReasonHolding: 1}},
		},
		{
			name:     "too big even once every transient task ended: nothing held",
			groups:   append([]binpack.Group{group("huge", 1, 8, true)}, smalls...),
			agents:   []binpack.Agent{agent("A", 1, "app"), agent("B", 2, "app")},
			freeable: map[string]binpack.Resources{"A": {CPUs: 3}},
			ok:       false,
		},
		{
			name:     "an agent held in an earlier cycle, offered alone, is held again: its freed cpu adds up",
			groups:   append([]binpack.Group{group("wide", 2, 3.5, true)}, smalls...),
			agents:   []binpack.Agent{agent("A", 1, "app")},
			freeable: map[string]binpack.Resources{"A": {CPUs: 3}},
			starved:  []Starving{{Group: 0, Held: map[string]bool{"A": true, "B": true}}},
			ok:       true, placed: "wide:[- -] s1:[-] s2:[-] s3:[-] s4:[-]", held: []string{"A"},
			reasons: map[string]map[string]int{"wide": {ReasonHolding: 1},
				"s1": {ReasonReserved: 1}, "s2": {ReasonReserved: 1}, "s3": {ReasonReserved: 1}, "s4": {ReasonReserved: 1}},
		},
		{
			name:     "an agent offered alone that was not held, for a run it cannot hold alone: nothing held",
			groups:   append([]binpack.Group{group("wide", 2, 3.5, true)}, smalls...),
			agents:   []binpack.Agent{agent("C", 1, "app")},
			freeable: map[string]binpack.Resources{"C": {CPUs: 3}},
			starved:  []Starving{{Group: 0, Held: map[string]bool{"A": true, "B": true}}},
			ok:       false,
		},
		{
			name:     "runs that fit on no agent are passed over without using up the tries",
			groups:   append([]binpack.Group{group("h1", 1, 8, true), group("h2", 1, 8, true), group("h3", 1, 8, true), big}, smalls...),
			agents:   []binpack.Agent{agent("A", 1, "app"), agent("B", 2, "app")},
			freeable: map[string]binpack.Resources{"A": {CPUs: 3}},
			starved:  []Starving{{Group: 0}, {Group: 1}, {Group: 2}, {Group: 3}},
			ok:       true, first: 3, placed: "h1:[-] h2:[-] h3:[-] big:[-] s1:[B] s2:[B] s3:[-] s4:[-]", held: []string{"A"},
			reasons: map[string]map[string]int{"big": {ReasonHolding: 1},
				"h1": {binpack.ReasonCPU: 1, ReasonReserved: 1}, "h2": {binpack.ReasonCPU: 1, ReasonReserved: 1}, "h3": {binpack.ReasonCPU: 1, ReasonReserved: 1},
				"s3": {binpack.ReasonCPU: 1, ReasonReserved: 1}, "s4": {binpack.ReasonCPU: 1, ReasonReserved: 1}},
		},
		{
			name:     "a run of several shards holds every agent it needs",
			groups:   append([]binpack.Group{group("wide", 2, 3.5, true)}, smalls...),
			agents:   []binpack.Agent{agent("A", 0, "app"), agent("B", 1, "app"), agent("C", 2, "app")},
			freeable: map[string]binpack.Resources{"A": {CPUs: 4}, "B": {CPUs: 3}},
			ok:       true, placed: "wide:[- -] s1:[C] s2:[C] s3:[-] s4:[-]", held: []string{"A", "B"},
			reasons: map[string]map[string]int{"wide": {ReasonHolding: 2},
				"s3": {binpack.ReasonCPU: 1, ReasonReserved: 2}, "s4": {binpack.ReasonCPU: 1, ReasonReserved: 2}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			before := fmt.Sprint(c.agents)
			if c.starved == nil {
				c.starved = []Starving{{Group: 0}}
			}
			if plain := binpack.Pack(c.groups, c.agents); (plain.Placed[c.first][0] >= 0) != c.fitsAnyway {
				t.Fatalf("binpack.Pack alone placed the run at %v; want it placed: %v", plain.Placed[c.first], c.fitsAnyway)
			}
			res, r := Reserve(c.groups, c.starved, c.agents, c.freeable)
			if fmt.Sprint(c.agents) != before {
				t.Fatalf("the agents changed: %v; were %v", c.agents, before)
			}
			if ok := r.Group >= 0; ok != c.ok {
				t.Fatalf("a run went first: %v (%+v); want %v", ok, r, c.ok)
			}
			if !c.ok {
				return
			}
			if r.Group != c.first {
				t.Fatalf("group %d went first; want %d", r.Group, c.first)
			}
			held := r.Held
			var placed []string
			for g, p := range res.Placed {
				var on []string
				for _, a := range p {
					if a < 0 {
						on = append(on, "-")
					} else {
						on = append(on, c.agents[a].ID)
					}
				}
				placed = append(placed, fmt.Sprintf("%s:%v", c.groups[g].Job, on))
			}
			if got := fmt.Sprint(placed); got != "["+c.placed+"]" {
				t.Errorf("placed %s; want [%s]", got, c.placed)
			}
			if !slices.Equal(held, c.held) {
				t.Errorf("held %v; want %v", held, c.held)
			}
			reasons := map[string]map[string]int{}
			for _, u := range res.Unplaced {
				reasons[c.groups[u.Group].Job] = u.Reasons
			}
			if c.reasons == nil {
				c.reasons = map[string]map[string]int{}
			}
			if !reflect.DeepEqual(reasons, c.reasons) {
				t.Errorf("unplaced reasons %v; want %v", reasons, c.reasons)
			}
		})
	}
}
