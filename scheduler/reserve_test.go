package scheduler

import (
	"context"
	"fmt"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/taskid"
)

// A run of 3 cpus among runs of 1 on one agent: each cycle the packer prefers the small runs
// (more shards placed), and as each of their tasks ends the next small run takes the cpu it
// frees, so the large run never finds 3 free. Once it has been left out for --reserve-after,
// the agent is held for it: the cycles place nothing else there until the tasks running there
// have freed enough, then it goes first. With --reserve-after 0 the small runs take the agent
// every time. A run too large for any agent holds nothing, and does not keep the large run
// from its turn.
func TestARunLeftOutTooLongGetsAnAgentHeldForIt(t *testing.T) {
	t.Parallel()
	for _, reserveAfter := range []time.Duration{0, time.Nanosecond} {
		t.Run(fmt.Sprint("reserve-after=", reserveAfter), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			base, jobs := burstJobs(t, ctx, 10, 1, func(j *config.Job) {
				switch j.JobName {
				case "job0000":
					j.CPUCount = 100 // fits nowhere, and is left out first: it must not hold the others' turn
				case "job0001":
					j.CPUCount = 3
				default:
					j.CPUCount = 1
				}
			})
			fake := &ackRecorder{}
			ld := testLeader(benchModel(t, ctx, base), fake)
			ld.cfg.ReserveAfter = reserveAfter
			huge, big, small := jobs[0], jobs[1], jobs[2:]
			ready := func(names ...string) {
				for _, n := range names {
					if err := ld.store.AddReady(ctx, n, false); err != nil {
						t.Fatal(err)
					}
				}
			}
			// What the agent offers: its free cpus, and the app's executor once it runs there.
			offer := func(round int, cpus float64) []mesos.Offer {
				o := mesos.Offer{ID: mesos.OfferID{Value: fmt.Sprintf("O%d", round)}, AgentID: mesos.AgentID{Value: "S0"}, Hostname: "host0",
					Resources: []mesos.Resource{
						{Name: "cpus", Type: mesos.SCALAR.Enum(), Scalar: &mesos.Value_Scalar{Value: cpus}, Role: ptr("*")},
						{Name: "mem", Type: mesos.SCALAR.Enum(), Scalar: &mesos.Value_Scalar{Value: 8192}, Role: ptr("*")},
					}}
				if round > 1 {
					o.ExecutorIDs = []mesos.ExecutorID{{Value: taskid.Executor{AppName: "app", AgentID: "S0"}.String()}}
				}
				return []mesos.Offer{o}
			}
			launched := func() int {
				fake.mu.Lock()
				defer fake.mu.Unlock()
				return fake.launched
			}
			running := func(job string) bool {
				r, err := base.RunningOf(ctx, job)
				if err != nil {
					t.Fatal(err)
				}
				return len(r) > 0
			}

			// Cycle 1: 1 cpu for the executor and 4 for tasks; the four small runs win.
			ready(huge, big)
			ready(small[:4]...)
			ld.cycle(ctx, offer(1, 5))
			if launched() != 4 || running(big) {
				t.Fatalf("cycle 1: %d tasks launched, the large run running: %v; want the 4 small runs", launched(), running(big))
			}
			// Cycle 2: one small task ended and freed 1 cpu; four more small runs wait.
			ready(small[4:]...)
			ld.cycle(ctx, offer(2, 1))
			if reserveAfter == 0 {
				if launched() != 5 {
					t.Fatalf("cycle 2 without reservation: %d tasks launched; want a fifth small run on the freed cpu", launched())
				}
				return
			}
			if launched() != 4 {
				t.Fatalf("cycle 2: %d tasks launched; want none more: the agent is held for %s", launched(), big)
			}
			ld.mu.Lock()
			reasons := ld.unplaced[small[4]]
			held := ld.unplaced[big]
			ld.mu.Unlock()
			if reasons["reserved"] != 1 || held["holding"] != 1 {
				t.Fatalf("unplaced reasons: %s %v, %s %v; want reserved=1 for the small run and holding=1 for the large", small[4], reasons, big, held)
			}
			// Cycle 3: three more ended: 4 cpus free. The large run goes first, a small one after.
			ld.cycle(ctx, offer(3, 4))
			if !running(big) || launched() != 6 {
				t.Fatalf("cycle 3: the large run running: %v, %d tasks launched; want it and one more small run (6)", running(big), launched())
			}
			if since, ok := ld.starving.since[big]; ok || len(ld.starving.held) > 0 {
				t.Errorf("after it launched: left out since %v (%v), agents held %v; want neither", since, ok, ld.starving.held)
			}
		})
	}
}

