package mesoslocal_test

import (
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/resources"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"

	"github.com/ejcloud/ejcloud/integration/mesoslocal"
)

func cpus(o mesos.Offer) float64 { v, _ := resources.CPUs(o.Resources...); return v }
func mem(o mesos.Offer) uint64   { v, _ := resources.Memory(o.Resources...); return v }

// Item 15: the offer's shape follows the framework's capabilities.
func TestOfferShape(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	plain := subscribe(t, c.URL(), codec, paInfo())
	o := plain.Offers()[0]
	if o.AllocationInfo != nil || o.Hostname == "" || o.URL == nil || o.URL.Address.Port == 0 || o.FrameworkID.Value != plain.FrameworkID {
		t.Fatalf("offer to a non-MULTI_ROLE framework: %v", o.String())
	}
	for _, r := range o.Resources {
		if r.AllocationInfo != nil || r.GetRole() != "*" {
			t.Fatalf("resource %v: want role \"*\" and no allocation_info", r.String())
		}
	}
	plain.MustCall(calls.Decline(o.ID))

	multi := frameworkInfo(mesos.FrameworkInfo_Capability_MULTI_ROLE, mesos.FrameworkInfo_Capability_PARTITION_AWARE)
	multi.Roles = []string{"jobs"}
	m := subscribe(t, c.URL(), codec, multi)
	mo := m.Offers()[0]
	if mo.AllocationInfo == nil || mo.AllocationInfo.GetRole() != "jobs" {
		t.Fatalf("offer to a MULTI_ROLE framework lacks allocation_info: %v", mo.String())
	}
	for _, r := range mo.Resources {
		if r.AllocationInfo == nil || r.AllocationInfo.GetRole() != "jobs" {
			t.Fatalf("resource %v lacks allocation_info", r.String())
		}
	}
	// A task launched with the offered resources (allocation info and all) is accepted, and
	// the next offer lists its executor.
	m.Launch(mo, mesos.TaskInfo{Name: "t", TaskID: mesos.TaskID{Value: "t1"}, AgentID: mo.AgentID,
		Executor: testExecutor("e1", "basic"), Resources: allocatedScalars(0.5, 64, "jobs"), Data: []byte("run")})
	m.Update("t1", mesos.TASK_RUNNING)
	next := m.Offers()[0]
	if len(next.ExecutorIDs) != 1 || next.ExecutorIDs[0].Value != "e1" {
		t.Fatalf("offer executor_ids = %v; want [e1]", next.ExecutorIDs)
	}
}

// Item 15: an offer lists the framework's executors on the agent, but not the built-in command
// executor of a command task, which the master does not track.
func TestOfferExecutorIDsLeaveOutCommandExecutors(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	s.Launch(o, commandTask("cmd1", o, &mesos.CommandInfo{Value: ptrTo("sleep 60")}))
	s.Ack(s.Update("cmd1", mesos.TASK_RUNNING))
	if next := s.Offers()[0]; len(next.ExecutorIDs) != 0 {
		t.Fatalf("offer executor_ids = %v beside a command task; want none", next.ExecutorIDs)
	}
}

func allocatedScalars(c, m float64, role string) []mesos.Resource {
	rs := scalars(c, m)
	for i := range rs {
		rs[i].AllocationInfo = &mesos.Resource_AllocationInfo{Role: ptrTo(role)}
	}
	return rs
}

// Item 16: offered = total − tasks − executors − outstanding offers.
func TestOfferArithmetic(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	if cpus(o) != 4 || mem(o) != 4096 {
		t.Fatalf("first offer %v cpus %v mem; want the whole agent", cpus(o), mem(o))
	}
	tk := task("t1", o, testExecutor("e1", "basic"), "run")
	tk.Resources = scalars(2, 2048)
	s.Launch(o, tk)
	s.Update("t1", mesos.TASK_RUNNING)
	next := s.Offers()[0]
	if cpus(next) != 1.9 || mem(next) != 2016 {
		t.Fatalf("offer after a 2 cpu / 2048 MB task with a 0.1 / 32 executor: %v cpus %v mem; want 1.9 and 2016", cpus(next), mem(next))
	}
}

// Item 17: DECLINE without filters refuses for the default 5 s; refuse_seconds 0 for none.
func TestDeclineFilters(t *testing.T) {
	t.Parallel()
	clock := mesoslocal.NewManualClock(time.Unix(1_800_000_000, 0))
	c := newCluster(t, func(o *mesoslocal.Options) { o.Clock = clock; o.AllocationInterval = 100 * time.Millisecond })
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	s.MustCall(calls.Decline(o.ID)) // no filters: the proto default of 5 s
	clock.Advance(4900 * time.Millisecond)
	s.None("offer inside the default 5 s filter", 200*time.Millisecond, isType(scheduler.Event_OFFERS))
	clock.Advance(200 * time.Millisecond)
	o = s.Offers()[0]
	s.MustCall(calls.Decline(o.ID).With(calls.RefuseSeconds(0)))
	clock.Advance(100 * time.Millisecond)
	o = s.Offers()[0]
	s.MustCall(calls.Decline(o.ID).With(calls.Filters(func(f *mesos.Filters) { f.RefuseSeconds = ptrTo(-3.0) })))
	clock.Advance(4900 * time.Millisecond)
	s.None("offer inside the 5 s a negative refuse_seconds means", 200*time.Millisecond, isType(scheduler.Event_OFFERS))
	clock.Advance(200 * time.Millisecond)
	s.Offers()
}

