package audit

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/cron"
	"github.com/ejcloud/ejcloud/scheduler/schedule"
	"github.com/ejcloud/ejcloud/state"
)

// shard is one task of a run for both audits: its status updates (ups) and its script's
// records (records), in seconds after t0. killed: an infrastructure failure at end (the agent
// reports TASK_FAILED; the script recorded no end). dropped: the master dropped the launch at
// first (nothing ran).
type shard struct {
	item, kind, name string
	first, end       float64
	killed, dropped  bool
}

func (s shard) life() life {
	l := life{item: s.item, kind: s.kind, name: s.name, first: s.first, end: s.end, dropped: s.dropped}
	if s.killed {
		l.state = "TASK_FAILED"
	}
	return l
}

func (s shard) run() run {
	r := run{item: s.item, kind: s.kind, name: s.name, start: s.first, end: s.end, dropped: s.dropped}
	if s.killed {
		r.end = -1
	}
	return r
}

// runOf is the three shards of a healthy run with run id id (8 hex digits) begun at s.
func runOf(id string, s float64) []shard {
	return []shard{
		{item: "0", kind: "READY", name: id + "-r0", first: s, end: s + 0.1},
		{item: "1", kind: "READY", name: id + "-r1", first: s + 0.01, end: s + 0.1},
		{item: "2", kind: "READY", name: id + "-r2", first: s + 0.02, end: s + 0.1},
	}
}

