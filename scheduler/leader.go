package scheduler

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/api"
	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/scheduler/producer"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/taskid"
)

// leader is this instance's work while it leads: the Mesos subscription, the producer and one
// event loop that owns the in-memory state below and handles offers, status updates and
// reconciliation in order.
type leader struct {
	inst  *instance
	cfg   Config
	log   logrus.FieldLogger
	store *state.Store // fenced: every write checks our election node
	prod  *producer.Producer

	events chan scheduler.Event
	work   chan struct{}              // new ready or failover work: REVIVE if suppressed
	due    chan struct{}              // a shard's relaunch backoff ran out
	exec   chan func(context.Context) // operations from other goroutines, run by the event loop
	// served is closed when the event loop stops serving its subscription; nil while it serves
	// none. The API's operations wait on the loop only while it serves (onLoop).
	servedMu sync.Mutex
	served   chan struct{}

	// Owned by the event loop.
	elected    time.Time // when this leadership term began: the Mesos start-up budget counts from it
	everSubbed bool      // this term has subscribed to Mesos at least once
	sub        *subscription
	acks       *acknowledger // the subscription's ACKNOWLEDGE senders; nil without one (tests)
	// master is the URL of the master subscribed at, read by the API's goroutines too.
	master atomic.Pointer[string]
	// daemonsOwed: the last ensureDaemons failed (a ZooKeeper fault); the next tick tries again.
	daemonsOwed atomic.Bool
	suppressed  bool
	executors   map[string]mesos.ExecutorInfo // by executor id: what we launched, for identical reuse
	startedAt   map[string]time.Time          // by executor id: when this leader launched it (forgetUnlisted)
	// agentsUnlisted: agent id → when a leader first found the master listing nowhere that
	// agent, which has recorded executors (pruneWith); kept in ZooKeeper too.
	agentsUnlisted map[string]time.Time
	unreachable    map[string]time.Time // task id → when Mesos reported it unreachable
	// confirming holds the unreachable tasks past the timeout whose reconciliation is asked:
	// task id → when. Only the answer, still unreachable, makes one lost (timeUnreachable).
	confirming map[string]time.Time
	// killed holds the tasks this leader asked Mesos to kill that have not ended: task id →
	// agent id. Real Mesos forgets a KILL for a task on an unreachable agent, so one reported
	// running again (its agent back) is killed again (killAgain).
	killed map[string]string
	// checking holds the tasks whose run's end record is being read before their executor's
	// death is recorded (ends.go), each with the subscription the read serves; endChecks
	// bounds the reads under way.
	checking  map[string]*subscription
	endChecks chan struct{}
	stale     staleTasks
	// staleCount is stale's count for the metrics (ejcloud_tasks_stale), which scrapes read
	// from other goroutines.
	staleCount atomic.Int64
	lastRecon  time.Time
	lastRevive time.Time   // the last REVIVE's
	reconOwed  bool        // the last explicit reconciliation could not read the running queue
	recon      reconRun    // the explicit reconciliation under way (reconcile.go)
	sweeping   atomic.Bool // a sweep of the deleted apps' executors is under way (sweepOrphans)

	relaunch  *relaunches                      // failures in a row per shard: failover backoff and stops
	retries   map[taskid.Meta]state.RetryState // the pending retries the last cycle read (issue 19)
	replacing jobSet                           // Replace jobs with a new fire, for the event loop
	fires     fireTimes                        // cron times of the queued runs this leader's producer wrote: schedule lag
	starving  starving                         // READY runs left out for want of resources (reserve.go)

	// confirm checks the leadership with the quorum before the leader acts on
	// Mesos where no fenced write protects it (subscribing, killing); nil where a test runs a
	// leader without an election.
	confirm func(context.Context) error

	mu       sync.Mutex // guards unplaced, idle and waiting, read by the API
	unplaced map[string]map[string]int
	idle     map[string]bool
	waiting  waits // why a job's queued work waits (issue 19)
}

