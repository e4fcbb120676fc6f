package audit

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ejcloud/ejcloud/taskid"
)

// The side-effect audit checks exactly-once from what the job scripts themselves recorded, so
// that a run the status updates do not show (a script left running by a killed executor, a
// launch Mesos never reported) is still caught. RecordingScript wraps a job's script so that
// every run appends to one log, with O_APPEND (one write(2) per line, so lines of concurrent
// runs never interleave):
//
//	start <unix-nanos> <task id> <item>   before the job's own script
//	busy  <unix-nanos> <task id> <item>   the shard's lock was held by another run
//	end   <unix-nanos> <task id> <item>   after it, whatever its exit status
//
// A run killed part-way has a start and no end: it ran partly, and when it died is unknown.
// So that overlap with such a run is still seen, each run holds an flock(1) on a lock file of
// its job and shard from before its start record for as long as it or any child of it lives
// (the kernel drops the lock only when the last process holding the file is gone, however it
// died); a run that finds the lock held records busy, and goes on, so that what the audit
// reports is what happened.

const effectsSource = "side effects"

// Record is one line of the side-effect log.
type Record struct {
	Kind   string // start, busy or end
	At     time.Time
	TaskID string
	Item   int
}

// RecordingScript wraps body (a /bin/sh snippet; "" for none; its exit status is ignored) so that each run records its
// start and end in log and takes the shard's lock in lockDir (which must exist). It uses the
// EJCLOUD_JOB_NAME, EJCLOUD_TASK_ID and EJCLOUD_SHARDING_ITEM the executor sets.
func RecordingScript(log, lockDir, body string) string {
	rec := func(kind string) string {
		return `echo "` + kind + ` $(date +%s%N) $EJCLOUD_TASK_ID $EJCLOUD_SHARDING_ITEM" >> '` + log + `'`
	}
	lock := filepath.Join(lockDir, "lock-")
	s := `exec 9>> '` + lock + `'"$EJCLOUD_JOB_NAME-$EJCLOUD_SHARDING_ITEM"; ` +
		`flock -n 9 || ` + rec("busy") + `; ` + rec("start") + `; `
	if body != "" {
		s += body + "; "
	}
	// The executor appends ` "$1"` (the sharding context) to the command line: true takes it.
	return s + rec("end") + "; true"
}

// ReadEffects reads a side-effect log. A last line cut short is ignored (a run killed in its
// write, which O_APPEND makes the last thing written at that moment only if nothing followed).
func ReadEffects(path string) ([]Record, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("side-effect audit: %w", err)
	}
	defer f.Close()
	var out []Record
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		r, err := parseRecord(sc.Text())
		if err != nil {
			if !sc.Scan() {
				break
			}
			return nil, fmt.Errorf("side-effect audit: %s line %d: %w", path, line, err)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("side-effect audit: reading %s: %w", path, err)
	}
	return out, nil
}

func parseRecord(line string) (Record, error) {
	f := strings.Fields(line)
	if len(f) != 4 || f[0] != "start" && f[0] != "end" && f[0] != "busy" {
		return Record{}, fmt.Errorf("not a record: %q", line)
	}
	ns, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return Record{}, fmt.Errorf("time in %q: %w", line, err)
	}
	item, err := strconv.Atoi(f[3])
	if err != nil {
		return Record{}, fmt.Errorf("item in %q: %w", line, err)
	}
	return Record{Kind: f[0], At: time.Unix(0, ns), TaskID: f[2], Item: item}, nil
}

