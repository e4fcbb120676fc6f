// Package audit checks, from the status updates the Mesos agents took (Check) and from what
// the job scripts themselves recorded (CheckEffects, see effects.go), that every fire of a
// TRANSIENT job ran each of its shards exactly once: none twice, none lost. Tests and the soak
// collect the updates at mesos-local (Recorder) while they kill executors and leaders, and
// Check them once the system is quiet.
//
// What the updates show, and what the audit relies on (SPEC §5.4, §5.7):
//   - A fire puts the job in the ready queue; the offer cycle launches all its shards at once
//     (READY tasks) and only when none of the job's shards is running or waiting for failover.
//     So a job's runs form rounds that never overlap, and a round's READY tasks have distinct
//     shards.
//   - A shard lost to an infrastructure failure is relaunched as a FAILOVER task of the same
//     round; the new round of the job cannot start before it ends.
//   - A round consumes at least one fire of its own: one that came after the previous round was
//     written ahead (which was after the round before that had ended) and before its own tasks
//     reported anything. With misfire off, several fires may merge into one round; no fire is
//     ever used by two rounds.
//
// A shard "ran" when a task of it reached TASK_FINISHED, or TASK_FAILED marked as the job's
// own failure (the script or job code failed: that is a run, not a loss).
//
// Matching rounds to fires finds a round that ran without a fire of its own; it cannot find a
// fire that never ran, since a job idle between two rounds looks the same whether its fires
// merged into a delayed round or were lost. So a job given an audited window (Job.Until) and
// its fire ledger has every cron slot of that window accounted for as well (slots.go).
//
// A task id names one run: a second run under it (a second start record, a TASK_RUNNING after
// its terminal update) is a duplicate however the rounds fall.
package audit

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/ejcloud/ejcloud/cron"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/taskid"
)

// Update is one status update as an agent took it, or as the master decided it (a launch
// dropped or refused, an agent unreachable or gone).
type Update struct {
	TaskID    string    `json:"taskId"`
	State     string    `json:"state"` // a mesos.TaskState name, e.g. TASK_RUNNING
	JobFailed bool      `json:"jobFailed,omitempty"`
	At        time.Time `json:"at"`
}

// Job is what the audit needs to know of one TRANSIENT job.
type Job struct {
	Name   string
	Shards int
	// Schedule is the job's cron; nil for a job that only runs when triggered, whose rounds are
	// then not matched to fires.
	Schedule *cron.Schedule
	// Since is when the job was registered: no fire before it counts.
	Since time.Time
	// Registered, if set, is when the registration was sent, and Since when it was answered:
	// the scheduler began the job's cron somewhere in between, so a slot in [Registered,
	// Since) is the job's exactly when the fire ledger (Fires) holds it (see firstSlot).
	Registered time.Time
	// Misfire says each fire counts (the job's misfire): fires that fall while the job waits
	// to run are run one after another later, so a round may consume a fire that fell before
	// the round two back ended.
	Misfire bool
	// Until, when set with a Schedule, ends the audited window: every slot of the cron in
	// [Since, Until] must be accounted for by Fires and the runs (slots.go). The caller sets it
	// no later than when it stopped the job's fires, and audits once the runs queued by then
	// have finished. Zero: the slots are not accounted for (only the rounds are checked).
	Until time.Time
	// Fires is the job's fire ledger as the scheduler wrote it (GET /api/job/{job}/fires), in
	// any order, each entry in its latest version: what it did with each slot, and which run
	// (run id, task ids) each fired slot became.
	Fires []state.FireEntry
	// Leaderless are the periods in which the caller made the scheduler lose its leader (a
	// leader killed, ZooKeeper down): a slot the ledger skipped as missed while no instance led
	// is excused only inside one.
	Leaderless []Span
}

// Span is a period of time, both ends included.
type Span struct {
	From, To time.Time
}

func (p Span) holds(t time.Time) bool { return !t.Before(p.From) && !t.After(p.To) }

