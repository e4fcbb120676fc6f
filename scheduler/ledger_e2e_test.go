package scheduler

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/cron"
	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/taskid"
)

// ledgerKills is how many leader kills TestFireLedgerAcrossLeaderKills makes: 12 in the suite,
// EJCLOUD_LEDGER_KILLS=50 for issue 19's acceptance run (about three minutes).
func ledgerKills() int {
	if n, err := strconv.Atoi(os.Getenv("EJCLOUD_LEDGER_KILLS")); err == nil && n > 0 {
		return n
	}
	return 12
}

// The fire ledger across leader kills (issue 19): two cron jobs — one skipping missed slots, one
// catching them up once — run while the leader is SIGKILLed again and again at varying phases of
// the second. Every slot from the first to the last handled appears in the ledger exactly once
// (no gap, no overlap, in no snapshot), and the runs Mesos finished are exactly the ledger's:
// each finished task is in one fired slot's entry, and each fired slot's every shard finished.
func TestFireLedgerAcrossLeaderKills(t *testing.T) {
	t.Parallel()
	bin := buildSchedulerBinary(t)
	s := newSystem(t, 2)
	s.handOverToBinaries(t)
	ctx := context.Background()
	kills := ledgerKills()
	var jobs []config.Job
	for _, spec := range []struct {
		name    string
		shards  int
		cron    string
		misfire bool
	}{{"skipping", 2, "*/2 * * * * ?", false}, {"catching-up", 1, "*/3 * * * * ?", true}} {
		j := s.scriptJob(spec.name, spec.shards, spec.cron)
		j.Failover, j.Misfire = true, spec.misfire
		j.ScriptCommandLine = strings.Replace(j.ScriptCommandLine, "; true", "; sleep 0.2; true", 1)
		if err := s.store.CreateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	// The ledgers, polled: each entry by its first slot, the latest version of it.
	seen := map[string]map[time.Time]state.FireEntry{}
	var last map[string]time.Time
	poll := func() {
		last = map[string]time.Time{}
		for _, j := range jobs {
			l, ok, err := s.store.FireLedger(ctx, j.JobName)
			if err != nil || !ok {
				continue
			}
			checkNoOverlap(t, j, l)
			if seen[j.JobName] == nil {
				seen[j.JobName] = map[time.Time]state.FireEntry{}
			}
			for _, e := range l.Fires {
				seen[j.JobName][e.Slot] = e
			}
			last[j.JobName] = l.Last
		}
	}
	start := time.Now()
	procs := killLeaders(t, bin, s, kills, poll)
	t.Logf("%d leader kills in %v", kills, time.Since(start).Round(time.Second))
	var l int
	await.True(t, 30*time.Second, "a leader", func() bool { l = leaderAmong(t, procs); return l >= 0 })
	s.stopFiresAndDrain(t, procs[l].addr, jobs)
	poll()

	finished := map[string]bool{}
	for _, u := range s.updates.Updates() {
		if u.State == "TASK_FINISHED" {
			finished[u.TaskID] = true
		}
	}
	claimed := map[string]string{} // finished task → the slot entry that names it
	for _, j := range jobs {
		sched, _ := cron.Parse(j.Cron)
		var slots []time.Time
		for s := range seen[j.JobName] {
			slots = append(slots, s)
		}
		sort.Slice(slots, func(a, b int) bool { return slots[a].Before(slots[b]) })
		if len(slots) == 0 {
			t.Fatalf("%s: no ledger", j.JobName)
		}
		outcomes := map[string]int{}
		var prev time.Time
		for i, at := range slots {
			e := seen[j.JobName][at]
			outcomes[e.Outcome] += e.Count
			if i > 0 {
				if want := sched.Next(prev); !at.Equal(want) {
					t.Errorf("%s: after the slot run ending %v the next entry is %v; want %v (a gap or an overlap)", j.JobName, prev, at, want)
				}
			}
			prev = lastSlot(t, sched, e)
			if e.Outcome != state.OutcomeFired {
				continue
			}
			if e.Launched.IsZero() {
				t.Errorf("%s: fired slot %v never launched", j.JobName, at)
				continue
			}
			ran := map[int]bool{}
			for _, id := range e.TaskIDs {
				if !finished[id] {
					continue
				}
				if other, dup := claimed[id]; dup {
					t.Errorf("task %s is in two entries: %s and %v", id, other, at)
				}
				claimed[id] = fmt.Sprintf("%s@%v", j.JobName, at)
				if tid, err := taskid.Parse(id); err == nil {
					ran[tid.Item] = true
				}
			}
			if len(ran) != j.ShardingTotalCount {
				t.Errorf("%s: fired slot %v: shards %v finished among its tasks %v; want all %d", j.JobName, at, ran, e.TaskIDs, j.ShardingTotalCount)
			}
		}
		if !prev.Equal(last[j.JobName]) {
			t.Errorf("%s: the entries end at %v; the ledger's last slot is %v", j.JobName, prev, last[j.JobName])
		}
		t.Logf("%s: slots %v to %v: %v", j.JobName, slots[0].Format("15:04:05"), prev.Format("15:04:05"), outcomes)
	}
	for id := range finished {
		if _, ok := claimed[id]; !ok {
			t.Errorf("finished task %s is in no fired slot's entry", id)
		}
	}
}

// lastSlot is the last slot an entry stands for, checking its count against the cron.
func lastSlot(t *testing.T, sched *cron.Schedule, e state.FireEntry) time.Time {
	t.Helper()
	if e.Through.IsZero() {
		return e.Slot
	}
	n := 1
	for at := e.Slot; at.Before(e.Through); at = sched.Next(at) {
		n++
	}
	if n != e.Count && !e.AtLeast {
		t.Errorf("entry %v–%v says %d slots; the cron has %d", e.Slot, e.Through, e.Count, n)
	}
	return e.Through
}

// checkNoOverlap fails if two entries of one ledger snapshot share a slot: a slot handled twice.
func checkNoOverlap(t *testing.T, j config.Job, l state.Ledger) {
	t.Helper()
	for i := 1; i < len(l.Fires); i++ {
		a, b := l.Fires[i-1], l.Fires[i]
		end := a.Slot
		if !a.Through.IsZero() {
			end = a.Through
		}
		if !b.Triggered && !a.Triggered && !b.Slot.After(end) {
			t.Errorf("%s: entries %v–%v and %v overlap: a slot handled twice", j.JobName, a.Slot, end, b.Slot)
		}
	}
}
