package scheduler

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/executor"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/taskid"
)

// executorWorld is trigger-only jobs of one shard, and a first leader that has started the
// app's executor on one agent with the app as it was.
type executorWorld struct {
	replaceWorld
	jobs  []string
	first mesos.ExecutorInfo // the executor the first leader started
	agent string             // where
}

func newExecutorWorld(t *testing.T, ctx context.Context) (executorWorld, *leader) {
	base, jobs := burstJobs(t, ctx, 4, 1)
	w := executorWorld{replaceWorld: replaceWorld{base: base, job: jobs[0], fake: &ackRecorder{}}, jobs: jobs}
	ld := w.leader(t, ctx)
	w.trigger(t, ctx, ld)
	ld.cycle(ctx, burstOffers(0))
	if len(w.fake.executors) != 1 {
		t.Fatalf("%d tasks launched; want 1", len(w.fake.executors))
	}
	w.first = w.fake.executors[0]
	w.agent = w.first.ExecutorID.Value[len("app@-@"):]
	return w, ld
}

// offer is one offer of agent, which lists the executors given as running there.
func offer(round int, agent string, executors ...mesos.ExecutorInfo) []mesos.Offer {
	for _, o := range burstOffers(round) {
		if o.AgentID.Value == agent {
			for _, e := range executors {
				o.ExecutorIDs = append(o.ExecutorIDs, e.ExecutorID)
			}
			return []mesos.Offer{o}
		}
	}
	return nil
}

// lastExecutor launches job through ld on the offers and returns the executor its task got.
func (w executorWorld) lastExecutor(t *testing.T, ctx context.Context, ld *leader, job string, offers []mesos.Offer) mesos.ExecutorInfo {
	t.Helper()
	if err := ld.inst.Trigger(ctx, job); err != nil {
		t.Fatal(err)
	}
	before := len(w.fake.executors)
	ld.cycle(ctx, offers)
	if len(w.fake.executors) != before+1 {
		t.Fatalf("%d tasks launched; want 1", len(w.fake.executors)-before)
	}
	return w.fake.executors[len(w.fake.executors)-1]
}

// A new leader sends a live executor its own ExecutorInfo (Mesos refuses any other, SPEC §5.4),
// though the app has changed since it started: the first leader recorded it in ZooKeeper. An
// agent without the app's executor gets one built from the app as it is now.
func TestANewLeaderSendsALiveExecutorItsOwnExecutorInfo(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, _ := newExecutorWorld(t, ctx)
	if _, err := w.base.UpdateApp(ctx, "app", func(a config.App) (config.App, error) { a.CPUCount = 0.5; return a, nil }); err != nil {
		t.Fatal(err)
	}
	next := w.leader(t, ctx)
	next.loadExecutors(ctx)
	if got := w.lastExecutor(t, ctx, next, w.jobs[1], offer(1, w.agent, w.first)); !got.Equal(&w.first) {
		t.Fatalf("the new leader's ExecutorInfo for the live executor:\n%v\nwant the one it started with:\n%v", got.String(), w.first.String())
	}
	other := "S0"
	if w.agent == other {
		other = "S1"
	}
	if got := w.lastExecutor(t, ctx, next, w.jobs[2], offer(2, other)); got.Resources[0].Scalar.Value != 0.5 {
		t.Fatalf("a new executor's cpus %v; want the app's 0.5", got.Resources[0].Scalar.Value)
	}
}

// After a subscription the leader forgets the executors that the master no longer lists on a
// connected agent (their FAILURE events may have been missed); one on an agent that is not
// connected is kept until the agent offers again without it. Either way the next task there
// starts a new executor from the app as it is now.
func TestExecutorsTheMasterNoLongerListsAreForgotten(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		active bool
		kept   int // executors still recorded after the prune
	}{
		{"the agent is connected", true, 0},
		{"the agent is not", false, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			w, ld := newExecutorWorld(t, ctx)
			master := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
				json.NewEncoder(rw).Encode(map[string]any{
					"frameworks": []any{map[string]any{"id": ld.sub.frameworkID, "executors": []any{}}},
					"slaves":     []any{map[string]any{"id": w.agent, "active": tc.active}},
				})
			}))
			defer master.Close()
			ld.master.Store(&master.URL)
			ld.pruneExecutors(ctx)
			if recorded, err := w.base.Executors(ctx); err != nil || len(recorded) != tc.kept {
				t.Fatalf("recorded executors %v (%v) after the prune", recorded, err)
			}
			if _, err := ld.store.UpdateApp(ctx, "app", func(a config.App) (config.App, error) { a.CPUCount = 0.5; return a, nil }); err != nil {
				t.Fatal(err)
			}
			ld.startedAt[w.first.ExecutorID.Value] = time.Now().Add(-time.Minute) // not just launched
			if got := w.lastExecutor(t, ctx, ld, w.jobs[1], offer(1, w.agent)); got.Resources[0].Scalar.Value != 0.5 {
				t.Fatalf("the executor's cpus %v; want the app's 0.5", got.Resources[0].Scalar.Value)
			}
		})
	}
}

