package audit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/cron"
	"github.com/ejcloud/ejcloud/internal/await"
)

// run is one script run as its records tell it, in seconds after t0; end < 0: killed part-way.
type run struct {
	item, kind, name string
	start, end       float64
	busy             bool
	dropped          bool // a launch the master dropped: a status update, no script run
}

func records(runs ...run) []Record {
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	var out []Record
	for _, r := range runs {
		id := "job@-@" + r.item + "@-@" + r.kind + "@-@agent-1@-@" + r.name
		item := int(r.item[0] - '0')
		if r.dropped {
			continue
		}
		if r.busy {
			out = append(out, Record{Kind: "busy", At: at(r.start), TaskID: id, Item: item})
		}
		out = append(out, Record{Kind: "start", At: at(r.start), TaskID: id, Item: item})
		if r.end >= 0 {
			out = append(out, Record{Kind: "end", At: at(r.end), TaskID: id, Item: item})
		}
	}
	return out
}

// cleanRound is the three shards of a healthy round started at s.
// drops are the status updates of the dropped launches among runs.
func drops(runs ...run) []Update {
	var out []Update
	for _, r := range runs {
		if r.dropped {
			out = append(out, Update{TaskID: "job@-@" + r.item + "@-@" + r.kind + "@-@agent-1@-@" + r.name, State: "TASK_DROPPED",
				At: t0.Add(time.Duration(r.start * float64(time.Second)))})
		}
	}
	return out
}

func cleanRound(s float64, tag string) []run {
	return []run{
		{item: "0", kind: "READY", name: tag + "0", start: s, end: s + 0.1},
		{item: "1", kind: "READY", name: tag + "1", start: s + 0.01, end: s + 0.1},
		{item: "2", kind: "READY", name: tag + "2", start: s + 0.02, end: s + 0.1},
	}
}