func shards(parts ...[]shard) []shard {
	var out []shard
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// fired is a ledger entry of slot s that became run id, launched at l.
func fired(s float64, id string, l float64) state.FireEntry {
	return state.FireEntry{Slot: at(s), Count: 1, Outcome: state.OutcomeFired, Run: id, Launched: at(l), Tasks: 3}
}

// notLaunched is a ledger entry of slot s that fired and was never launched.
func notLaunched(s float64) state.FireEntry {
	return state.FireEntry{Slot: at(s), Count: 1, Outcome: state.OutcomeFired}
}

// span is a ledger entry of slots from through to (every 2 s) with one outcome and reason.
func span(from, to float64, outcome, reason string) state.FireEntry {
	e := state.FireEntry{Slot: at(from), Count: int(to-from)/2 + 1, Outcome: outcome, Reason: reason}
	if to != from {
		e.Through = at(to)
	}
	return e
}

func TestEverySlotIsAccountedFor(t *testing.T) {
	every2s, err := cron.Parse("*/2 * * * * ?")
	if err != nil {
		t.Fatal(err)
	}
	const (
		a, b, c, d = "0000000a", "0000000b", "0000000c", "0000000d"
		queued     = state.ReasonMergedQueued
		noLeader   = schedule.ReasonPolicySkip
	)
	// long is run a with shard 0 running until end.
	long := func(end float64) []shard { r := runOf(a, 0.05); r[0].end = end; return r }
	cases := []struct {
		name       string
		shards     []shard
		fires      []state.FireEntry
		leaderless []Span
		until      float64 // the window's end; slots 0, 2, 4, 6 by default
		misfire    bool
		lost       int
		excused    int
		problem    string // a finding both audits must report; "" = none at all
	}{
		// The planted defect: two healthy rounds, the job idle between, the fires of 2 s and
		// 4 s lost. Matching rounds to fires cannot see it; the ledger and the runs can.
		{name: "fires at 2 s and 4 s that fired and never ran",
			shards: shards(runOf(a, 0.05), runOf(d, 6.05)),
			fires:  []state.FireEntry{fired(0, a, 0.01), fired(2, b, 2.5), fired(4, c, 4.5), fired(6, d, 6.01)},
			lost:   2, problem: "cron slot 06:00:02.000 fired and became run 0000000b (launched 06:00:02.500, says the ledger), of which the"},
		{name: "fires at 2 s and 4 s the scheduler never handled",
			shards: shards(runOf(a, 0.05), runOf(d, 6.05)),
			fires:  []state.FireEntry{fired(0, a, 0.01), fired(6, d, 6.01)},
			lost:   2, problem: "cron slot 06:00:04.000 is in no entry of the fire ledger"},
		{name: "the same rounds with no ledger read",
			shards: shards(runOf(a, 0.05), runOf(d, 6.05)),
			lost:   4, problem: "cron slot 06:00:00.000 is in no entry of the fire ledger"},
		{name: "a job that never ran",
			lost: 4, problem: "cron slot 06:00:06.000 is in no entry"},
		{name: "a job that never ran though its ledger says it fired",
			fires: []state.FireEntry{fired(0, a, 0.01), fired(2, b, 2.01), fired(4, c, 4.01), fired(6, d, 6.01)},
			lost:  4, problem: "cron slot 06:00:00.000 fired and became run 0000000a"},
		{name: "a fire never launched, and the slots merged into it",
			shards: runOf(a, 0.05),
			fires:  []state.FireEntry{fired(0, a, 0.01), notLaunched(2), span(4, 6, state.OutcomeMerged, queued)},
			lost:   3, problem: "cron slot 06:00:06.000 merged (merged into the run already queued) into the slot 06:00:02.000, which was never launched"},
		{name: "a slot merged into a run that had already begun (not queued: the slot went nowhere)",
			shards: shards(long(3.5), runOf(c, 4.05), runOf(d, 6.05)),
			fires:  []state.FireEntry{fired(0, a, 0.01), span(2, 2, state.OutcomeMerged, queued), fired(4, c, 4.01), fired(6, d, 6.01)},
			lost:   1, problem: "cron slot 06:00:02.000 merged (merged into the run already queued) into the slot 06:00:00.000, which became run 0000000a, which began at 06:00:00.050, not after the slot"},
		{name: "a slot given to a run that began before it",
			shards: shards(runOf(a, 0.05), runOf(d, 6.05)),
			fires:  []state.FireEntry{fired(0, a, 0.01), fired(2, a, 0.01), span(4, 4, state.OutcomeMerged, queued), fired(6, d, 6.01)},
			lost:   2, problem: "cron slot 06:00:02.000 fired and became run 0000000a, which began at 06:00:00.050, not after the slot"},
		{name: "slots skipped as missed while no instance led, with no leaderless span",
			shards: shards(runOf(a, 0.05), runOf(d, 6.05)),
			fires:  []state.FireEntry{fired(0, a, 0.01), span(2, 4, state.OutcomeSkipped, noLeader), fired(6, d, 6.01)},
			lost:   2, problem: "cron slot 06:00:02.000 was skipped (missed while no instance led (misfirePolicy skip)), outside every leaderless span"},
		{name: "slots skipped as missed while no instance led, outside the leaderless span",
			shards:     shards(runOf(a, 0.05), runOf(d, 6.05)),
			fires:      []state.FireEntry{fired(0, a, 0.01), span(2, 4, state.OutcomeSkipped, noLeader), fired(6, d, 6.01)},
			leaderless: []Span{{From: at(2.5), To: at(5)}},
			lost:       1, excused: 1, problem: "cron slot 06:00:02.000 was skipped"},
		{name: "a slot skipped for a full ready queue, even while no instance led",
			shards:     shards(runOf(a, 0.05), runOf(c, 4.05), runOf(d, 6.05)),
			fires:      []state.FireEntry{fired(0, a, 0.01), span(2, 2, state.OutcomeSkipped, state.ReasonQueueFull), fired(4, c, 4.01), fired(6, d, 6.01)},
			leaderless: []Span{{From: at(1), To: at(3)}},
			lost:       1, problem: "cron slot 06:00:02.000 was skipped (the ready queue is full (job-state-queue-size))"},
		{name: "a slot missing from the middle of the ledger, even while no instance led",
			shards:     shards(runOf(a, 0.05), runOf(c, 4.05), runOf(d, 6.05)),
			fires:      []state.FireEntry{fired(0, a, 0.01), fired(4, c, 4.01), fired(6, d, 6.01)},
			leaderless: []Span{{From: at(1), To: at(3)}},
			lost:       1, problem: "cron slot 06:00:02.000 is in no entry"},

		{name: "four healthy runs",
			shards: shards(runOf(a, 0.05), runOf(b, 2.05), runOf(c, 4.05), runOf(d, 6.05)),
			fires:  []state.FireEntry{fired(0, a, 0.01), fired(2, b, 2.01), fired(4, c, 4.01), fired(6, d, 6.01)}},
		{name: "a fire during a long round queues the next run, and the fires after it merge into it",
			shards: shards(long(5.0), runOf(b, 5.1), runOf(d, 6.05)),
			fires:  []state.FireEntry{fired(0, a, 0.01), fired(2, b, 5.05), span(4, 4, state.OutcomeMerged, queued), fired(6, d, 6.01)}},
		{name: "a round made long by a failover relaunch: the fires during it run after it",
			shards: shards(
				[]shard{{item: "0", kind: "READY", name: a + "-r0", first: 0.05, end: 0.07, killed: true}}, runOf(a, 0.05)[1:],
				[]shard{{item: "0", kind: "FAILOVER", name: a + "-f0", first: 4.5, end: 4.6}},
				runOf(b, 4.7), runOf(d, 6.05)),
			fires: []state.FireEntry{fired(0, a, 0.01), fired(2, b, 4.65), span(4, 4, state.OutcomeMerged, queued), fired(6, d, 6.01)}},
		{name: "a fire whose READY launch was dropped runs as its failover relaunches",
			shards: shards(runOf(a, 0.05),
				[]shard{{item: "0", kind: "READY", name: b + "-r0", first: 2.05, dropped: true}, {item: "1", kind: "READY", name: b + "-r1", first: 2.05, dropped: true},
					{item: "2", kind: "READY", name: b + "-r2", first: 2.05, dropped: true}},
				[]shard{{item: "0", kind: "FAILOVER", name: b + "-g0", first: 3.1, end: 3.2}, {item: "1", kind: "FAILOVER", name: b + "-g1", first: 3.1, end: 3.2},
					{item: "2", kind: "FAILOVER", name: b + "-g2", first: 3.1, end: 3.2}},
				runOf(c, 4.05), runOf(d, 6.05)),
			fires: []state.FireEntry{fired(0, a, 0.01), fired(2, b, 2.01), fired(4, c, 4.01), fired(6, d, 6.01)}},
		{name: "the planted rounds, with the slots between skipped while no instance led, inside the leaderless span",
			shards:     shards(runOf(a, 0.05), runOf(d, 6.05)),
			fires:      []state.FireEntry{fired(0, a, 0.01), span(2, 4, state.OutcomeSkipped, noLeader), fired(6, d, 6.01)},
			leaderless: []Span{{From: at(1.5), To: at(5)}},
			excused:    2},
		{name: "a slot before the job's first ledger entry, while no instance led (a takeover of a job without a ledger)",
			shards:     shards(runOf(b, 2.05), runOf(c, 4.05), runOf(d, 6.05)),
			fires:      []state.FireEntry{fired(2, b, 2.01), fired(4, c, 4.01), fired(6, d, 6.01)},
			leaderless: []Span{{From: at(-0.5), To: at(1.9)}},
			excused:    1},
		{name: "a slot after the window's end is not audited",
			shards: shards(runOf(a, 0.05), runOf(b, 2.05), runOf(c, 4.05)),
			fires:  []state.FireEntry{fired(0, a, 0.01), fired(2, b, 2.01), fired(4, c, 4.01), notLaunched(6)},
			until:  5.9},
		{name: "with misfire, the fires during a long round run one after another", misfire: true,
			shards: shards(long(4.5), runOf(b, 4.6), runOf(c, 4.8), runOf(d, 6.05)),
			fires:  []state.FireEntry{fired(0, a, 0.01), fired(2, b, 4.55), fired(4, c, 4.75), fired(6, d, 6.01)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			until := 6.0
			if c.until != 0 {
				until = c.until
			}
			// The API lists the ledger newest first.
			fires := slices.Clone(c.fires)
			slices.Reverse(fires)
			job := Job{Name: "job", Shards: 3, Schedule: every2s, Since: t0, Misfire: c.misfire, Until: at(until), Fires: fires, Leaderless: c.leaderless}
			var lives []life
			var rs []run
			for _, s := range c.shards {
				lives, rs = append(lives, s.life()), append(rs, s.run())
			}
			for _, rep := range []Report{Check([]Job{job}, ups(lives...)), CheckEffects([]Job{job}, records(rs...), drops(rs...))} {
				slots := int(until)/2 + 1
				if rep.Slots != slots || rep.LostFires != c.lost || rep.Excused != c.excused {
					t.Errorf("%s: slots %d, lost fires %d, excused %d; want %d, %d, %d\n%s", rep.Source, rep.Slots, rep.LostFires, rep.Excused, slots, c.lost, c.excused, rep)
				}
				if c.problem == "" && !rep.OK() || c.problem != "" && !strings.Contains(rep.String(), c.problem) {
					t.Errorf("%s: want finding %q; got\n%s", rep.Source, c.problem, rep)
				}
			}
		})
	}
}

// Without a window the slots are not accounted for: the audits of the tests that do not read
// the ledger judge the rounds alone, as before.
func TestNoWindowNoSlotAccounting(t *testing.T) {
	every2s, err := cron.Parse("*/2 * * * * ?")
	if err != nil {
		t.Fatal(err)
	}
	rep := Check([]Job{{Name: "job", Shards: 3, Schedule: every2s, Since: t0}}, nil)
	if !rep.OK() || rep.Slots != 0 {
		t.Fatalf("no window: %s", rep)
	}
	rep = Check([]Job{{Name: "job", Shards: 3, Schedule: every2s, Since: t0, Until: at(6)}}, nil)
	if rep.LostFires != 4 {
		t.Fatalf("a window of four slots and nothing ran: %s", rep)
	}
}

// A long window with a ledger over all of it is audited in time proportional to its slots.
func TestALongWindowIsAccountedForQuickly(t *testing.T) {
	every2s, err := cron.Parse("*/2 * * * * ?")
	if err != nil {
		t.Fatal(err)
	}
	const n = 5000
	var fires []state.FireEntry
	var lives []life
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("%08x", i)
		fires = append(fires, fired(float64(2*i), id, float64(2*i)+0.01))
		for _, s := range runOf(id, float64(2*i)+0.05) {
			lives = append(lives, s.life())
		}
	}
	start := time.Now()
	rep := Check([]Job{{Name: "job", Shards: 3, Schedule: every2s, Since: t0, Until: at(2 * (n - 1)), Fires: fires}}, ups(lives...))
	if !rep.OK() || rep.Slots != n {
		t.Fatalf("%d healthy runs: %s", n, strings.SplitN(rep.String(), "\n", 3)[0])
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("%d slots took %v", n, d)
	}
}
