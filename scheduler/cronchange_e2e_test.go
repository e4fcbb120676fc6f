package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/cron"
	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/scheduler/schedule"
	"github.com/ejcloud/ejcloud/state"
)

// Issue 19 over the binaries: a job's cron changes, and the leader dies before the new cron's
// first slot; while no instance leads, two of the new cron's slots fall. The next leader resumes
// from the change with the new cron and decides those slots by the policy (fireOnce: one
// catch-up run), so the ledger holds every slot once: the old cron's up to the change, the new
// cron's after it, with no gap and none of the old cron's after the change. Before the fix the
// ledger kept the old cron until the new one fired, and the next leader started afresh: the
// slots of the window were lost without a record.
func TestCronChangeThenLeaderlessWindow(t *testing.T) {
	t.Parallel()
	bin := buildSchedulerBinary(t)
	s := newSystem(t, 1)
	s.handOverToBinaries(t)
	ctx := context.Background()
	oldCron, newCron := "*/3 * * * * ?", "*/2 * * * * ?"
	j := s.scriptJob("changed", 1, oldCron)
	j.Misfire = true
	if err := s.store.CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	extra := []string{"--zk-session-timeout", "1s"}
	a := startSchedulerBinary(t, bin, s, s.mesos.URL(), extra...)
	await.True(t, 30*time.Second, "a leader", func() bool { return a.ready(t) })
	ledger := func() state.Ledger {
		l, _, err := s.store.FireLedger(ctx, j.JobName)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	await.True(t, 30*time.Second, "the old cron fires", func() bool { return len(ledger().Fires) > 0 })

	// Deliberate fault timing, not a wait: the change lands 0.1 s after an even second, 1.9 s
	// before the new cron's first slot, and the leader is killed as soon as the ledger has it.
	now := time.Now()
	time.Sleep(now.Truncate(2 * time.Second).Add(2*time.Second + 100*time.Millisecond).Sub(now))
	j.Cron = newCron
	body, _ := json.Marshal(j)
	if code, msg := call(t, "PUT", "http://"+a.addr+"/api/job/update", string(body)); code != 204 {
		t.Fatalf("changing the cron: %d %s", code, msg)
	}
	var changed state.Ledger
	func() {
		defer func() {
			if t.Failed() {
				t.Logf("ledger cron %q last %v from %v: a leader taking over now starts afresh and loses the new cron's slots", changed.Cron, changed.Last, changed.From)
			}
		}()
		await.True(t, time.Second, "the ledger takes the change", func() bool { changed = ledger(); return changed.Cron == newCron })
	}()
	a.cmd.Process.Kill()
	a.cmd.Wait()
	newSched, _ := cron.Parse(newCron)
	first := newSched.Next(changed.From)
	if !time.Now().Before(first) {
		t.Fatalf("the leader was killed at %v, after the new cron's first slot %v: the window was missed", time.Now(), first)
	}
	// No instance leads while two of the new cron's slots fall.
	second := newSched.Next(first)
	await.True(t, 10*time.Second, "two slots of the new cron pass", func() bool { return time.Now().After(second) })

	b := startSchedulerBinary(t, bin, s, s.mesos.URL(), extra...)
	await.True(t, 30*time.Second, "the next leader", func() bool { return b.ready(t) })
	await.True(t, 30*time.Second, "the next leader decides the new cron's slots", func() bool { return ledger().Last.After(changed.From) })
	l := ledger()
	oldSched, _ := cron.Parse(oldCron)
	var prev, lastOld time.Time
	var caughtUp string
	for _, e := range l.Fires {
		sched := newSched
		if e.Slot.Before(changed.From) {
			sched = oldSched
		}
		switch {
		case prev.IsZero():
		case e.Slot.Before(changed.From) || prev.After(changed.From):
			if want := sched.Next(prev); !e.Slot.Equal(want) {
				t.Errorf("after %v the next entry is %v; want %v (a gap or an overlap)", prev, e.Slot, want)
			}
		case !e.Slot.Equal(first):
			t.Errorf("the first entry after the change (%v) is %v; want the new cron's first slot after it, %v", changed.From, e.Slot, first)
		}
		prev = e.Slot
		if !e.Through.IsZero() {
			prev = e.Through
		}
		if e.Slot.Before(changed.From) {
			lastOld = prev
		}
		if !e.Slot.Before(changed.From) && !e.Slot.After(second) {
			caughtUp += fmt.Sprintf(" %s@%s", e.Outcome, e.Slot.Format("15:04:05"))
		}
	}
	if want := schedule.AtOrBefore(oldSched, changed.From); !lastOld.Equal(want) {
		t.Errorf("the old cron's entries end at %v; want its last slot before the change, %v", lastOld, want)
	}
	if !prev.Equal(l.Last) {
		t.Errorf("the entries end at %v; the ledger's last slot is %v", prev, l.Last)
	}
	if prev.Before(second) {
		t.Errorf("the entries end at %v, before the window's second slot %v", prev, second)
	}
	t.Logf("changed at %v; the window's slots:%s", changed.From.Format("15:04:05.000"), caughtUp)
}