// The records of executors on an agent that the master lists nowhere (neither registered nor
// recovered from its registry: its host rebooted and registered under a new id, or it has been
// cut off for long) are forgotten once it has been so for agentGoneAfter, and not before: an
// agent back from a partition keeps its id and its executors. Listed again, even as recovered
// only, its clock starts over. A launch just made is not pruned by a read that may predate it.
func TestTheExecutorsOfAnAgentTheMasterListsNowhereAreForgottenADayOn(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, ld := newExecutorWorld(t, ctx)
	var listed atomic.Bool // as recovered from the registry
	master := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		doc := map[string]any{"frameworks": []any{map[string]any{"id": ld.sub.frameworkID, "executors": []any{}}}, "slaves": []any{}}
		if listed.Load() {
			doc["recovered_slaves"] = []any{map[string]any{"id": w.agent}}
		}
		json.NewEncoder(rw).Encode(doc)
	}))
	defer master.Close()
	ld.master.Store(&master.URL)
	t0 := time.Now()
	for _, step := range []struct {
		name   string
		listed bool
		at     time.Time
		kept   int
		since  time.Time // the agent's mark in ZooKeeper; zero: none
	}{
		{"just launched", false, t0, 1, time.Time{}},
		{"first seen unlisted", false, t0.Add(time.Minute), 1, t0.Add(time.Minute)},
		{"unlisted a second short of the grace", false, t0.Add(time.Minute + agentGoneAfter - time.Second), 1, t0.Add(time.Minute)},
		{"listed as recovered at the grace", true, t0.Add(time.Minute + agentGoneAfter), 1, time.Time{}},
		{"unlisted again", false, t0.Add(2*time.Minute + agentGoneAfter), 1, t0.Add(2*time.Minute + agentGoneAfter)},
		{"a second short of the grace since", false, t0.Add(2*time.Minute + 2*agentGoneAfter - time.Second), 1, t0.Add(2*time.Minute + agentGoneAfter)},
		{"the grace since", false, t0.Add(2*time.Minute + 2*agentGoneAfter), 0, time.Time{}},
	} {
		listed.Store(step.listed)
		ld.pruneWith(ctx, w.masterDoc(t, ctx, ld), step.at.Add(-unlistedGrace), step.at) // as the sweep does
		if recorded, err := w.base.Executors(ctx); err != nil || len(recorded) != step.kept || len(ld.executors) != step.kept {
			t.Fatalf("%s: recorded executors %v (%v), known %d; want %d", step.name, slices.Collect(maps.Keys(recorded)), err, len(ld.executors), step.kept)
		}
		w.wantMark(t, ctx, step.name, step.since)
	}
	if len(ld.agentsUnlisted) != 0 {
		t.Fatalf("agents still timed: %v", ld.agentsUnlisted)
	}
}

// masterDoc reads the master's state as ld does.
func (w executorWorld) masterDoc(t *testing.T, ctx context.Context, ld *leader) masterState {
	t.Helper()
	doc, err := ld.masterState(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return doc
}

// wantMark fails unless ZooKeeper marks the world's agent unlisted since since (zero: no mark).
func (w executorWorld) wantMark(t *testing.T, ctx context.Context, step string, since time.Time) {
	t.Helper()
	marks, err := w.base.UnlistedAgents(ctx)
	if got, marked := marks[w.agent]; err != nil || len(marks) > 1 || marked != !since.IsZero() || marked && !got.Equal(since) {
		t.Fatalf("%s: unlisted marks %v (%v); want %s since %v", step, marks, err, w.agent, since)
	}
}

// A new leader goes on with the time the agent has been unlisted, not from its own start: leaders
// that change more often than agentGoneAfter (a scheduler deployed daily) would never forget.
func TestANewLeaderCountsAnAgentsUnlistedTimeFromWhenItWasFirstFound(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, first := newExecutorWorld(t, ctx)
	nowhere := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		json.NewEncoder(rw).Encode(map[string]any{"frameworks": []any{}, "slaves": []any{}})
	}))
	defer nowhere.Close()
	first.master.Store(&nowhere.URL)
	t0 := time.Now().Add(time.Minute)
	first.pruneWith(ctx, w.masterDoc(t, ctx, first), t0, t0)
	w.wantMark(t, ctx, "found by the first leader", t0)

	next := w.leader(t, ctx)
	next.loadExecutors(ctx)
	next.master.Store(&nowhere.URL)
	at := t0.Add(agentGoneAfter)
	next.pruneWith(ctx, w.masterDoc(t, ctx, next), at, at)
	if recorded, err := w.base.Executors(ctx); err != nil || len(recorded) != 0 {
		t.Fatalf("recorded executors %v (%v) a day after the first leader found the agent unlisted; want none", slices.Collect(maps.Keys(recorded)), err)
	}
	w.wantMark(t, ctx, "forgotten by the next leader", time.Time{})
}

