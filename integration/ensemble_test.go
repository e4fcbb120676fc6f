package integration

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/integration/audit"
	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// A leader and a standby over a 3-server ensemble with Debian's timing (tickTime=2000,
// syncLimit=5: followers give up a silent quorum leader after 10 s) and the session timeout the
// README recommends for it (15 s); one TRANSIENT job with misfire fires every 2 s. The quorum
// leader, the member the leading scheduler is connected to, is frozen (SIGSTOP) for 20 s, then
// resumed. No shard may run twice, overlap or be lost
// (the side-effect audit), and no fire may be lost: with misfire every fire slot is one run,
// on time or caught up once ZooKeeper is back. The job must be on time again within the
// session timeout + 5 s of the fault. The test reports when ZooKeeper had a new leader, whether
// the scheduler kept its leadership, and the fire slots that got no on-time run.
func TestEnsembleQuorumLeaderHangs(t *testing.T) {
	t.Parallel()
	memberHangs(t, quorumLeader, 20*time.Second, recommendedSession, recommendedSession+5*time.Second)
}

// The same with a follower: the scheduler lists only the two followers, and the one its session
// is connected to is frozen for 20 s. The client gives it up after its read timeout (2/3 of the
// session) and moves to the other; the quorum never noticed.
func TestEnsembleFollowerHangs(t *testing.T) {
	t.Parallel()
	memberHangs(t, itsFollower, 20*time.Second, recommendedSession, recommendedSession+5*time.Second)
}

// The same for a minute: the job must be back on time within 25 s of the fault all the same,
// while the hung member is still frozen — not when it returns (ZooKeeper re-elects without it).
func TestEnsembleQuorumLeaderHangsAMinute(t *testing.T) {
	t.Parallel()
	memberHangs(t, quorumLeader, time.Minute, recommendedSession, 25*time.Second)
}

// recommendedSession is the README's session timeout for Debian's ensemble timing:
// 1.5 × tickTime × syncLimit, so that a hung quorum leader, given up by its followers after
// tickTime × syncLimit, does not end the scheduler's leadership.
const recommendedSession = 15 * time.Second

// Which member a test freezes.
const (
	quorumLeader = iota // the quorum's leader
	itsFollower         // the follower the leading scheduler is connected to
)

func memberHangs(t *testing.T, which int, hang, session, backBy time.Duration) {
	const (
		every  = 2 * time.Second
		expr   = "*/2 * * * * ?"
		onTime = 1500 * time.Millisecond // a run that starts this soon after its fire is on time
	)
	e := statetest.StartEnsembleWith(t, 3, statetest.ProductionTiming)
	servers := e.Servers()
	var later []*statetest.Proxy // the followers, opened to the schedulers once they are connected
	switch which {
	case itsFollower:
		servers = slices.Delete(servers, e.Leader(), e.Leader()+1)
	case quorumLeader:
		// The schedulers list every member, but reach the followers through proxies that
		// refuse them until the leading scheduler is connected: so it is the quorum leader
		// it is connected to when that hangs, and the followers it moves to.
		for i, addr := range servers {
			if i != e.Leader() {
				p := statetest.NewProxy(t, addr)
				p.Cut()
				later = append(later, p)
				servers[i] = p.Addr
			}
		}
	}
	w := &world{zk: statetest.Env{Servers: servers, Namespace: "ejcloud"}, mesos: startMesos(t, 2), dir: t.TempDir()}
	a := startScheduler(t, w.zk, w.mesos, "--zk-session-timeout", session.String())
	leaderOf(t, a)
	b := startScheduler(t, w.zk, w.mesos, "--zk-session-timeout", session.String())
	a.must(t, 204, "POST", "/api/app", w.appJSON(""))
	job := withMisfire(w.jobJSON("ens", 2, expr, true, ""))
	audited := cronJob(t, "ens", 2, expr)
	audited.Misfire = true
	a.must(t, 204, "POST", "/api/job/register", job)
	await.True(t, 30*time.Second, "the job runs on three fires", func() bool { return len(w.runs("ens")["0"]) >= 3 })

	zkLeader := e.Leader()
	if zkLeader < 0 {
		t.Fatal("no ZooKeeper member leads before the fault")
	}
	sid, err := statetest.LeaderSession(e.Servers(), w.zk.Namespace)
	if err != nil {
		t.Fatalf("the leading scheduler's session: %v", err)
	}
	serving := -1
	await.True(t, 10*time.Second, "the member serving the leading scheduler", func() bool {
		serving = e.Serving(sid)
		return serving >= 0
	})
	hung, role := zkLeader, "quorum leader"
	if which == itsFollower {
		hung, role = serving, "follower"
	}
	if serving != hung {
		t.Fatalf("the leading scheduler is connected to member %d; the test needs it on member %d", serving, hung)
	}
	for _, p := range later {
		p.Restore()
	}
	e.Member(hung).Pause()
	fault := time.Now()
	t.Logf("fault: SIGSTOP of ZooKeeper member %d (%s), the one the leading scheduler is connected to, for %v", hung, role, hang)
	var reelected time.Duration
	leads := map[*scheduler]bool{a: true}
	names := map[*scheduler]string{a: "first", b: "standby"}
	kept := true // the first scheduler led throughout the hang
	for time.Since(fault) < hang {
		if which == quorumLeader && reelected == 0 && e.Leader() >= 0 {
			reelected = time.Since(fault)
			t.Logf("%v: ZooKeeper member %d leads", reelected.Round(100*time.Millisecond), e.Leader())
		}
		for _, s := range []*scheduler{a, b} {
			if l := s.leads(); l != leads[s] {
				leads[s] = l
				if s == a && !l {
					kept = false
				}
				t.Logf("%v: %s scheduler /readyz: leads=%v", time.Since(fault).Round(100*time.Millisecond), names[s], l)
			}
		}
		time.Sleep(200 * time.Millisecond) // the sampling rhythm of the observation, not a wait
	}
	e.Member(hung).Resume()
	resumed := time.Since(fault)
	t.Logf("%v: member %d resumed", resumed.Round(100*time.Millisecond), hung)

	// Back on time: the first of a run of on-time fires that lasts to the end of the test.
	var back time.Duration
	await.True(t, backBy+10*time.Second-time.Since(fault), "the job back on time for three fires", func() bool {
		back = backOnTime(w, "ens", fault, every, onTime, 3)
		return back >= 0
	})
	end := time.Now()
	l := leaderOf(t, a, b)
	stopFires(t, l, job)
	stopped := time.Now()
	quiet(t, l, "ens")

	// No fire lost: with misfire, each slot from the first run's to the change of cron is
	// one run of shard 0 (the slot the change met may or may not have fired).
	runs := len(w.runs("ens")["0"])
	first := runStarts(w, "ens")[0].Truncate(every)
	least, most := len(slotsOf(first.Add(-every), end, every)), len(slotsOf(first.Add(-every), stopped.Add(every), every))
	t.Logf("fires: %d runs of shard 0 for %d–%d fire slots; the first scheduler led throughout the hang: %v", runs, least, most, kept)
	if runs < least || runs > most {
		t.Errorf("shard 0 ran %d times for %d–%d fire slots: fires were lost (or doubled)", runs, least, most)
	}

	missed := missedFires(w, "ens", audited.Since, end, every, onTime)
	var during []string
	for _, f := range missed {
		during = append(during, fmt.Sprintf("%+.1fs", f.Sub(fault).Seconds()))
	}
	reel := "not within the hang"
	if which == itsFollower {
		reel = "never (the quorum kept its leader)"
	}
	if reelected > 0 {
		reel = reelected.Round(100 * time.Millisecond).String()
	}
	t.Logf("ZooKeeper re-elected: %s; fire slots without an on-time run: %d %v (relative to the fault); "+
		"back on time %v after the fault began (%v after the hung member resumed)",
		reel, len(missed), during, back.Round(100*time.Millisecond), (back - resumed).Round(100*time.Millisecond))
	var after []string
	for _, r := range runStarts(w, "ens") {
		if r.After(fault) && r.Before(fault.Add(backBy)) {
			after = append(after, fmt.Sprintf("%+.1fs", r.Sub(fault).Seconds()))
		}
	}
	t.Logf("runs started after the fault (both shards): %v", after)
	mustAudit(t, w, audited)
	if back > backBy {
		t.Errorf("the job was back on time %v after the fault began; want within %v", back.Round(100*time.Millisecond), backBy)
	}
}