func runs(parts ...[]run) []run {
	var out []run
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestCheckEffects(t *testing.T) {
	every2s, err := cron.Parse("*/2 * * * * ?")
	if err != nil {
		t.Fatal(err)
	}
	first := cleanRound(0.05, "a")
	cases := []struct {
		name                      string
		runs                      []run
		rounds, partial, relaunch int
		dup, overlap, lost        int
		problem                   string // a finding that must be reported; "" = none at all
	}{
		{name: "two clean rounds", runs: runs(cleanRound(0.05, "a"), cleanRound(2.05, "b")), rounds: 2},
		{name: "fires merged while a round was delayed", runs: runs(cleanRound(0.05, "a"), cleanRound(5.9, "b")), rounds: 2},
		{name: "a run killed part-way, relaunched after it died", runs: runs(
			[]run{{item: "0", kind: "READY", name: "a0", start: 0.05, end: -1}}, first[1:],
			[]run{{item: "0", kind: "FAILOVER", name: "f0", start: 0.9, end: 1.0}}),
			rounds: 1, partial: 1, relaunch: 1},
		{name: "a killed run, relaunched, then the next round", runs: runs(
			[]run{{item: "0", kind: "READY", name: "a0", start: 0.05, end: -1}}, first[1:],
			[]run{{item: "0", kind: "FAILOVER", name: "f0", start: 0.9, end: 1.0}}, cleanRound(2.05, "b")),
			rounds: 2, partial: 1, relaunch: 1},
		{name: "two completed runs of a shard in one round", runs: runs(first,
			[]run{{item: "1", kind: "FAILOVER", name: "f1", start: 0.5, end: 0.6}}),
			rounds: 1, relaunch: 1, dup: 1, problem: "round 0 (06:00:00.050) shard 1: run job@-@1@-@FAILOVER@-@agent-1@-@f1 started after "},
		{name: "a second run of a shard that had run, killed part-way", runs: runs(first,
			[]run{{item: "1", kind: "FAILOVER", name: "f1", start: 0.5, end: -1}}),
			rounds: 1, relaunch: 1, partial: 1, dup: 1, problem: "killed part-way"},
		{name: "a run that had run, a relaunch killed part-way, a second relaunch: the duplicate names the run that ended", runs: runs(first,
			[]run{{item: "1", kind: "FAILOVER", name: "f1", start: 0.5, end: -1}, {item: "1", kind: "FAILOVER", name: "g1", start: 0.8, end: 0.9}}),
			rounds: 1, relaunch: 2, partial: 1, dup: 2, problem: "run job@-@1@-@FAILOVER@-@agent-1@-@g1 started after job@-@1@-@READY@-@agent-1@-@a1 had run"},
		{name: "a relaunch while the first run still ran", runs: runs(
			[]run{{item: "0", kind: "READY", name: "a0", start: 0.05, end: 1.5}}, first[1:],
			[]run{{item: "0", kind: "FAILOVER", name: "f0", start: 0.9, end: 1.0}}),
			rounds: 1, relaunch: 1, dup: 1, overlap: 1, problem: "started at 06:00:00.900, while job@-@0@-@READY@-@agent-1@-@a0 ran (until 06:00:01.500)"},
		{name: "a relaunch while a run that never ended was still alive", runs: runs(
			[]run{{item: "0", kind: "READY", name: "a0", start: 0.05, end: -1}}, first[1:],
			[]run{{item: "0", kind: "FAILOVER", name: "f0", start: 0.9, end: 1.0, busy: true}}),
			rounds: 1, partial: 1, relaunch: 1, overlap: 1, problem: "found the shard's lock held"},
		{name: "the next round while a killed run of the last one lived on", runs: runs(
			[]run{{item: "0", kind: "READY", name: "a0", start: 0.05, end: -1}}, first[1:],
			[]run{{item: "0", kind: "FAILOVER", name: "f0", start: 0.9, end: 1.0}},
			[]run{{item: "0", kind: "READY", name: "b0", start: 2.05, end: 2.1, busy: true}}, cleanRound(2.05, "b")[1:]),
			rounds: 2, partial: 1, relaunch: 1, overlap: 1, problem: "shard 0: run job@-@0@-@READY@-@agent-1@-@b0 started while another run"},
		{name: "a shard that never ran is lost", runs: first[1:], rounds: 1, lost: 1, problem: "round 0 (06:00:00.060) shard 0: never ran"},
		{name: "a shard whose only run was killed is lost", runs: runs(
			[]run{{item: "0", kind: "READY", name: "a0", start: 0.05, end: -1}}, first[1:]),
			rounds: 1, partial: 1, lost: 1, problem: "shard 0: never ran"},
		{name: "a round run twice for one fire", runs: runs(cleanRound(0.05, "a"), cleanRound(0.5, "b")),
			rounds: 2, dup: 1, problem: "round 1 (06:00:00.500) has no fire of its own"},
		{name: "the relaunches of a fire whose READY launch was dropped are that fire's round", runs: runs(cleanRound(0.05, "a"),
			[]run{{item: "0", kind: "READY", name: "b0", start: 2.05, dropped: true}, {item: "1", kind: "READY", name: "b1", start: 2.05, dropped: true},
				{item: "2", kind: "READY", name: "b2", start: 2.05, dropped: true}},
			[]run{{item: "0", kind: "FAILOVER", name: "g0", start: 3.1, end: 3.2}, {item: "1", kind: "FAILOVER", name: "g1", start: 3.1, end: 3.2},
				{item: "2", kind: "FAILOVER", name: "g2", start: 3.1, end: 3.2}}),
			rounds: 2, relaunch: 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			recs := records(c.runs...)
			rep := CheckEffects([]Job{{Name: "job", Shards: 3, Schedule: every2s, Since: t0}}, recs, drops(c.runs...))
			// Every start record is placed: a shard's run, a further run that ended, a run
			// killed part-way (the soak checks the same of its log).
			if n := startRecords(recs); rep.StartsAccounted() != n {
				t.Errorf("%d start records, %d accounted for\n%s", n, rep.StartsAccounted(), rep)
			}
			got := []int{rep.Rounds, rep.Partial, rep.Relaunches, rep.Duplicates, rep.Overlaps, rep.Lost}
			want := []int{c.rounds, c.partial, c.relaunch, c.dup, c.overlap, c.lost}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("rounds, partial, relaunches, dup, overlap, lost = %v; want %v\n%s", got, want, rep)
			}
			if c.problem == "" && !rep.OK() || c.problem != "" && !strings.Contains(rep.String(), c.problem) {
				t.Fatalf("want finding %q; got\n%s", c.problem, rep)
			}
		})
	}
}