// An executor recorded for an agent whose offer does not list it is gone (its FAILURE lost, or
// the ACCEPT that would have started it refused): the next task there gets an executor built
// from the app as it is, which the packer budgeted, rather than the recorded one, which would
// ask for more than the offer holds. One the offer lists keeps its ExecutorInfo.
func TestAnExecutorTheOfferDoesNotListIsForgotten(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, ld := newExecutorWorld(t, ctx)
	if _, err := ld.store.UpdateApp(ctx, "app", func(a config.App) (config.App, error) { a.CPUCount = 0.5; return a, nil }); err != nil {
		t.Fatal(err)
	}
	// Just launched, it is kept though an offer does not list it: Mesos may have made the
	// offer before it took the ACCEPT.
	if got := w.lastExecutor(t, ctx, ld, w.jobs[1], offer(1, w.agent)); !got.Equal(&w.first) {
		t.Fatalf("the executor launched a moment ago:\n%v\nwant the one it started with:\n%v", got.String(), w.first.String())
	}
	ld.startedAt[w.first.ExecutorID.Value] = time.Now().Add(-time.Minute)
	if got := w.lastExecutor(t, ctx, ld, w.jobs[2], offer(2, w.agent, w.first)); !got.Equal(&w.first) {
		t.Fatalf("the listed executor's ExecutorInfo:\n%v\nwant the one it started with:\n%v", got.String(), w.first.String())
	}
	got := w.lastExecutor(t, ctx, ld, w.jobs[3], offer(3, w.agent))
	if cpus := got.Resources[0].Scalar.Value; cpus != 0.5 {
		t.Fatalf("the executor's cpus %v; want the app's 0.5, which the packer budgeted", cpus)
	}
	if recorded, err := w.base.Executors(ctx); err != nil || len(recorded) != 1 {
		t.Fatalf("recorded executors %v (%v); want only the new one", recorded, err)
	}
}

// An executor that an offer lists but whose ExecutorInfo the leader has lost (the record's
// write failed, or it was forgotten while its agent was away) would make Mesos refuse every
// task of its app sent there once the app has changed, and an idle one lives for ever. While it
// runs a task of ours it is left alone (stopping it would kill the task); idle, it is told to
// stop and its agent's offers are declined, and the app's next task there, once the agent is
// offered without it, gets an executor built from the app as it is.
func TestAnIdleExecutorWhoseInfoIsLostIsToldToStop(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, ld := newExecutorWorld(t, ctx)
	id := w.first.ExecutorID.Value
	ld.forgetExecutors(ctx, id) // lost
	if _, err := ld.store.UpdateApp(ctx, "app", func(a config.App) (config.App, error) { a.CPUCount = 0.5; return a, nil }); err != nil {
		t.Fatal(err)
	}
	calls := func() (messages, declined int) {
		w.fake.mu.Lock()
		defer w.fake.mu.Unlock()
		return len(w.fake.messages), len(w.fake.declined)
	}

	// Busy: job0's task runs on it. Left alone.
	ld.cycle(ctx, offer(1, w.agent, w.first))
	if messages, _ := calls(); messages != 0 {
		t.Fatalf("messages %v to an executor running a task", w.fake.messages)
	}

	// Idle: told to stop, and its agent's offers declined.
	running, err := ld.store.Running(ctx)
	if err != nil || len(running) != 1 {
		t.Fatalf("running %v (%v); want job0's task", running, err)
	}
	tid, err := taskid.Parse(running[0].TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ld.store.EndTaskWith(ctx, tid, state.NoFollowUp, state.EndOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := ld.inst.Trigger(ctx, w.jobs[2]); err != nil {
		t.Fatal(err)
	}
	launched := len(w.fake.executors)
	_, declinedBefore := calls()
	ld.cycle(ctx, offer(2, w.agent, w.first))
	if messages, declined := calls(); len(w.fake.executors) != launched || messages != 1 || w.fake.messages[0] != id+": "+executor.StopMessage || declined != declinedBefore+1 {
		t.Fatalf("the idle executor's agent: %d tasks launched, messages %v, %d offers declined; want none launched, a STOP to %s, its offer declined",
			len(w.fake.executors)-launched, w.fake.messages, declined-declinedBefore, id)
	}

	// Gone: the agent is offered without it, and the queued run gets a new executor.
	ld.cycle(ctx, offer(3, w.agent))
	if len(w.fake.executors) != launched+1 {
		t.Fatalf("%d tasks launched once the executor is gone; want 1", len(w.fake.executors)-launched)
	}
	if got := w.fake.executors[launched]; got.Resources[0].Scalar.Value != 0.5 {
		t.Fatalf("the new executor's cpus %v; want the app's 0.5", got.Resources[0].Scalar.Value)
	}
}
