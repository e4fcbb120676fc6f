package audit

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// startRecords counts the start records, as the soak counts them in the side-effect log.
func startRecords(recs []Record) int {
	n := 0
	for _, r := range recs {
		if r.Kind == "start" {
			n++
		}
	}
	return n
}

// A task id is one launch: a second run under it is a duplicate, whichever way the rounds fall.
func TestASecondRunUnderOneTaskIDIsADuplicate(t *testing.T) {
	id := func(item, name string) string { return "job@-@" + item + "@-@READY@-@agent-1@-@" + name }
	rec := func(kind string, s float64, item string) Record {
		return Record{Kind: kind, At: at(s), TaskID: id(item, "a"+item), Item: int(item[0] - '0')}
	}
	up := func(state string, s float64, item string) Update {
		return Update{TaskID: id(item, "a"+item), State: state, At: at(s)}
	}
	healthyRecs := records(cleanRound(0.05, "a")...)
	healthyUps := ups(healthy(0.05, "a")...)
	cases := []struct {
		name      string
		records   []Record // side effects; nil: the status updates are audited
		updates   []Update
		reused    int
		problem   string // "" = none at all
		accounted int    // side effects: StartsAccounted; -1: every start record
	}{
		{name: "side effects: a second start after the first run ended",
			records: append(records(cleanRound(0.05, "a")...), rec("start", 0.5, "1"), rec("end", 0.6, "1")),
			reused:  1, accounted: -1, problem: "task job@-@1@-@READY@-@agent-1@-@a1 ran again under the same task id at 06:00:00.500 (a second start record; the first at 06:00:00.060)"},
		{name: "side effects: a second start while the first still ran",
			records: slices.Concat(records(cleanRound(0.05, "a")...)[:3], []Record{rec("start", 0.07, "1"), rec("end", 0.1, "1"), rec("end", 0.11, "1")},
				records(cleanRound(0.05, "a")...)[4:]),
			reused: 1, accounted: -1, problem: "a1 ran again under the same task id at 06:00:00.070"},
		{name: "side effects: a second start killed part-way",
			records: append(records(cleanRound(0.05, "a")...), rec("start", 0.5, "2")),
			reused:  1, accounted: -1, problem: "a2 ran again under the same task id"},
		{name: "side effects: an end beyond the starts",
			records:   append(records(cleanRound(0.05, "a")...), rec("end", 0.5, "2")),
			accounted: -1, problem: "a2 recorded more ends than starts"},
		{name: "side effects: a healthy round", records: healthyRecs, accounted: -1},
		// The soak's identity: a start the audit does not place is missing from StartsAccounted.
		{name: "side effects: a start of a shard the job does not have is not placed",
			records:   append(records(cleanRound(0.05, "a")...), Record{Kind: "start", At: at(0.05), TaskID: id("3", "a3"), Item: 3}),
			accounted: 3, problem: "runs shard 3 of a 3-shard job"},
		{name: "side effects: a start under a task id the audit cannot read is not placed",
			records:   append(records(cleanRound(0.05, "a")...), Record{Kind: "start", At: at(0.05), TaskID: "job-0-a", Item: 0}),
			accounted: 3},

		{name: "status updates: TASK_RUNNING after TASK_FINISHED",
			updates: append(ups(healthy(0.05, "a")...), up("TASK_RUNNING", 0.5, "0"), up("TASK_FINISHED", 0.6, "0")),
			reused:  1, problem: "task job@-@0@-@READY@-@agent-1@-@a0 ran again under the same task id at 06:00:00.500 (TASK_RUNNING after its TASK_FINISHED at 06:00:00.150)"},
		{name: "status updates: TASK_RUNNING after TASK_GONE",
			updates: append(ups(healthy(0.05, "a")...)[:4], up("TASK_RUNNING", 0.07, "2"), up("TASK_GONE", 0.08, "2"), up("TASK_RUNNING", 0.09, "2"), up("TASK_FINISHED", 0.12, "2")),
			reused:  1, problem: "a2 ran again under the same task id at 06:00:00.090 (TASK_RUNNING after its TASK_GONE at 06:00:00.080)"},
		{name: "status updates: TASK_RUNNING again after TASK_UNREACHABLE (the agent came back) is the same run",
			updates: append(ups(healthy(0.05, "a")...)[:4], up("TASK_RUNNING", 0.07, "2"), up("TASK_UNREACHABLE", 0.08, "2"), up("TASK_RUNNING", 0.09, "2"), up("TASK_FINISHED", 0.1, "2"))},
		{name: "status updates: a terminal update after the terminal one is no run",
			updates: append(healthyUps, up("TASK_GONE", 60, "0"))},
		{name: "status updates: a healthy round", updates: healthyUps},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			jobs := []Job{{Name: "job", Shards: 3}}
			rep := Check(jobs, c.updates)
			if c.records != nil {
				rep = CheckEffects(jobs, c.records, nil)
			}
			if rep.Reused != c.reused || rep.Duplicates != c.reused {
				t.Errorf("reused %d, duplicates %d; want %d, %d\n%s", rep.Reused, rep.Duplicates, c.reused, c.reused, rep)
			}
			if c.problem == "" && !rep.OK() || c.problem != "" && !strings.Contains(rep.String(), c.problem) {
				t.Errorf("want finding %q; got\n%s", c.problem, rep)
			}
			if c.records != nil {
				want := c.accounted
				if want < 0 {
					want = startRecords(c.records)
				}
				if got := rep.StartsAccounted(); got != want {
					t.Errorf("%d start records, %d accounted for; want %d\n%s", startRecords(c.records), got, want, rep)
				}
			}
		})
	}
}

// A round re-run under the same task ids, a second later, no longer passes as one round.
func TestARoundRerunUnderItsTaskIDsIsFound(t *testing.T) {
	recs := records(cleanRound(0.05, "a")...)
	for _, r := range records(cleanRound(0.05, "a")...) {
		r.At = r.At.Add(time.Second)
		recs = append(recs, r)
	}
	rep := CheckEffects([]Job{{Name: "job", Shards: 3}}, recs, nil)
	if rep.Reused != 3 || rep.OK() || rep.StartsAccounted() != startRecords(recs) {
		t.Fatalf("three shards run twice under their ids: %s", rep)
	}
}