// lead runs the leader's work until the leadership is lost or ctx ends. It returns a fatal
// error only when Mesos removed the framework.
func (s *instance) lead(ctx context.Context, l *state.Leadership) error {
	ctx, cancel := context.WithCancel(ctx)
	watched := make(chan struct{})
	defer func() { cancel(); <-watched }() // this term's watcher ends before the next term begins
	go func() {
		defer close(watched)
		select {
		case <-l.Lost():
			// Leadership is what ZooKeeper says, at once: /readyz and the API stop answering
			// as leader now, not once the leader's work has unwound from a blocked call.
			s.setLeader(false)
			s.setSubscribed(false)
			s.setLeaderState(nil, nil)
			cancel() // stop all leader work at once, before any further launch
		case <-ctx.Done():
		}
	}()
	log := s.log.WithField("role", "leader")
	var ld *leader
	changed := make(chan state.Change, 256)
	store, err := loadModel(ctx, l.Store(), log, func(c state.Change) {
		select {
		case changed <- c:
		case <-ctx.Done():
		}
	})
	if err != nil {
		return nil // the leadership ended before the model could be loaded
	}
	ld = newLeader(s, log, store)
	ld.confirm = l.Confirm
	ld.prod = producer.New(fireGate{ld.store}, producer.RealClock, ld.log.WithField("component", "producer"), func(job string, at []time.Time) {
		ld.fires.fired(job, at)
		// A Replace job's new run replaces the one still running (issue 19): the event loop
		// kills it when it takes the work this poke announced. Never a blocking send here: the
		// loop runs only while subscribed, and the producer must not wait for Mesos.
		if j, err := ld.store.Job(ctx, job); err == nil && j.ConcurrencyPolicy == config.Replace {
			ld.replacing.add(job)
		}
		ld.poke()
	})
	s.setLeaderState(ld, api.New(ld.store, s, api.Config{Root: s.cfg.AuthRoot, Guest: s.cfg.AuthGuest, Log: s.log.WithField("component", "api"), Trace: s.trace.api()}))
	defer s.setLeaderState(nil, nil)

	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Add(3)
	go func() {
		defer wg.Done()
		ld.prod.Run(ctx)
	}()
	s.trace.lead(ctx, &wg, ld.store)
	go func() {
		defer wg.Done()
		ld.followChanges(ctx, changed)
	}()
	go func() {
		defer wg.Done()
		defer cancel() // the loop only ends with the leadership: stop the producer too
		errs <- ld.loop(ctx)
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// newLeader is a leader's state for one term, before it subscribes: its channels, its empty
// books and its relaunch backoff. Tests and benchmarks build their leaders with it too.
func newLeader(inst *instance, log logrus.FieldLogger, store *state.Store) *leader {
	return &leader{
		inst: inst, cfg: inst.cfg, log: log, store: store, elected: time.Now(),
		events: make(chan scheduler.Event, 1024), work: make(chan struct{}, 1), due: make(chan struct{}, 1), exec: make(chan func(context.Context), 64),
		executors: map[string]mesos.ExecutorInfo{}, startedAt: map[string]time.Time{}, agentsUnlisted: map[string]time.Time{}, unreachable: map[string]time.Time{}, confirming: map[string]time.Time{}, killed: map[string]string{},
		checking: map[string]*subscription{}, endChecks: make(chan struct{}, maxEndChecks),
		unplaced: map[string]map[string]int{}, idle: map[string]bool{}, waiting: newWaits(),
		relaunch: newRelaunches(inst.cfg.FailoverBackoffMin, inst.cfg.FailoverBackoffMax),
	}
}

// loadModel loads the leader's model of the state (state.Store.Mirror), retrying until it
// succeeds or ctx ends: no cycle may run on a partial model.
func loadModel(ctx context.Context, fenced *state.Store, log logrus.FieldLogger, onChange func(state.Change)) (*state.Store, error) {
	backoff := 250 * time.Millisecond
	for {
		start := time.Now()
		store, err := fenced.Mirror(ctx, onChange)
		if err == nil {
			log.WithField("took", time.Since(start).Round(time.Millisecond)).Info("model of the state loaded")
			return store, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		log.WithError(err).Warn("cannot load the model of the state; retrying")
		sleep(ctx, backoff)
		backoff = min(2*backoff, 5*time.Second)
	}
}

// followChanges acts on configs and markers that someone else changed in ZooKeeper (the model
// already has them): a job's cron is rescheduled, new work is looked for.
func (ld *leader) followChanges(ctx context.Context, changed <-chan state.Change) {
	for {
		select {
		case <-ctx.Done():
			return
		case c := <-changed:
			ld.log.WithFields(logrus.Fields{"kind": c.Kind, "name": c.Name}).Debug("changed in ZooKeeper")
			if c.Kind == "job" {
				ld.jobChanged(ctx, c.Name)
				continue
			}
			ld.poke()
		}
	}
}

// confirmed is ld.confirm, if there is one.
func (ld *leader) confirmed(ctx context.Context) error {
	if ld.confirm == nil {
		return nil
	}
	err := ld.confirm(ctx)
	if f := ld.inst.hooks.confirmed; f != nil {
		f(err)
	}
	return err
}

func (ld *leader) poke() {
	select {
	case ld.work <- struct{}{}:
	default:
	}
}

// loop subscribes (again, with backoff capped at 30 s, whenever the subscription is lost) and
// handles events until ctx ends.
func (ld *leader) loop(ctx context.Context) error {
	if err := ld.loadJobs(ctx); err != nil {
		ld.log.WithError(err).Error("cannot load jobs")
	}
	ld.loadExecutors(ctx)
	if err := ld.store.PruneRestarts(ctx); err != nil {
		ld.log.WithError(err).Warn("cannot prune the restart lists of ended tasks; they are pruned at the next takeover")
	}
	backoff := firstBackoff
	for ctx.Err() == nil {
		began := time.Now()
		err := ld.session(ctx)
		var failed subscribeFailed
		switch {
		case errors.Is(err, errFrameworkRemoved):
			return err
		case ctx.Err() != nil:
			return nil
		case errors.As(err, &failed) && !ld.everSubbed && time.Since(ld.elected) > ld.cfg.MesosStartupTimeout:
			return fmt.Errorf("cannot reach Mesos at %s within %v: %w", ld.cfg.mesosTarget(), ld.cfg.MesosStartupTimeout, failed.error)
		case errors.As(err, &failed):
			ld.log.WithError(err).Warn("Mesos subscription failed; retrying")
			sleep(ctx, backoff)
			backoff = nextBackoff(backoff)
		default:
			var wait time.Duration
			wait, backoff = resubscribeWait(time.Since(began), backoff)
			ld.log.WithError(err).WithField("in", wait).Warn("Mesos subscription lost; re-subscribing")
			sleep(ctx, wait)
		}
	}
	return nil
}

// The backoff between subscriptions: from firstBackoff, doubling to 30 s.
const firstBackoff = 500 * time.Millisecond

func nextBackoff(b time.Duration) time.Duration { return min(2*b, 30*time.Second) }

// stableSession is how long a subscription must have lasted for its loss to be taken up at
// once: a master that fails over after a while, say.
const stableSession = 10 * time.Second

// resubscribeWait is how long to wait before subscribing again after a subscription that was
// lost after lasting lasted, and the backoff after that. A stable one is taken up again at once
// (and the backoff starts afresh); one lost soon after SUBSCRIBED — a master that takes the
// framework and drops it again, or a FrameworkID that cannot be recorded — backs off like a
// failed subscription, or the leader would subscribe and reconcile in a tight loop.
func resubscribeWait(lasted, backoff time.Duration) (wait, next time.Duration) {
	if lasted >= stableSession {
		return 0, firstBackoff
	}
	return backoff, nextBackoff(backoff)
}

// subscribeFailed is a session that never got SUBSCRIBED.
type subscribeFailed struct{ error }

// session is one subscription: SUBSCRIBE, record it, then serve its events until it ends.
func (ld *leader) session(ctx context.Context) error {
	fwID, err := ld.store.FrameworkID(ctx)
	if err != nil && !errors.Is(err, state.ErrNotFound) {
		return subscribeFailed{fmt.Errorf("read the FrameworkID: %w", err)}
	}
	// The subscription lives in streamCtx until its stream ends. Before this term's first
	// subscription the handshake is also bounded by the start-up budget (mesos-go retries
	// inside one call); the bound must not outlive the handshake, or it would cut the stream.
	// The budget counts from the election, not from process start: a standby may have waited
	// for hours, and it must get the same chance to reach Mesos as a fresh instance.
	// A server cut off from the quorum can show this instance's expired election node as
	// present: never take the framework's Mesos connection on its word alone.
	if err := ld.confirmed(ctx); err != nil {
		return subscribeFailed{fmt.Errorf("confirm the leadership before subscribing: %w", err)}
	}
	streamCtx, endStream := context.WithCancel(ctx)
	defer endStream()
	var budget *time.Timer
	if !ld.everSubbed {
		budget = time.AfterFunc(time.Until(ld.elected.Add(ld.cfg.MesosStartupTimeout+time.Second)), endStream)
	}
	sub, err := ld.inst.hooks.mesos.subscribe(streamCtx, fwID, ld.cfg.scheme()+"://"+ld.inst.advertised)
	if budget != nil && !budget.Stop() && err == nil {
		sub.resp.Close()
		err = errors.New("subscribed only after the start-up budget ran out")
	}
	if errors.Is(err, errFrameworkRemoved) {
		return err
	}
	if err != nil {
		return subscribeFailed{err}
	}
	defer sub.resp.Close()
	if err := ld.subscribed(ctx, sub, fwID); err != nil {
		return fmt.Errorf("record the subscription: %w", err)
	}
	defer ld.inst.setSubscribed(false)
	if sub.awaitMove != nil {
		// Another master leads now: this stream would only end when the old one dies (or
		// never, if it lives on cut off); re-subscribe at the new one with the FrameworkID.
		go func() {
			if sub.awaitMove(streamCtx) {
				ld.log.WithField("from", sub.master).Warn("the leading Mesos master changed; re-subscribing at the new one")
				endStream()
			}
		}()
	}
	ackCtx, stopAcks := context.WithCancel(streamCtx)
	ld.acks = startAcknowledger(ackCtx, sub, ld.log)
	var leases sync.WaitGroup
	leases.Add(1)
	go func() {
		defer leases.Done()
		ld.keepLeases(ackCtx, ld.acks)
	}()
	defer func() {
		stopAcks()
		leases.Wait()
		ld.acks.wait()
		ld.acks = nil
	}()
	streamErr := make(chan error, 1)
	readerDone := make(chan struct{})
	events := ld.events // endSession gives the next session a new queue
	go func() {
		defer close(readerDone)
		err := sub.events(streamCtx, events)
		// Not subscribed from the stream's end, not from the loop's: that drains the events
		// queued before it, each a ZooKeeper write, and /readyz said 200 meanwhile.
		ld.inst.setSubscribed(false)
		streamErr <- err
	}()
	err = ld.serve(streamCtx, streamErr)
	ld.endSession(ctx, endStream, readerDone)
	return err
}

// endSession stops the reader of a subscription's stream and leaves the next subscription of
// the term an empty event queue. serve drains the queue when the stream ends, but not when the
// session ends first (the leading master changed, the term ended), and the reader can queue one
// event more as it stops: the next subscription would take the old one's offers, void since
// (MESOS.md §2.3), and launch on them — tasks written ahead and dropped by Mesos, their runs
// lost. What the reader queued is drained (updates recorded while the term lasts; after it,
// left unacknowledged for Mesos to send again to the next leader), and the queue is then a new
// one: a reader that has not stopped within readerGrace (a body whose Close does not end the
// read) writes into the old queue, which nothing reads.
func (ld *leader) endSession(ctx context.Context, endStream func(), readerDone <-chan struct{}) {
	endStream()
	select {
	case <-readerDone:
	case <-time.After(readerGrace):
		ld.log.Warn("the Mesos stream's reader did not stop; what it still reads is dropped")
	}
	if ctx.Err() == nil {
		ld.drain(ctx)
	}
	ld.events = make(chan scheduler.Event, cap(ld.events))
}

// readerGrace bounds endSession's wait for a stream's reader, which stops as soon as its body
// is closed.
const readerGrace = time.Second

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-time.After(d):
	case <-ctx.Done():
	}
}

// subscribed persists a new FrameworkID and starts reconciliation (SPEC §5.2, §5.8).
func (ld *leader) subscribed(ctx context.Context, sub *subscription, knownID string) error {
	if sub.frameworkID != knownID {
		if err := ld.store.SaveFrameworkID(ctx, sub.frameworkID); err != nil {
			return err
		}
	}
	ld.sub = sub
	// Reads of runs' ends started for the last subscription were given up with its stream.
	clear(ld.checking)
	if sub.master != "" {
		ld.master.Store(&sub.master)
	}
	ld.suppressed = false
	ld.everSubbed = true
	ld.inst.setSubscribed(true)
	ld.log.WithField("framework_id", sub.frameworkID).Info("subscribed to Mesos")
	ld.pruneExecutors(ctx)
	ld.sweepOrphans(ctx)
	ld.ensureDaemons(ctx)
	ld.resumeReplacements(ctx)
	ld.reconcile(ctx)
	return nil
}

// serve handles events and work until the stream ends.
func (ld *leader) serve(ctx context.Context, streamErr <-chan error) error {
	defer ld.serving()()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case err := <-streamErr:
			ld.drain(ctx)
			return err
		case ev := <-ld.events:
			ld.handleQueued(ctx, ev)
		case f := <-ld.exec:
			f(ctx)
		case <-ld.work:
			ld.replaceQueued(ctx)
			// New work REVIVEs even when not suppressed (SPEC §5.4 step 6): REVIVE also clears
			// the refusal filters of the last declines, so that every agent is offered to the
			// new work at once — SPREAD needs them all — instead of after the filters expire.
			ld.log.WithField("suppressed", ld.suppressed).Debug("work appeared; reviving")
			ld.revive(ctx, time.Now())
		case <-ld.due:
			ld.wakeForWork(ctx)
		case <-tick.C:
			if ld.daemonsOwed.Swap(false) {
				ld.ensureDaemons(ctx)
			}
			ld.replaceQueued(ctx)
			ld.timeUnreachable(ctx)
			ld.checkStale(ctx)
			if ld.reconOwed {
				ld.reconcileExplicit(ctx)
			}
			ld.retryReconcile(ctx, time.Now())
			ld.wakeForWork(ctx)
			ld.reviveForUnplaced(ctx, time.Now())
			if ld.cfg.ReconcileInterval > 0 && time.Since(ld.lastRecon) >= ld.cfg.ReconcileInterval {
				ld.reconcile(ctx)
				ld.sweepOrphans(ctx)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// drain handles the events read before the stream ended, so no update is dropped unrecorded.
// Offers are dropped: Mesos rescinded them when the stream ended (MESOS.md §2.4), and a launch
// on them would be recorded running, refused, and its shard's run failed as a lost task.
func (ld *leader) drain(ctx context.Context) {
	for {
		select {
		case ev := <-ld.events:
			if ev.Type == scheduler.Event_OFFERS {
				ld.log.WithField("offers", len(ev.Offers.GetOffers())).Debug("offers of an ended subscription dropped")
				continue
			}
			ld.handle(ctx, ev)
		default:
			return
		}
	}
}

// handleQueued handles ev and, if it is a status update, the updates queued right behind it
// as one group commit: updates that arrived while the last multi was in flight are written
// together. Events keep their order.
func (ld *leader) handleQueued(ctx context.Context, ev scheduler.Event) {
	if ev.Type != scheduler.Event_UPDATE {
		ld.handle(ctx, ev)
		return
	}
	batch := []mesos.TaskStatus{ev.Update.Status}
	for {
		select {
		case next := <-ld.events:
			if next.Type == scheduler.Event_UPDATE {
				batch = append(batch, next.Update.Status)
				continue
			}
			ld.updates(ctx, batch)
			ld.handle(ctx, next)
		default:
			ld.updates(ctx, batch)
		}
		return
	}
}

func (ld *leader) handle(ctx context.Context, ev scheduler.Event) {
	switch ev.Type {
	case scheduler.Event_OFFERS:
		ld.cycle(ctx, ev.Offers.Offers)
	case scheduler.Event_UPDATE:
		ld.update(ctx, ev.Update.Status)
	case scheduler.Event_FAILURE:
		if f := ev.Failure; f.ExecutorID != nil {
			ld.forgetExecutors(ctx, f.ExecutorID.Value) // it must start afresh, perhaps with a newer app
		}
	case scheduler.Event_RESCIND, scheduler.Event_HEARTBEAT, scheduler.Event_MESSAGE:
	}
}

// acknowledge sends an ACKNOWLEDGE through the subscription's acknowledger, off the event
// loop; a leader without one (a test's) calls Mesos at once.
func (ld *leader) acknowledge(ctx context.Context, c *scheduler.Call) { ld.callOffLoop(ctx, c) }

// callOffLoop sends a call whose answer the loop does not wait for (ACKNOWLEDGE, a lease's
// MESSAGE) through the acknowledger's senders.
func (ld *leader) callOffLoop(ctx context.Context, c *scheduler.Call) {
	if ld.acks == nil {
		ld.call(ctx, c)
		return
	}
	ld.acks.send(ctx, c)
}

// call makes a Mesos call, logs its failure and returns it: most callers need not look, as
// reconciliation settles what a lost call leaves undone.
func (ld *leader) call(ctx context.Context, c *scheduler.Call) error {
	if ld.sub == nil {
		return nil
	}
	err := ld.sub.call(ctx, c)
	if errors.Is(err, errStreamEnded) {
		// The next subscription reconciles; the stream's end was logged.
		ld.log.WithError(err).WithField("call", c.Type.String()).Debug("Mesos call given up")
	} else if err != nil {
		ld.log.WithError(err).WithField("call", c.Type.String()).Warn("Mesos call failed")
	}
	return err
}

// loadJobs schedules every job's cron in the producer.
func (ld *leader) loadJobs(ctx context.Context) error {
	jobs, err := ld.store.Jobs(ctx)
	if err != nil {
		return err
	}
	scheduled := 0
	for _, j := range jobs {
		if err := ld.prod.Put(ctx, j); err != nil {
			ld.log.WithError(err).WithField("job", j.JobName).Warn("job not scheduled")
			continue
		}
		scheduled++
	}
	// Encode every job for the API now, once, rather than in the first GET /api/job/jobs after
	// a takeover (150 ms for 10,000 jobs).
	if _, err := ld.store.JobsJSON(ctx); err != nil {
		ld.log.WithError(err).Debug("jobs not encoded ahead")
	}
	ld.log.WithFields(logrus.Fields{"jobs": len(jobs), "scheduled": scheduled}).Info("jobs loaded")
	return nil
}

// ensureDaemons queues every DAEMON job that is neither running, nor waiting for a relaunch,
// nor pending (SPEC §5.3). Nothing else would queue them: on a failure it says so, and the next
// tick of the event loop tries again.
func (ld *leader) ensureDaemons(ctx context.Context) {
	if err := ld.queueDaemons(ctx); err != nil {
		if ctx.Err() == nil {
			ld.log.WithError(err).Warn("cannot queue the DAEMON jobs that do not run; trying again in a second")
		}
		ld.daemonsOwed.Store(true)
	}
}

func (ld *leader) queueDaemons(ctx context.Context) error {
	jobs, err := ld.store.Jobs(ctx)
	if err != nil {
		return fmt.Errorf("read the jobs: %w", err)
	}
	running, err := ld.store.Running(ctx)
	if err != nil {
		return fmt.Errorf("read the running tasks: %w", err)
	}
	// A shard waiting for its relaunch is the daemon's, too: the relaunch runs it, and a ready
	// entry beside it would stay queued behind it, shown pending for good.
	failovers, err := ld.store.Failovers(ctx)
	if err != nil {
		return fmt.Errorf("read the failover queue: %w", err)
	}
	busy := map[string]bool{}
	for _, r := range running {
		busy[r.Meta.JobName] = true
	}
	for _, f := range failovers {
		busy[f.Meta.JobName] = true
	}
	for _, j := range jobs {
		if j.JobExecutionType != config.Daemon || busy[j.JobName] {
			continue
		}
		if off, err := ld.store.JobOrAppDisabled(ctx, j); err != nil {
			return fmt.Errorf("read whether %q is disabled: %w", j.JobName, err)
		} else if off {
			continue
		}
		r, err := ld.store.ReadyOf(ctx, j.JobName)
		if err != nil {
			return fmt.Errorf("read the ready entry of %q: %w", j.JobName, err)
		}
		if r.Count > 0 {
			continue
		}
		if err := ld.store.AddReady(ctx, j.JobName, false); err != nil {
			return fmt.Errorf("queue DAEMON job %q: %w", j.JobName, err)
		}
		ld.poke()
	}
	return nil
}

func (s *instance) setLeaderState(ld *leader, apiHandler http.Handler) {
	s.mu.Lock()
	s.ld, s.api = ld, apiHandler
	s.mu.Unlock()
}

func (s *instance) setSubscribed(v bool) {
	s.mu.Lock()
	s.subscribed = v
	s.mu.Unlock()
}

// JobChanged tells the leader that a job was registered, updated or deleted, so that its cron
// is (re)scheduled and a DAEMON job is queued. On a standby it does nothing: the leader reads
// every job when it takes over.
func (s *instance) JobChanged(ctx context.Context, name string) {
	s.mu.Lock()
	ld := s.ld
	s.mu.Unlock()
	if ld != nil {
		ld.jobChanged(ctx, name)
	}
}

func (ld *leader) jobChanged(ctx context.Context, name string) {
	j, err := ld.store.Job(ctx, name)
	switch {
	case errors.Is(err, state.ErrNotFound):
		ld.prod.Remove(name)
	case err != nil:
		ld.log.WithError(err).WithField("job", name).Warn("cannot read a changed job")
	default:
		if err := ld.prod.Put(ctx, j); err != nil {
			ld.log.WithError(err).WithField("job", name).Warn("job not scheduled")
		}
		if j.JobExecutionType == config.Daemon {
			ld.ensureDaemons(ctx)
		}
	}
	ld.poke()
}
