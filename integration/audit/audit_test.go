package audit

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"

	"github.com/ejcloud/ejcloud/cron"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/taskdata"
)

var t0 = time.Date(2026, 11, 22, 6, 0, 0, 0, time.UTC) // a fire of "*/2 * * * * ?"

// life is one task: its id parts, when its first update came and how (and when) it ended,
// both in seconds after t0; end < 0: it never ended.
type life struct {
	item          string
	kind          string // READY or FAILOVER
	name          string // distinguishes tasks of one shard
	first, end    float64
	state         string
	jobFailedMark bool
	dropped       bool // the master dropped the launch: one TASK_DROPPED at first, nothing ran
	gone          bool // the launch never reached an agent: one TASK_GONE (reconciliation), nothing ran
}

func ups(lives ...life) []Update {
	var out []Update
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	for _, l := range lives {
		id := "job@-@" + l.item + "@-@" + l.kind + "@-@agent-1@-@" + l.name
		if l.dropped || l.gone {
			state := "TASK_DROPPED"
			if l.gone {
				state = "TASK_GONE"
			}
			out = append(out, Update{TaskID: id, State: state, At: at(l.first)})
			continue
		}
		out = append(out, Update{TaskID: id, State: "TASK_RUNNING", At: at(l.first)})
		if l.end >= 0 {
			state := l.state
			if state == "" {
				state = "TASK_FINISHED"
			}
			out = append(out, Update{TaskID: id, State: state, At: at(l.end), JobFailed: l.jobFailedMark})
		}
	}
	return out
}

// healthy returns the three shards of a healthy round starting at s.
func healthy(s float64, tag string) []life {
	return []life{
		{item: "0", kind: "READY", name: tag + "0", first: s, end: s + 0.1},
		{item: "1", kind: "READY", name: tag + "1", first: s + 0.01, end: s + 0.1},
		{item: "2", kind: "READY", name: tag + "2", first: s + 0.02, end: s + 0.1},
	}
}