func TestEndWithoutStartIsReported(t *testing.T) {
	recs := records(cleanRound(0.05, "a")...)
	recs = append(recs, Record{Kind: "end", At: t0, TaskID: "job@-@1@-@READY@-@agent-1@-@ghost", Item: 1})
	if rep := CheckEffects([]Job{{Name: "job", Shards: 3}}, recs, nil); !strings.Contains(rep.String(), "ghost recorded an end and no start") {
		t.Fatalf("got %s", rep)
	}
}

// The recording script, run by /bin/sh as the executor runs it: its records read back, and a
// second run of the shard finds the lock held as long as any process of the first lives, even
// after the first's shell was SIGKILLed.
func TestRecordingScript(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "effects.log")
	release := filepath.Join(dir, "release")
	// The job's work runs in a child shell, which outlives a SIGKILL of the script's shell.
	script := RecordingScript(log, dir, `/bin/sh -c 'while [ ! -e `+release+` ]; do sleep 0.05; done'`)
	start := func(task string) *exec.Cmd {
		cmd := exec.Command("/bin/sh", "-c", script+` "$1"`, "sh", `{"shardingItem":0}`)
		cmd.Env = append(os.Environ(), "EJCLOUD_JOB_NAME=job", "EJCLOUD_TASK_ID="+task, "EJCLOUD_SHARDING_ITEM=0")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); cmd.Wait() })
		return cmd
	}
	read := func() []Record {
		recs, err := ReadEffects(log)
		if err != nil && !os.IsNotExist(err) && !strings.Contains(err.Error(), "no such file") {
			t.Fatal(err)
		}
		return recs
	}
	kinds := func() string {
		var k []string
		for _, r := range read() {
			k = append(k, r.Kind+" "+strings.TrimPrefix(r.TaskID, "job@-@0@-@READY@-@a@-@"))
		}
		return strings.Join(k, ", ")
	}
	first := start("job@-@0@-@READY@-@a@-@1")
	await.True(t, 10*time.Second, "the first run started", func() bool { return kinds() == "start 1" })
	// Its shell dies; its child lives on and holds the lock.
	syscall.Kill(first.Process.Pid, syscall.SIGKILL)
	first.Wait()
	second := start("job@-@0@-@READY@-@a@-@2")
	await.True(t, 10*time.Second, "the second run found the lock held", func() bool { return kinds() == "start 1, busy 2, start 2" })
	os.WriteFile(release, nil, 0o644)
	if err := second.Wait(); err != nil {
		t.Fatalf("the script: %v", err)
	}
	if got := kinds(); got != "start 1, busy 2, start 2, end 2" {
		t.Fatalf("records %q", got)
	}
	lock := filepath.Join(dir, "lock-job-0")
	await.True(t, 10*time.Second, "the first run's child gone", func() bool { return exec.Command("flock", "-n", lock, "true").Run() == nil })
	third := start("job@-@0@-@READY@-@a@-@3")
	if err := third.Wait(); err != nil {
		t.Fatalf("the script: %v", err)
	}
	recs := read()
	if got := kinds(); got != "start 1, busy 2, start 2, end 2, start 3, end 3" {
		t.Fatalf("once every run of the shard is gone the lock is free: records %q", got)
	}
	if r := recs[0]; r.Item != 0 || time.Since(r.At) > time.Minute || time.Since(r.At) < 0 {
		t.Fatalf("first record %+v: want item 0 stamped just now", r)
	}
}

func TestReadEffects(t *testing.T) {
	path := filepath.Join(t.TempDir(), "effects.log")
	os.WriteFile(path, []byte("start 1795503048502613681 job@-@0@-@READY@-@a@-@1 0\nend 1795503048602613681 job@-@0@-@READY@-@a@-@1 0\nstart 17955"), 0o644)
	recs, err := ReadEffects(path)
	if err != nil || len(recs) != 2 || recs[1].Kind != "end" || recs[1].At.Sub(recs[0].At) != 100*time.Millisecond {
		t.Fatalf("read %+v, %v; want two records 100ms apart, the cut last line ignored", recs, err)
	}
	os.WriteFile(path, []byte("start x job@-@0@-@READY@-@a@-@1 0\nend 1 job@-@0@-@READY@-@a@-@1 0\n"), 0o644)
	if _, err := ReadEffects(path); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Fatalf("a bad line in the middle: err %v", err)
	}
}