// Item 18: SUPPRESS stops offers; REVIVE clears filters and offers at once; a bad role voids
// the call.
func TestSuppressAndRevive(t *testing.T) {
	t.Parallel()
	clock := mesoslocal.NewManualClock(time.Unix(1_800_000_000, 0))
	c := newCluster(t, func(o *mesoslocal.Options) { o.Clock = clock; o.AllocationInterval = 100 * time.Millisecond })
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	s.MustCall(calls.Decline(o.ID).With(calls.RefuseSeconds(time.Hour)))
	s.MustCall(calls.Revive())
	o = s.Offers()[0] // at once, no clock advance needed
	s.MustCall(calls.Suppress())
	s.MustCall(calls.Decline(o.ID).With(calls.RefuseSeconds(0)))
	clock.Advance(time.Second)
	s.None("offer while suppressed", 200*time.Millisecond, isType(scheduler.Event_OFFERS))
	s.MustCall(calls.ReviveWith([]string{"not-my-role"}))
	clock.Advance(time.Second)
	s.None("offer after a REVIVE naming a foreign role", 200*time.Millisecond, isType(scheduler.Event_OFFERS))
	s.MustCall(calls.Revive())
	s.Offers()
}

// Item 19: RESCIND on offer timeout and on agent loss; a rescinded offer is invalid.
func TestRescind(t *testing.T) {
	t.Parallel()
	clock := mesoslocal.NewManualClock(time.Unix(1_800_000_000, 0))
	c := newCluster(t, func(o *mesoslocal.Options) {
		o.Clock = clock
		o.OfferTimeout = 500 * time.Millisecond
		o.AllocationInterval = time.Hour
	})
	s := subscribe(t, c.URL(), codec, frameworkInfo()) // not partition-aware
	o := s.Offers()[0]
	clock.Advance(500 * time.Millisecond)
	ev := s.Await("RESCIND", isType(scheduler.Event_RESCIND))
	if ev.Rescind.OfferID != o.ID {
		t.Fatalf("RESCIND of %v; want %v", ev.Rescind.OfferID, o.ID)
	}
	s.Launch(o, task("t1", o, testExecutor("e1", "basic"), "finish"))
	if st := s.Update("t1"); *st.State != mesos.TASK_LOST || *st.Reason != mesos.REASON_INVALID_OFFERS {
		t.Fatalf("ACCEPT of a rescinded offer by a non-PA framework: %v; want TASK_LOST / INVALID_OFFERS", st.String())
	}
	s.MustCall(calls.Revive())
	o = s.Offers()[0]
	if err := c.PartitionAgent(o.AgentID.Value); err != nil {
		t.Fatal(err)
	}
	if ev := s.Await("RESCIND", isType(scheduler.Event_RESCIND)); ev.Rescind.OfferID != o.ID {
		t.Fatalf("RESCIND of %v after agent loss; want %v", ev.Rescind.OfferID, o.ID)
	}
}

// Item 20: offer validation failures drop every task with REASON_INVALID_OFFERS.
func TestOfferValidation(t *testing.T) {
	t.Parallel()
	c := newCluster(t, func(o *mesoslocal.Options) { o.Agents = 2 })
	s := subscribe(t, c.URL(), codec, paInfo())
	var offers []mesos.Offer
	for len(offers) < 2 {
		offers = append(offers, s.Offers()...)
	}
	a, b := offers[0], offers[1]
	tests := []struct {
		name string
		ids  []mesos.OfferID
	}{
		{"offers of two agents", []mesos.OfferID{a.ID, b.ID}},
		{"unknown offer", []mesos.OfferID{{Value: "nope"}}},
		{"duplicate offer", []mesos.OfferID{a.ID, a.ID}},
		{"no offers", nil},
	}
	for i, tc := range tests {
		id := "t" + string(rune('0'+i))
		s.MustCall(calls.Accept(calls.OfferOperations{calls.OpLaunch(task(id, a, testExecutor("e", "basic"), "finish"))}.WithOffers(tc.ids...)))
		st := s.Update(id)
		if *st.State != mesos.TASK_DROPPED || *st.Reason != mesos.REASON_INVALID_OFFERS || len(st.UUID) != 0 {
			t.Fatalf("%s: %v; want TASK_DROPPED / INVALID_OFFERS without uuid", tc.name, st.String())
		}
		s.MustCall(calls.Decline(a.ID, b.ID).With(calls.RefuseSeconds(0))) // those still outstanding
		s.MustCall(calls.Revive())
		offers = nil
		for len(offers) < 2 {
			offers = append(offers, s.Offers()...)
		}
		if offers[0].AgentID == a.AgentID {
			a, b = offers[0], offers[1]
		} else {
			a, b = offers[1], offers[0]
		}
	}
}