// Report is what Check (from status updates) or CheckEffects (from what the job scripts
// recorded) found.
type Report struct {
	Source     string // "status updates" or "side effects"
	Jobs       int
	Rounds     int      // fires that ran (a round may stand for several merged fires)
	ShardRuns  int      // shards that ran, over all rounds
	Relaunches int      // FAILOVER tasks
	Partial    int      // side effects: runs that started and never ended (their process was killed)
	Duplicates int      // shard runs beyond one per round, runs again under a task id, and rounds without a fire of their own
	Reruns     int      // runs that ended beyond a shard's first in its round (each also a duplicate)
	Reused     int      // runs under a task id that had run already: a second start record, a TASK_RUNNING after its terminal update (each also a duplicate)
	Overlaps   int      // side effects: runs of a shard that started while another was alive
	Lost       int      // shards of a round that never ran
	Slots      int      // cron slots in the jobs' audited windows (Job.Until)
	Excused    int      // of them: skipped by the scheduler while no instance led, within a leaderless span
	LostFires  int      // of them: accounted for by no run (lost fires)
	Problems   []string // one line per finding, in job and time order
}

// OK says the audit found nothing wrong.
func (r Report) OK() bool { return len(r.Problems) == 0 }

// StartsAccounted is how many start records the side-effect audit placed: every one is a
// shard's run in its round, a further run of it that ended, a run killed part-way, or a
// further start under a task id. A caller that counts the start records in the log must find
// the same number; one more says the audit dropped a run it never judged (a task id it could
// not parse, a job or shard it was not told of).
func (r Report) StartsAccounted() int { return r.ShardRuns + r.Reruns + r.Partial + r.Reused }

func (r Report) String() string {
	var b strings.Builder
	if r.Source == effectsSource {
		fmt.Fprintf(&b, "side-effect audit: %d jobs, %d rounds, %d shard runs (+%d reruns, %d under a reused task id), %d failover relaunches, %d killed part-way: %d duplicate, %d overlapping, %d lost",
			r.Jobs, r.Rounds, r.ShardRuns, r.Reruns, r.Reused, r.Relaunches, r.Partial, r.Duplicates, r.Overlaps, r.Lost)
	} else {
		fmt.Fprintf(&b, "audit: %d jobs, %d rounds, %d shard runs (+%d reruns, %d under a reused task id), %d failover relaunches: %d duplicate, %d lost",
			r.Jobs, r.Rounds, r.ShardRuns, r.Reruns, r.Reused, r.Relaunches, r.Duplicates, r.Lost)
	}
	if r.Slots > 0 {
		fmt.Fprintf(&b, "; %d cron slots audited, %d excused (skipped while no instance led), %d lost fires", r.Slots, r.Excused, r.LostFires)
	}
	for _, p := range r.Problems {
		b.WriteString("\n  " + p)
	}
	return b.String()
}

// task is one task's life as its updates (or its script's records) tell it.
type task struct {
	id      string
	item    int
	kind    taskid.Type
	first   time.Time // its first update
	end     time.Time // its terminal update; zero while it has none
	ran     bool
	endedAs string
	partial bool // side effects: the script started and never recorded its end
	busy    bool // side effects: the script found the shard's lock held by another run
	// side effects: a launch known from its status updates only, whose script never started
	launchOnly bool
	// starts: side effects, its start records; again: when each start after the first came
	// (status updates: each TASK_RUNNING taken after its terminal update), and againWhy says
	// what the second run is set against.
	starts   int
	again    []time.Time
	againWhy string
}

type round struct {
	start  time.Time // the first update of its first task
	end    time.Time // the last terminal update of any of its tasks
	tasks  []*task
	shards map[int]bool // shards with a task in the round
}

var terminal = map[string]bool{
	"TASK_FINISHED": true, "TASK_FAILED": true, "TASK_KILLED": true, "TASK_LOST": true, "TASK_ERROR": true,
	"TASK_DROPPED": true, "TASK_GONE": true, "TASK_GONE_BY_OPERATOR": true,
}