func join(parts ...[]life) []life {
	var out []life
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestCheck(t *testing.T) {
	every2s, err := cron.Parse("*/2 * * * * ?")
	if err != nil {
		t.Fatal(err)
	}
	killed := func(l life, at float64, state string) life { l.end, l.state = at, state; return l }
	cases := []struct {
		name      string
		lives     []life
		rounds    int
		dup, lost int
		relaunch  int
		problem   string // a finding that must be reported; "" = none at all
		misfire   bool
	}{
		{name: "with misfire, fires that fell during an outage run one after another", misfire: true,
			lives: join(healthy(4.5, "a"), healthy(4.7, "b"), healthy(4.9, "c")), rounds: 3},
		{name: "without misfire, the third round has no fire left",
			lives: join(healthy(4.5, "a"), healthy(4.7, "b"), healthy(4.9, "c")), rounds: 3, dup: 1, problem: "round 2 (06:00:04.900) has no fire of its own"},
		{name: "with misfire, a round beyond the fires is a duplicate", misfire: true,
			lives: join(healthy(4.5, "a"), healthy(4.7, "b"), healthy(4.9, "c"), healthy(5.1, "d")), rounds: 4, dup: 1, problem: "round 3 (06:00:05.100) has no fire of its own"},
		{name: "two clean rounds", lives: join(healthy(0.05, "a"), healthy(2.05, "b")), rounds: 2},
		{name: "fires merged while a round was delayed", lives: join(healthy(0.05, "a"), healthy(5.9, "b")), rounds: 2},
		{name: "a fire during a long round runs after it", lives: join(
			[]life{{item: "0", kind: "READY", name: "a0", first: 0.05, end: 3.5}, {item: "1", kind: "READY", name: "a1", first: 0.05, end: 0.1}, {item: "2", kind: "READY", name: "a2", first: 0.05, end: 0.1}},
			healthy(3.6, "b")), rounds: 2},
		{name: "the second agent's tasks start after the first agent's ended", lives: join(
			healthy(0.05, "a"),
			[]life{{item: "1", kind: "READY", name: "b1", first: 2.05, end: 2.06}, {item: "0", kind: "READY", name: "b0", first: 2.2, end: 2.3}, {item: "2", kind: "READY", name: "b2", first: 2.2, end: 2.3}}),
			rounds: 2},
		{name: "a killed shard relaunched by failover", lives: join(
			[]life{killed(healthy(0.05, "a")[0], 0.07, "TASK_FAILED")}, healthy(0.05, "a")[1:],
			[]life{{item: "0", kind: "FAILOVER", name: "f0", first: 0.5, end: 0.6}}), rounds: 1, relaunch: 1},
		{name: "a launch lost before it reached an agent, relaunched by failover", lives: join(
			healthy(0.05, "a")[1:], []life{{item: "0", kind: "FAILOVER", name: "f0", first: 1.5, end: 1.6}}), rounds: 1, relaunch: 1},
		{name: "a launch lost before it reached an agent, failed over, then the next round", lives: join(
			healthy(0.05, "a")[1:], []life{{item: "0", kind: "FAILOVER", name: "f0", first: 1.5, end: 1.6}},
			[]life{{item: "0", kind: "READY", name: "b0", first: 4.05, end: 4.1}}, healthy(4.05, "b")[1:]), rounds: 2, relaunch: 1},
		{name: "a business failure is a run", lives: join(
			[]life{killed(healthy(0.05, "a")[0], 0.07, "TASK_FAILED")}, healthy(0.05, "a")[1:]), rounds: 1},
		{name: "a killed shard never relaunched is lost", lives: join(
			[]life{killed(healthy(0.05, "a")[0], 0.07, "TASK_LOST")}, healthy(0.05, "a")[1:]),
			rounds: 1, lost: 1, problem: "round 0 (06:00:00.050) shard 0: never ran"},
		{name: "a shard never launched is lost", lives: healthy(0.05, "a")[1:],
			rounds: 1, lost: 1, problem: "shard 0: never ran"},
		{name: "a round launched twice for one fire", lives: join(healthy(0.05, "a"), healthy(0.5, "b")),
			rounds: 2, dup: 1, problem: "round 1 (06:00:00.500) has no fire of its own"},
		{name: "a round whose only fire came before the round two back ended", lives: join(
			[]life{{item: "0", kind: "READY", name: "a0", first: 0.05, end: 5}, {item: "1", kind: "READY", name: "a1", first: 0.05, end: 0.1}, {item: "2", kind: "READY", name: "a2", first: 0.05, end: 0.1}},
			healthy(5.1, "b"), healthy(5.3, "c")),
			rounds: 3, dup: 1, problem: "round 2 (06:00:05.300) has no fire of its own"},
		{name: "one shard launched twice at once", lives: join(healthy(0.05, "a"), []life{{item: "1", kind: "READY", name: "x1", first: 0.06, end: 0.2}}),
			rounds: 1, dup: 1, problem: "ran while"},
		{name: "a relaunch after a killed relaunch of a shard that had run names the task that ran", lives: join(healthy(0.05, "a"),
			[]life{killed(life{item: "2", kind: "FAILOVER", name: "f2", first: 0.3}, 0.35, "TASK_FAILED"), {item: "2", kind: "FAILOVER", name: "g2", first: 0.5, end: 0.6}}),
			rounds: 1, dup: 1, relaunch: 2, problem: "task job@-@2@-@FAILOVER@-@agent-1@-@g2 launched after job@-@2@-@READY@-@agent-1@-@a2 had run"},
		{name: "a failover relaunch of a shard that had run", lives: join(healthy(0.05, "a"), []life{{item: "2", kind: "FAILOVER", name: "f2", first: 0.3, end: 0.4}}),
			rounds: 1, dup: 1, relaunch: 1, problem: "launched after"},
		{name: "the relaunches of a fire whose READY launch the master dropped are that fire's round", lives: join(healthy(0.05, "a"),
			[]life{{item: "0", kind: "READY", name: "b0", first: 2.05, dropped: true}, {item: "1", kind: "READY", name: "b1", first: 2.05, dropped: true},
				{item: "2", kind: "READY", name: "b2", first: 2.05, dropped: true}},
			[]life{{item: "0", kind: "FAILOVER", name: "g0", first: 3.1, end: 3.2}, {item: "1", kind: "FAILOVER", name: "g1", first: 3.1, end: 3.2},
				{item: "2", kind: "FAILOVER", name: "g2", first: 3.1, end: 3.2}}),
			rounds: 2, relaunch: 3},
		{name: "the relaunches of a fire whose READY launch never reached an agent (reconciled as gone) are that fire's round", lives: join(healthy(0.05, "a"),
			[]life{{item: "0", kind: "READY", name: "b0", first: 10.05, gone: true}, {item: "1", kind: "READY", name: "b1", first: 10.05, gone: true},
				{item: "2", kind: "READY", name: "b2", first: 10.05, gone: true}},
			[]life{{item: "0", kind: "FAILOVER", name: "g0", first: 12.1, end: 12.2}, {item: "1", kind: "FAILOVER", name: "g1", first: 12.1, end: 12.2},
				{item: "2", kind: "FAILOVER", name: "g2", first: 12.1, end: 12.2}}),
			rounds: 2, relaunch: 3},
		{name: "a task that never ended", lives: join(healthy(0.05, "a")[:2], []life{{item: "2", kind: "READY", name: "a2", first: 0.06, end: -1}}),
			rounds: 1, lost: 1, problem: "never ended"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// The failure marker only on the business-failure case.
			lives := append([]life(nil), c.lives...)
			if strings.HasPrefix(c.name, "a business failure") {
				lives[0].jobFailedMark = true
			}
			rep := Check([]Job{{Name: "job", Shards: 3, Schedule: every2s, Since: t0, Misfire: c.misfire}}, ups(lives...))
			if rep.Rounds != c.rounds || rep.Duplicates != c.dup || rep.Lost != c.lost || rep.Relaunches != c.relaunch {
				t.Fatalf("rounds %d dup %d lost %d relaunches %d; want %d %d %d %d\n%s",
					rep.Rounds, rep.Duplicates, rep.Lost, rep.Relaunches, c.rounds, c.dup, c.lost, c.relaunch, rep)
			}
			if c.problem == "" && !rep.OK() || c.problem != "" && !strings.Contains(rep.String(), c.problem) {
				t.Fatalf("want finding %q; got\n%s", c.problem, rep)
			}
		})
	}
}