// Item 21: each task validation rule answers TASK_ERROR / REASON_TASK_INVALID, no uuid.
func TestTaskValidation(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	s.Launch(o, task("running", o, testExecutor("e1", "basic"), "run"))
	s.Update("running", mesos.TASK_RUNNING)
	cmd := &mesos.CommandInfo{Value: ptrTo("true")}
	tests := []struct {
		name   string
		make   func(o mesos.Offer) []mesos.TaskInfo
		failed string
	}{
		{"duplicate id within one ACCEPT", func(o mesos.Offer) []mesos.TaskInfo {
			return []mesos.TaskInfo{task("dup", o, testExecutor("e1", "basic"), "run"), task("dup", o, testExecutor("e1", "basic"), "run")}
		}, "dup"},
		{"id of a live task", func(o mesos.Offer) []mesos.TaskInfo {
			return []mesos.TaskInfo{task("running", o, testExecutor("e1", "basic"), "run")}
		}, "running"},
		{"wrong agent", func(o mesos.Offer) []mesos.TaskInfo {
			t := task("agent", o, testExecutor("e1", "basic"), "run")
			t.AgentID = mesos.AgentID{Value: "other-S9"}
			return []mesos.TaskInfo{t}
		}, "agent"},
		{"no resources", func(o mesos.Offer) []mesos.TaskInfo {
			t := task("nores", o, testExecutor("e1", "basic"), "run")
			t.Resources = nil
			return []mesos.TaskInfo{t}
		}, "nores"},
		{"both command and executor", func(o mesos.Offer) []mesos.TaskInfo {
			t := task("both", o, testExecutor("e1", "basic"), "run")
			t.Command = cmd
			return []mesos.TaskInfo{t}
		}, "both"},
		{"neither command nor executor", func(o mesos.Offer) []mesos.TaskInfo {
			return []mesos.TaskInfo{task("neither", o, nil, "run")}
		}, "neither"},
		{"id with a slash", func(o mesos.Offer) []mesos.TaskInfo {
			return []mesos.TaskInfo{task("a/b", o, testExecutor("e1", "basic"), "run")}
		}, "a/b"},
		{"ExecutorInfo differing from the running executor's", func(o mesos.Offer) []mesos.TaskInfo {
			e := testExecutor("e1", "basic")
			e.Name = ptrTo("changed")
			return []mesos.TaskInfo{task("incompat", o, e, "run")}
		}, "incompat"},
		{"more resources than offered", func(o mesos.Offer) []mesos.TaskInfo {
			t := task("big", o, testExecutor("e2", "basic"), "run")
			t.Resources = scalars(3.95, 64) // fits alone, not with the new executor's 0.1
			return []mesos.TaskInfo{t}
		}, "big"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s.MustCall(calls.Revive())
			o := s.Offers()[0]
			s.Launch(o, tc.make(o)...)
			st := s.Update(tc.failed, mesos.TASK_ERROR)
			if *st.Reason != mesos.REASON_TASK_INVALID || len(st.UUID) != 0 || *st.Source != mesos.SOURCE_MASTER || st.GetMessage() == "" {
				t.Fatalf("%v; want TASK_ERROR / TASK_INVALID from the master with a message and no uuid", st.String())
			}
		})
	}
}

// Item 22: the unused part of an accepted offer is declined with the ACCEPT's filters.
func TestImplicitDecline(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	s.Launch(o, task("t1", o, testExecutor("e1", "basic"), "run")) // refuse_seconds 0
	next := s.Offers()[0]
	if cpus(next) != 3.4 || mem(next) != 4000 {
		t.Fatalf("remainder offered %v cpus %v mem; want 3.4 and 4000", cpus(next), mem(next))
	}
}

// Item 17, the subset rule: a filter hides only resources that are a subset of those refused;
// when a task ends and frees more, the agent is offered again at once.
func TestFilterHidesOnlyASubsetOfTheRefused(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	s.Launch(o, task("t1", o, testExecutor("e1", "basic"), "hold"))
	s.Ack(s.Update("t1", mesos.TASK_RUNNING))
	rest := s.Offers()[0]
	s.MustCall(calls.Decline(rest.ID).With(calls.RefuseSeconds(time.Hour)))
	s.MustCall(calls.Message(o.AgentID.Value, "e1", []byte("finish:t1")))
	s.Ack(s.Update("t1", mesos.TASK_FINISHED))
	if next := s.Offers()[0]; cpus(next) <= cpus(rest) {
		t.Fatalf("offer after the task freed resources: %v cpus; want more than the %v refused", cpus(next), cpus(rest))
	}
}
