package scheduler

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"

	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/taskid"
)

// offerBook is ackRecorder that also records which offers were ACCEPTed and DECLINEd; with
// failAccept every ACCEPT fails (a 5xx, a timeout: the master may not have taken it).
type offerBook struct {
	ackRecorder
	failAccept bool
	omu        sync.Mutex
	accepted   []string
	declined   []string
}

func (b *offerBook) Call(ctx context.Context, c *scheduler.Call) (mesos.Response, error) {
	b.omu.Lock()
	switch c.Type {
	case scheduler.Call_ACCEPT:
		if b.failAccept {
			b.omu.Unlock()
			return nil, errors.New("503 Service Unavailable")
		}
		for _, o := range c.Accept.OfferIDs {
			b.accepted = append(b.accepted, o.Value)
		}
	case scheduler.Call_DECLINE:
		for _, o := range c.Decline.OfferIDs {
			b.declined = append(b.declined, o.Value)
		}
	}
	b.omu.Unlock()
	return b.ackRecorder.Call(ctx, c)
}

func (b *offerBook) books() (accepted, declined []string) {
	b.omu.Lock()
	defer b.omu.Unlock()
	return slices.Clone(b.accepted), slices.Clone(b.declined)
}

// aReadyRun is a leader on a model of its own ZooKeeper whose Mesos is an offerBook, with one
// queued run of a TRANSIENT job of 2 shards without failover.
func aReadyRun(t *testing.T) (context.Context, *state.Store, string, *offerBook, *leader) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	base, jobs := burstJobs(t, ctx, 1, 2)
	book := &offerBook{}
	ld := testLeader(benchModel(t, ctx, base), book)
	if err := ld.store.AddReady(ctx, jobs[0], false); err != nil {
		t.Fatal(err)
	}
	return ctx, base, jobs[0], book, ld
}

// Mesos has no offer timeout by default: offers neither accepted nor declined stay the
// framework's, their agent's resources idle, until the subscription ends. So the offers of an
// ACCEPT that failed while the stream lives on are declined (Mesos ignores the DECLINE of
// offers it did take).
func TestTheOffersOfAFailedAcceptAreDeclined(t *testing.T) {
	t.Parallel()
	ctx, _, _, book, ld := aReadyRun(t)
	book.failAccept = true
	offers := burstOffers(0)
	ld.cycle(ctx, offers)
	_, declined := book.books()
	for _, o := range offers {
		if !slices.Contains(declined, o.ID.Value) {
			t.Errorf("offer %s neither accepted nor declined (declined: %v)", o.ID.Value, declined)
		}
	}
}

// The offers of a stream that has ended are void: Mesos rescinded them. A cycle on them
// (an OFFERS event queued before the end, taken before the loop saw it) writes nothing ahead
// and calls nothing: the run stays ready for the next subscription's offers.
func TestACycleOnTheOffersOfAnEndedStreamLaunchesNothing(t *testing.T) {
	t.Parallel()
	ctx, base, job, book, ld := aReadyRun(t)
	ld.sub.end()
	ld.cycle(ctx, burstOffers(0))
	running, err := base.RunningOf(ctx, job)
	if err != nil || len(running) != 0 {
		t.Fatalf("running %v (%v); want nothing written ahead", running, err)
	}
	if r, err := base.ReadyOf(ctx, job); err != nil || r.Count != 1 {
		t.Fatalf("ready %+v (%v); want the run still queued", r, err)
	}
	if accepted, declined := book.books(); len(accepted)+len(declined) > 0 {
		t.Fatalf("accepted %v, declined %v; want no call on an ended stream", accepted, declined)
	}
}