func TestTriggerOnlyJobsAreNotMatchedToFires(t *testing.T) {
	rep := Check([]Job{{Name: "job", Shards: 3}}, ups(join(healthy(0.05, "a"), healthy(0.5, "b"))...))
	if !rep.OK() || rep.Rounds != 2 {
		t.Fatalf("two triggered rounds: %s", rep)
	}
}

func TestOtherTasksAreIgnored(t *testing.T) {
	u := append(ups(healthy(0.05, "a")...), Update{TaskID: "not-ours", State: "TASK_LOST", At: t0},
		Update{TaskID: "other@-@0@-@READY@-@agent-1@-@x", State: "TASK_RUNNING", At: t0})
	if rep := Check([]Job{{Name: "job", Shards: 3}}, u); !rep.OK() || rep.Rounds != 1 {
		t.Fatalf("got %s", rep)
	}
}

// A task ends at its first terminal update, and a run stays a run: the master's later word on
// a task already over (its agent marked gone) changes neither.
func TestALaterTerminalUpdateDoesNotUndoARun(t *testing.T) {
	u := ups(healthy(0.05, "a")...)
	u = append(u, Update{TaskID: "job@-@0@-@READY@-@agent-1@-@a0", State: "TASK_GONE", At: t0.Add(time.Minute)})
	u = append(u, ups(healthy(2.05, "b")...)...)
	every2s, err := cron.Parse("*/2 * * * * ?")
	if err != nil {
		t.Fatal(err)
	}
	if rep := Check([]Job{{Name: "job", Shards: 3, Schedule: every2s, Since: t0}}, u); !rep.OK() || rep.Rounds != 2 {
		t.Fatalf("%s; want two clean rounds", rep)
	}
}

func TestRecorderWritesWhatReadFileReads(t *testing.T) {
	var buf bytes.Buffer
	r := NewRecorder(&buf)
	r.now = func() time.Time { return t0 }
	id := "job@-@0@-@READY@-@agent-1@-@u"
	r.Observe("fw", mesos.TaskStatus{TaskID: mesos.TaskID{Value: id}, State: mesos.TASK_RUNNING.Enum()})
	r.Observe("fw", mesos.TaskStatus{TaskID: mesos.TaskID{Value: id}, State: mesos.TASK_FAILED.Enum(), Data: taskdata.Status{JobFailed: true}.Encode()})
	path := filepath.Join(t.TempDir(), "updates.jsonl")
	// A writer killed mid-line leaves a partial last line; it is ignored.
	if err := os.WriteFile(path, append(buf.Bytes(), `{"taskId":"job@-@0`...), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []Update{{TaskID: id, State: "TASK_RUNNING", At: t0}, {TaskID: id, State: "TASK_FAILED", JobFailed: true, At: t0}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("read %+v; want %+v", got, want)
	}
	if mem := r.Updates(); len(mem) != 2 || mem[1] != want[1] {
		t.Fatalf("Updates() = %+v", mem)
	}
	// A bad line in the middle is an error, not silently skipped.
	os.WriteFile(path, []byte("{bad\n"+buf.String()), 0o644)
	if _, err := ReadFile(path); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("bad first line: err %v", err)
	}
}

// A registration under way at a slot: the scheduler may have begun the job's cron before it,
// and then fired it, though the slot is before Since (the answer). The ledger tells.
func TestASlotDuringTheRegistrationIsTheJobsIfTheLedgerHoldsIt(t *testing.T) {
	every2s, err := cron.Parse("*/2 * * * * ?")
	if err != nil {
		t.Fatal(err)
	}
	lives := join(healthy(0.05, "a"), healthy(2.05, "b"))
	registering := Job{Name: "job", Shards: 3, Schedule: every2s, Registered: t0.Add(-10 * time.Millisecond), Since: t0.Add(10 * time.Millisecond)}
	for _, c := range []struct {
		name    string
		fires   []state.FireEntry
		problem string
	}{
		{name: "the ledger holds the slot", fires: []state.FireEntry{{Slot: t0, Count: 1, Outcome: state.OutcomeFired}}},
		{name: "the ledger does not hold it", problem: "round 0 (06:00:00.050) has no fire of its own"},
		{name: "the ledger holds a slot before the registration", fires: []state.FireEntry{{Slot: t0.Add(-2 * time.Second), Count: 1, Outcome: state.OutcomeFired}},
			problem: "round 0 (06:00:00.050) has no fire of its own"},
	} {
		t.Run(c.name, func(t *testing.T) {
			j := registering
			j.Fires = c.fires
			rep := Check([]Job{j}, ups(lives...))
			if c.problem == "" && !rep.OK() || c.problem != "" && !strings.Contains(rep.String(), c.problem) {
				t.Fatalf("want finding %q; got\n%s", c.problem, rep)
			}
		})
	}
}