// Check audits the updates of the given jobs; updates of other tasks are ignored.
func Check(jobs []Job, updates []Update) Report {
	return check("status updates", jobs, tasksByJob(updates), checkShard)
}

// shardCheck reports how often a shard ran in a round, and what was wrong with its tasks.
type shardCheck func(r *round, item int, problem func(string, ...any), rep *Report) int

// check is the audit of both sources: it splits each job's tasks into rounds, checks every
// shard of every round, and matches the rounds to the job's fires.
func check(source string, jobs []Job, byJob map[string][]*task, shard shardCheck) Report {
	rep := Report{Source: source, Jobs: len(jobs)}
	for _, j := range jobs {
		rounds := roundsOf(byJob[j.Name])
		problem := func(f string, args ...any) {
			rep.Problems = append(rep.Problems, j.Name+": "+fmt.Sprintf(f, args...))
		}
		for _, t := range byJob[j.Name] {
			if t.item >= j.Shards {
				problem("task %s runs shard %d of a %d-shard job", t.id, t.item, j.Shards)
				continue // none of its runs is placed: StartsAccounted leaves them out
			}
			if n := len(t.again); n > 0 {
				rep.Reused += n
				rep.Duplicates += n
				problem("task %s ran again under the same task id at %s (%s): a second run of one launch",
					t.id, clocks(t.again), t.againWhy)
			}
		}
		for k, r := range rounds {
			rep.Rounds++
			at := r.start.Format("15:04:05.000")
			for item := 0; item < j.Shards; item++ {
				ran := shard(r, item, func(f string, args ...any) {
					problem("round %d (%s) shard %d: %s", k, at, item, fmt.Sprintf(f, args...))
				}, &rep)
				switch {
				case ran == 0:
					rep.Lost++
					problem("round %d (%s) shard %d: never ran", k, at, item)
				case ran > 1:
					rep.Duplicates += ran - 1
					rep.Reruns += ran - 1
				}
				rep.ShardRuns += min(ran, 1)
			}
		}
		if j.Schedule != nil {
			rep.Duplicates += matchFires(j, rounds, problem)
		}
		accountSlots(j, byJob[j.Name], source, &rep, problem)
	}
	return rep
}

// clocks formats times as the problems do.
func clocks(ts []time.Time) string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Format("15:04:05.000")
	}
	return strings.Join(out, ", ")
}

func tasksByJob(updates []Update) map[string][]*task {
	tasks := map[string]*task{}
	firstEnd := map[*task]int{} // the index of its first terminal update in the order taken
	for i, u := range updates {
		id, err := taskid.Parse(u.TaskID)
		if err != nil {
			continue
		}
		t := tasks[u.TaskID]
		if t == nil {
			t = &task{id: u.TaskID, item: id.Item, kind: id.Type, first: u.At}
			tasks[u.TaskID] = t
		}
		if u.At.Before(t.first) {
			t.first = u.At
		}
		// A task ends at its first terminal update: a later one is the master's word on a task
		// already over (its agent marked gone, say). A run stays a run.
		if terminal[u.State] && (t.end.IsZero() || u.At.Before(t.end)) {
			t.end, t.endedAs = u.At, u.State
			firstEnd[t] = i
		}
		t.ran = t.ran || u.State == "TASK_FINISHED" || u.State == "TASK_FAILED" && u.JobFailed
	}
	// A task id is one launch: once it ended, nothing of it runs again. Mesos takes an
	// update once per uuid and in order per task, so a TASK_RUNNING taken after the terminal
	// one is a second run of the launch (one started after it was reported over), not a late
	// copy.
	for i, u := range updates {
		t := tasks[u.TaskID]
		if k, ok := firstEnd[t]; ok && u.State == "TASK_RUNNING" && i > k && !u.At.Before(t.end) {
			t.again = append(t.again, u.At)
			t.againWhy = fmt.Sprintf("TASK_RUNNING after its %s at %s", t.endedAs, t.end.Format("15:04:05.000"))
		}
	}
	return groupByJob(tasks)
}