// runStarts returns when the runs of a job's scripts started, in order.
func runStarts(w *world, job string) []time.Time {
	recs, _ := audit.ReadEffects(w.effects())
	var out []time.Time
	for _, r := range recs {
		if r.Kind == "start" && strings.HasPrefix(r.TaskID, job+"@-@") {
			out = append(out, r.At)
		}
	}
	sort.Slice(out, func(i, k int) bool { return out[i].Before(out[k]) })
	return out
}

// slotsOf returns the fire slots (multiples of every) in [from, to).
func slotsOf(from, to time.Time, every time.Duration) []time.Time {
	var out []time.Time
	for f := from.Truncate(every).Add(every); f.Before(to); f = f.Add(every) {
		out = append(out, f)
	}
	return out
}

// startedOnTime says a run of the job started within onTime of fire f.
func startedOnTime(starts []time.Time, f time.Time, onTime time.Duration) bool {
	for _, s := range starts {
		if !s.Before(f) && s.Sub(f) < onTime {
			return true
		}
	}
	return false
}

// backOnTime returns how long after from the job's last unbroken run of on-time fires began,
// once it is at least n fires long; -1 before.
func backOnTime(w *world, job string, from time.Time, every, onTime time.Duration, n int) time.Duration {
	starts := runStarts(w, job)
	// The last slot may still be launching: judge the slots whose on-time window has passed.
	slots := slotsOf(from, time.Now().Add(-onTime), every)
	streak := 0
	for k := len(slots) - 1; k >= 0 && startedOnTime(starts, slots[k], onTime); k-- {
		streak++
	}
	if streak < n {
		return -1
	}
	return slots[len(slots)-streak].Sub(from)
}

// missedFires returns the fire slots in (from, to) in which no run of the job started on time.
func missedFires(w *world, job string, from, to time.Time, every, onTime time.Duration) []time.Time {
	starts := runStarts(w, job)
	var out []time.Time
	for _, f := range slotsOf(from, to, every) {
		if !startedOnTime(starts, f, onTime) {
			out = append(out, f)
		}
	}
	return out
}

// withMisfire turns misfire on in a job's JSON: each fire then counts, even one that falls while
// the job's previous fire waits to run.
func withMisfire(jobJSON string) string {
	var j map[string]any
	json.Unmarshal([]byte(jobJSON), &j)
	j["misfire"] = true
	b, _ := json.Marshal(j)
	return string(b)
}