// A stream that ends between the write-ahead and the ACCEPT: the ACCEPT is not sent, so the
// tasks never ran, and each shard is queued to launch again — for a job without failover
// too, whose run reconciliation would otherwise end as lost. The next subscription launches
// them in the same run.
func TestTasksWhoseLaunchWasNeverSentAreQueuedAgain(t *testing.T) {
	t.Parallel()
	ctx, base, job, book, ld := aReadyRun(t)
	ld.inst.hooks.writtenAhead = func() { ld.sub.end() }
	ld.cycle(ctx, burstOffers(0))
	if accepted, _ := book.books(); len(accepted) > 0 {
		t.Fatalf("accepted %v on an ended stream", accepted)
	}
	running, err := base.RunningOf(ctx, job)
	if err != nil || len(running) != 0 {
		t.Fatalf("running %v (%v); want none: the launch was never sent", running, err)
	}
	failovers, err := base.Failovers(ctx)
	if err != nil || len(failovers) != 2 {
		t.Fatalf("failover %v (%v); want both shards queued to launch again", failovers, err)
	}
	run := taskid.RunIn(failovers[0].TaskID)

	ld.inst.hooks.writtenAhead = nil
	ld.sub = &subscription{caller: book, frameworkID: "fw-test"}
	ld.cycle(ctx, burstOffers(1))
	running, err = base.RunningOf(ctx, job)
	if err != nil || len(running) != 2 {
		t.Fatalf("running %v (%v); want both shards launched by the next subscription", running, err)
	}
	for _, r := range running {
		if got := taskid.RunIn(r.TaskID); got != run {
			t.Errorf("task %s is of run %q; want the run it was written ahead in, %q", r.TaskID, got, run)
		}
	}
}

// A session that ends before its stream (the leading master changed) leaves in the term's
// event queue what its reader had queued: the next subscription must not take those offers,
// void since. endSession waits for the reader and empties the queue, recording the updates;
// the next subscription gets a new queue, which a reader that would not stop cannot write to.
func TestASessionsEndLeavesNoOffersForTheNext(t *testing.T) {
	t.Parallel()
	w := newGroupWorld(t)
	ctx := context.Background()
	book := &offerBook{}
	w.ld.sub = &subscription{caller: book, frameworkID: "fw-test"}
	if err := w.ld.store.AddReady(ctx, "fo", false); err != nil {
		t.Fatal(err)
	}
	readerDone := make(chan struct{})
	w.ld.events <- scheduler.Event{Type: scheduler.Event_UPDATE, Update: &scheduler.Event_Update{Status: upd(w.tasks[0], mesos.TASK_FINISHED, "u0")}}
	w.ld.events <- scheduler.Event{Type: scheduler.Event_OFFERS, Offers: &scheduler.Event_Offers{Offers: burstOffers(0)}}
	// The reader queues one event more as it stops.
	stop := func() {
		go func() {
			w.ld.events <- scheduler.Event{Type: scheduler.Event_OFFERS, Offers: &scheduler.Event_Offers{Offers: burstOffers(1)}}
			close(readerDone)
		}()
	}
	queue := w.ld.events
	w.ld.endSession(ctx, stop, readerDone)
	if n := len(queue) + len(w.ld.events); n != 0 {
		t.Fatalf("%d events left for the next subscription; want none", n)
	}
	if accepted, _ := book.books(); len(accepted) > 0 {
		t.Fatalf("accepted the ended session's offers %v", accepted)
	}
	if running, _ := w.queues(t); slices.Contains(running, w.tasks[0].String()) {
		t.Errorf("the queued TASK_FINISHED of %s was not recorded", w.tasks[0])
	}
}

// A launch Mesos drops for void offers (a rescind the loop had not read yet, a subscription
// that ended) never ran: its shard runs again, in the same run, for a job without failover too,
// whose run was lost. A drop that may follow a run (an agent that no longer reports the task)
// is a failure as before: no relaunch without failover.
func TestATaskMesosDroppedBeforeItRanIsQueuedAgain(t *testing.T) {
	t.Parallel()
	ctx, base, job, _, ld := aReadyRun(t)
	ld.cycle(ctx, burstOffers(0))
	running, err := base.RunningOf(ctx, job)
	if err != nil || len(running) != 2 {
		t.Fatalf("running %v (%v); want both shards launched", running, err)
	}
	var ids []taskid.ID
	for _, r := range running {
		id, err := taskid.Parse(r.TaskID)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	ld.updates(ctx, []mesos.TaskStatus{
		fromMaster(ids[0], mesos.TASK_DROPPED, mesos.REASON_INVALID_OFFERS),
		fromMaster(ids[1], mesos.TASK_DROPPED, mesos.REASON_RECONCILIATION),
	})
	failovers, err := base.Failovers(ctx)
	if err != nil || len(failovers) != 1 || failovers[0].TaskID != ids[0].String() {
		t.Fatalf("failover %v (%v); want only %s, which never ran", failovers, err, ids[0])
	}
	if left, err := base.RunningOf(ctx, job); err != nil || len(left) != 0 {
		t.Fatalf("running %v (%v); want both ended", left, err)
	}
}