// groupByJob lists each job's tasks in order of their first update (or start).
func groupByJob(tasks map[string]*task) map[string][]*task {
	byJob := map[string][]*task{}
	for _, t := range tasks {
		id, _ := taskid.Parse(t.id)
		byJob[id.JobName] = append(byJob[id.JobName], t)
	}
	for _, ts := range byJob {
		sort.Slice(ts, func(i, k int) bool {
			if !ts[i].first.Equal(ts[k].first) {
				return ts[i].first.Before(ts[k].first)
			}
			return ts[i].id < ts[k].id
		})
	}
	return byJob
}

// roundsOf splits a job's tasks, in order of their first update, into rounds: a READY task of
// a shard that already has a task (READY, or FAILOVER after a launch that never reached its
// agent) in the current round starts the next round, unless a task of the current round is
// still alive (then it is a second launch within the round, which checkShard reports); a
// FAILOVER task belongs to the round under way.
func roundsOf(tasks []*task) []*round {
	var rounds []*round
	var cur *round
	for _, t := range tasks {
		if cur == nil || t.kind == taskid.Ready && cur.shards[t.item] && cur.endedBy(t.first) {
			cur = &round{start: t.first, shards: map[int]bool{}}
			rounds = append(rounds, cur)
		}
		cur.shards[t.item] = true
		cur.tasks = append(cur.tasks, t)
		if t.end.After(cur.end) {
			cur.end = t.end
		}
	}
	return rounds
}

// endedBy says every task of the round had ended before t.
func (r *round) endedBy(t time.Time) bool {
	for _, x := range r.tasks {
		if x.end.IsZero() || !x.end.Before(t) {
			return false
		}
	}
	return true
}

// checkShard reports how often a shard ran in a round and what was wrong with its tasks: a
// task that never ended, two tasks alive at once, a task launched after the shard had run.
func checkShard(r *round, item int, problem func(string, ...any), rep *Report) int {
	ran := 0
	var prev, lastRan *task // lastRan: the latest earlier task that ran, named by a duplicate
	for _, t := range r.tasks {
		if t.item != item {
			continue
		}
		if t.kind == taskid.Failover {
			rep.Relaunches++
		}
		if t.end.IsZero() {
			problem("task %s never ended", t.id)
		}
		if prev != nil {
			switch {
			case prev.end.IsZero() || t.first.Before(prev.end):
				problem("task %s ran while %s was still alive", t.id, prev.id)
			case lastRan != nil:
				problem("task %s launched after %s had run", t.id, lastRan.id)
			}
		}
		if t.ran {
			ran++
			lastRan = t
		}
		prev = t
	}
	return ran
}

// firstSlot is the job's first slot that counts: the earliest cron slot of the ledger in
// [Registered, Since), when there is one (the scheduler began the job's cron before the
// registration was answered, and the slot was the job's), else Since.
func (j Job) firstSlot() time.Time {
	first := j.Since
	if j.Registered.IsZero() {
		return first
	}
	for _, e := range j.Fires {
		if !e.Triggered && !e.Slot.Before(j.Registered) && e.Slot.Before(first) {
			first = e.Slot
		}
	}
	return first
}

// matchFires gives each round, in order, the earliest fire it can have consumed: after the
// previous round's fire and (without misfire, where a fire that falls while the job is pending
// merges into it) after the round before that ended, and no later than its own first update.
// A round left without one was launched twice for one fire.
func matchFires(j Job, rounds []*round, problem func(string, ...any)) int {
	dup := 0
	last := j.firstSlot().Add(-time.Nanosecond)
	for k, r := range rounds {
		after := last
		if !j.Misfire && k >= 2 && rounds[k-2].end.After(after) {
			after = rounds[k-2].end
		}
		fire := j.Schedule.Next(after)
		if fire.IsZero() || fire.After(r.start) {
			dup++
			problem("round %d (%s) has no fire of its own: the last fire it could use (after %s) went to an earlier round",
				k, r.start.Format("15:04:05.000"), after.Format("15:04:05.000"))
			continue
		}
		last = fire
	}
	return dup
}