// CheckEffects audits the runs the scripts of the given jobs recorded, with the rounds and
// fires matched as Check does: a shard of a round must have exactly one run that ended, no run
// may start while another run of the shard is alive (busy, or before its end), and no run may
// start after one of the round had ended. The status updates tell the launches whose script
// never started (dropped before reaching an agent, lost on the way): they run nothing, but a
// READY one marks where its fire's round begins, so that the FAILOVER relaunches of a fire
// whose READY launch was dropped are not taken for reruns of the fire before.
//
// A task id is one launch, so its script runs once: a second start record under it is a second
// run (a duplicate), whatever its end. The task stands for its first run, which ends at the
// first end record; an end beyond the starts is reported as one without a start.
func CheckEffects(jobs []Job, records []Record, updates []Update) Report {
	runs := map[string]*task{}
	var orphans []string   // ends without a start
	var extraEnds []string // ends beyond a task's starts
	ends := map[string]int{}
	for _, r := range records {
		id, err := taskid.Parse(r.TaskID)
		if err != nil {
			continue
		}
		t := runs[r.TaskID]
		switch {
		case t == nil && r.Kind == "end":
			orphans = append(orphans, r.TaskID)
			continue
		case t == nil:
			t = &task{id: r.TaskID, item: r.Item, kind: id.Type, first: r.At}
			runs[r.TaskID] = t
		}
		switch r.Kind {
		case "busy":
			t.busy = true
		case "start":
			t.starts++
			if t.starts > 1 {
				t.again = append(t.again, r.At)
				t.againWhy = "a second start record; the first at " + t.first.Format("15:04:05.000")
			} else if r.At.Before(t.first) {
				t.first = r.At
			}
		case "end":
			if ends[r.TaskID]++; ends[r.TaskID] > t.starts {
				extraEnds = append(extraEnds, r.TaskID)
				continue
			}
			if t.end.IsZero() {
				t.end, t.ran = r.At, true
			}
		}
	}
	for _, u := range updates {
		id, err := taskid.Parse(u.TaskID)
		if err != nil || runs[u.TaskID] != nil {
			continue
		}
		runs[u.TaskID] = &task{id: u.TaskID, item: id.Item, kind: id.Type, first: u.At, end: u.At, launchOnly: true}
	}
	for _, t := range runs {
		if t.end.IsZero() {
			// Killed part-way; it ended at an unknown time, which its lock stands for. For the
			// rounds it ends where it started, so that it does not hold its round open.
			t.partial, t.end = true, t.first
		}
	}
	rep := check(effectsSource, jobs, groupByJob(runs), checkShardEffects)
	for _, id := range orphans {
		rep.Problems = append(rep.Problems, fmt.Sprintf("task %s recorded an end and no start", id))
	}
	for _, id := range extraEnds {
		rep.Problems = append(rep.Problems, fmt.Sprintf("task %s recorded more ends than starts", id))
	}
	return rep
}

// checkShardEffects counts the runs of a shard in a round that ended, and reports a run that
// started while another was alive (overlapping) or after one had run (duplicate).
func checkShardEffects(r *round, item int, problem func(string, ...any), rep *Report) int {
	ran := 0
	var alive time.Time     // the latest end of the shard's earlier runs in the round
	var prev, lastRan *task // lastRan: the latest earlier run that ended, named by a duplicate
	for _, t := range r.tasks {
		if t.item != item || t.launchOnly {
			continue
		}
		if t.kind == taskid.Failover {
			rep.Relaunches++
		}
		if t.partial && t.starts > 0 {
			// Killed part-way. (One killed between its busy and its start record, with
			// neither start nor end, is not: StartsAccounted counts start records.)
			rep.Partial++
		}
		switch {
		case t.busy:
			rep.Overlaps++
			problem("run %s started while another run of the shard was alive (it found the shard's lock held)", t.id)
		case prev != nil && t.first.Before(alive):
			rep.Overlaps++
			problem("run %s started at %s, while %s ran (until %s)", t.id, t.first.Format("15:04:05.000"), prev.id, alive.Format("15:04:05.000"))
		case lastRan != nil && !t.ran:
			rep.Duplicates++ // one that ended is counted by the caller
			problem("run %s started after %s had run, and was killed part-way", t.id, lastRan.id)
		case lastRan != nil:
			problem("run %s started after %s had run", t.id, lastRan.id)
		}
		if t.ran {
			ran++
			lastRan = t
		}
		if t.end.After(alive) {
			alive = t.end
		}
		prev = t
	}
	return ran
}