// Each declined offer filters its agent for 5 s from its own cycle, so agents freed at
// different moments come back one by one, out of phase, for as long as nothing REVIVEs; a run
// needing several of them together would never see them in one cycle. While a cycle has left
// shards unplaced the leader REVIVEs every reviveEvery, clearing the filters so that the next
// allocation offers every agent at once; with nothing unplaced it does not.
func TestTheLeaderRevivesWhileShardsAreLeftUnplaced(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base, jobs := burstJobs(t, ctx, 1, 2, func(j *config.Job) { j.CPUCount = 1 })
	rec := &recordingCaller{calls: map[scheduler.Call_Type]int{}}
	ld := testLeader(benchModel(t, ctx, base), rec)
	if err := ld.store.AddReady(ctx, jobs[0], false); err != nil {
		t.Fatal(err)
	}
	one := burstOffers(0)[:1]
	one[0].Resources[0].Scalar.Value = 2 // the executor's cpu and one shard's: not both shards
	ld.cycle(ctx, one)
	now := time.Now()
	ld.reviveForUnplaced(ctx, now)
	if n := rec.calls[scheduler.Call_REVIVE]; n != 1 {
		t.Fatalf("%d REVIVEs with a run left unplaced; want 1", n)
	}
	ld.reviveForUnplaced(ctx, now.Add(reviveEvery/2))
	if n := rec.calls[scheduler.Call_REVIVE]; n != 1 {
		t.Fatalf("%d REVIVEs within reviveEvery; want still 1", n)
	}
	ld.cycle(ctx, burstOffers(1)) // room for both: nothing left unplaced
	ld.reviveForUnplaced(ctx, now.Add(2*reviveEvery))
	if n := rec.calls[scheduler.Call_REVIVE]; n != 1 {
		t.Fatalf("%d REVIVEs with nothing unplaced; want still 1", n)
	}
}

// Mesos offers an agent alone when a task there ends. A run needing two agents, whose agents
// were held in a cycle that offered both, keeps each one held in the cycles that offer it
// alone — where it cannot fit by itself — or the small runs would take what each task's end
// frees, one agent at a time, for ever.
func TestAgentsHeldForARunStayHeldWhenOfferedAlone(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base, jobs := burstJobs(t, ctx, 13, 1, func(j *config.Job) {
		j.CPUCount = 1
		if j.JobName == "job0000" {
			j.CPUCount, j.ShardingTotalCount = 3.5, 2
		}
	})
	fake := &ackRecorder{}
	ld := testLeader(benchModel(t, ctx, base), fake)
	ld.cfg.ReserveAfter = time.Nanosecond
	wide, small := jobs[0], jobs[1:]
	for _, n := range append([]string{wide}, small[:8]...) {
		if err := ld.store.AddReady(ctx, n, false); err != nil {
			t.Fatal(err)
		}
	}
	offer := func(round int, cpus map[string]float64) []mesos.Offer {
		var out []mesos.Offer
		for _, agent := range []string{"S0", "S1"} {
			c, ok := cpus[agent]
			if !ok {
				continue
			}
			o := mesos.Offer{ID: mesos.OfferID{Value: fmt.Sprintf("O%d-%s", round, agent)}, AgentID: mesos.AgentID{Value: agent}, Hostname: agent,
				Resources: []mesos.Resource{
					{Name: "cpus", Type: mesos.SCALAR.Enum(), Scalar: &mesos.Value_Scalar{Value: c}, Role: ptr("*")},
					{Name: "mem", Type: mesos.SCALAR.Enum(), Scalar: &mesos.Value_Scalar{Value: 8192}, Role: ptr("*")},
				}}
			if round > 1 {
				o.ExecutorIDs = []mesos.ExecutorID{{Value: taskid.Executor{AppName: "app", AgentID: agent}.String()}}
			}
			out = append(out, o)
		}
		return out
	}
	launched := func() int { n, _ := fake.launchesAndKills(); return n }

	ld.cycle(ctx, offer(1, map[string]float64{"S0": 5, "S1": 5})) // the executor and 4 small runs on each
	if launched() != 8 {
		t.Fatalf("cycle 1: %d tasks launched; want the 8 small runs", launched())
	}
	for _, n := range small[8:] {
		if err := ld.store.AddReady(ctx, n, false); err != nil {
			t.Fatal(err)
		}
	}
	ld.cycle(ctx, offer(2, map[string]float64{"S0": 1, "S1": 1})) // a small task ended on each
	if launched() != 8 || !ld.starving.held["S0"] || !ld.starving.held["S1"] {
		t.Fatalf("cycle 2: %d tasks launched, agents held %v; want none more, S0 and S1 held", launched(), ld.starving.held)
	}
	ld.cycle(ctx, offer(3, map[string]float64{"S0": 2})) // another ended on S0: offered alone
	if launched() != 8 {
		t.Fatalf("cycle 3: %d tasks launched; want none: S0 stays held for %s", launched(), wide)
	}
	ld.cycle(ctx, offer(4, map[string]float64{"S0": 4, "S1": 4}))
	if r, err := base.RunningOf(ctx, wide); err != nil || len(r) != 2 {
		t.Fatalf("cycle 4: %s running %v (%v); want both shards", wide, r, err)
	}
}
