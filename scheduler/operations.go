package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"
	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/api"
	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/taskid"
)

// ErrNotLeader is returned by operations asked of an instance that does not lead.
var ErrNotLeader = fmt.Errorf("%w: this scheduler instance is not the leader", api.ErrUnavailable)

// The operations of SPEC §5.9, for the REST API. Each writes ZooKeeper first (through the
// leader's fenced store) and then has the leader's event loop make the Mesos calls.

func (s *instance) leaderState() (*leader, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ld == nil {
		return nil, ErrNotLeader
	}
	return s.ld, nil
}

// errNotServing: the event loop serves no subscription now. f waits in its queue for the next
// subscription of this leadership, if there is room.
var errNotServing = fmt.Errorf("the event loop serves no subscription: %w", api.ErrNoSubscription)

// serving marks the event loop as serving a subscription until the returned func is called.
func (ld *leader) serving() (stop func()) {
	ld.servedMu.Lock()
	defer ld.servedMu.Unlock()
	c := make(chan struct{})
	ld.served = c
	return func() {
		ld.servedMu.Lock()
		defer ld.servedMu.Unlock()
		close(c)
		ld.served = nil
	}
}

// onLoop runs f on the leader's event loop, which owns the Mesos subscription, and waits for
// it while the loop serves one. Between subscriptions (Mesos out of reach, a master failing
// over) it does not wait: f stays queued for the next subscription, if there is room, and
// onLoop returns errNotServing for the caller to say what that means for its request.
func (ld *leader) onLoop(ctx context.Context, f func(context.Context)) error {
	served := ld.servedNow()
	done := make(chan struct{})
	run := func(c context.Context) { f(c); close(done) }
	if served == nil {
		select {
		case ld.exec <- run:
		default:
		}
		return errNotServing
	}
	select {
	case ld.exec <- run:
	case <-served:
		return errNotServing
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-served:
		return errNotServing
	case <-ctx.Done():
		return ctx.Err()
	}
}

// killJobs kills the running tasks of the jobs; their KILLED updates end them in the state.
//
// afterCycle reads the running queue on the event loop, after any offer cycle under way: for
// a disable, which the launch's write-ahead does not check, a cycle that read the queues
// before the marker and launches after it has its tasks in the queue by then (one that
// begins after it sees the marker). Read before, such a task would run until it reported
// RUNNING. An update or a delete changes the job's config node, which the write-ahead does
// check: a launch of the old config after it is refused, and the queue is read at once, as
// a task a cycle launches after the read runs the new config and must not be killed.
func (ld *leader) killJobs(ctx context.Context, afterCycle bool, jobs ...string) error {
	var ids []taskid.ID
	read := func(ctx context.Context) error {
		for _, job := range jobs {
			running, err := ld.store.RunningOf(ctx, job)
			if err != nil {
				return err
			}
			for _, r := range running {
				if id, err := taskid.Parse(r.TaskID); err == nil {
					ids = append(ids, id)
				}
			}
		}
		return nil
	}
	if !afterCycle {
		if err := read(ctx); err != nil || len(ids) == 0 {
			return err
		}
	}
	var readErr error
	err := ld.onLoop(ctx, func(ctx context.Context) {
		if afterCycle {
			if readErr = read(ctx); readErr != nil {
				return
			}
		}
		for _, id := range ids {
			ld.kill(ctx, id.String(), id.AgentID)
		}
		if len(ids) > 0 {
			ld.log.WithFields(logrus.Fields{"jobs": jobs, "tasks": len(ids)}).Info("killed running tasks")
		}
	})
	if errors.Is(err, errNotServing) {
		// The change is in ZooKeeper: the kills wait for the next subscription, whose
		// reconciliation also kills every running task of a deleted or disabled job
		// (plan.Decide), should this leader end first.
		ld.log.WithField("jobs", jobs).Info("not subscribed to Mesos: running tasks of the jobs are killed once it is")
		return nil
	}
	if err != nil {
		return err
	}
	return readErr
}

// servedNow is closed when the loop's subscription ends; nil while the loop serves none.
func (ld *leader) servedNow() <-chan struct{} {
	ld.servedMu.Lock()
	defer ld.servedMu.Unlock()
	return ld.served
}

// needsMesos refuses, before any change, an operation whose Mesos calls nothing would make
// later: while the loop serves no subscription, it answers errNotServing.
func (ld *leader) needsMesos() error {
	if ld.servedNow() == nil {
		return errNotServing
	}
	return nil
}

// DisableJob marks the job disabled, drops its pending run and kills its running tasks.
func (s *instance) DisableJob(ctx context.Context, job string) error {
	ld, err := s.leaderState()
	if err != nil {
		return err
	}
	if err := ld.store.DisableJob(ctx, job); err != nil {
		return err
	}
	return ld.killJobs(ctx, true, job)
}

// EnableJob removes the marker and the stop, and reschedules the job. Enabling a job that is
// not disabled is how an operator says "try again" to a stopped job without changing it.
func (s *instance) EnableJob(ctx context.Context, job string) error {
	ld, err := s.leaderState()
	if err != nil {
		return err
	}
	cleared, err := ld.store.EnableJob(ctx, job)
	if err != nil {
		return err
	}
	ld.stopCleared(job, "job enable", cleared)
	s.JobChanged(ctx, job)
	return nil
}

// DisableApp marks the app disabled and disables the effect of each of its jobs.
func (s *instance) DisableApp(ctx context.Context, app string) error {
	ld, err := s.leaderState()
	if err != nil {
		return err
	}
	if err := ld.store.DisableApp(ctx, app); err != nil {
		return err
	}
	jobs, err := ld.jobsOf(ctx, app)
	if err != nil {
		return err
	}
	return ld.killJobs(ctx, true, jobs...)
}

// EnableApp removes the app's marker and its jobs' stops, and reschedules its jobs.
func (s *instance) EnableApp(ctx context.Context, app string) error {
	ld, err := s.leaderState()
	if err != nil {
		return err
	}
	cleared, err := ld.store.EnableApp(ctx, app)
	if err != nil {
		return err
	}
	jobs, err := ld.jobsOf(ctx, app)
	if err != nil {
		return err
	}
	for _, j := range jobs {
		ld.stopCleared(j, "app enable", slices.Contains(cleared, j))
		s.JobChanged(ctx, j)
	}
	return nil
}

func (ld *leader) jobsOf(ctx context.Context, app string) ([]string, error) {
	all, err := ld.store.Jobs(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, j := range all {
		if j.AppName == app {
			out = append(out, j.JobName)
		}
	}
	return out, nil
}

// UpdateJob replaces a job's config and clears its stop. Running tasks are killed (and the
// job rescheduled) only when what a task is made of changed (SPEC §3.2); a cron or zone change
// only reschedules.
func (s *instance) UpdateJob(ctx context.Context, j config.Job) error {
	ld, err := s.leaderState()
	if err != nil {
		return err
	}
	var prev config.Job
	cur, err := ld.store.Job(ctx, j.JobName)
	if err != nil {
		return err
	}
	if cur.RestartsTasks(j) {
		// The running tasks must be killed for the new config to take effect, and nothing
		// but this request would kill them: refused, unchanged, while Mesos is out of reach.
		if running, err := ld.store.RunningOf(ctx, j.JobName); err != nil {
			return err
		} else if len(running) > 0 {
			if err := ld.needsMesos(); err != nil {
				return fmt.Errorf("update job %q, whose running tasks must be restarted: %w", j.JobName, err)
			}
		}
	}
	// The update clears the stop mark in its own multi; read here for the leader's side.
	_, wasStopped, err := ld.store.Stopped(ctx, j.JobName)
	if err != nil {
		return err
	}
	oldCron, oldZone := cur.FiredCron()
	if newCron, newZone := j.FiredCron(); newCron != oldCron || newZone != oldZone {
		// A new cron or zone: written with the config, after the old cron's slots up to the
		// change (issue 19), so that a leader taking over at any point loses none of either.
		err = ld.prod.Change(ctx, j, func(from time.Time) (err error) {
			prev, err = ld.store.UpdateJobFrom(ctx, j, from)
			return err
		})
	} else {
		prev, err = ld.store.UpdateJob(ctx, j)
	}
	if err != nil {
		return err
	}
	ld.stopCleared(j.JobName, "job update", wasStopped)
	if prev.RestartsTasks(j) {
		if err := ld.killJobs(ctx, false, j.JobName); err != nil {
			return err
		}
	}
	s.JobChanged(ctx, j.JobName)
	return nil
}

// DeleteJob kills the job's tasks and removes its config, queue entries and marker.
func (s *instance) DeleteJob(ctx context.Context, job string) error {
	ld, err := s.leaderState()
	if err != nil {
		return err
	}
	if err := ld.store.DeleteJob(ctx, job); err != nil {
		return err
	}
	ld.prod.Remove(job)
	ld.relaunch.forgetJob(job)
	return ld.killJobs(ctx, false, job)
}

// DeleteApp deletes the app and all its jobs, kills their tasks, and tells the app's live
// executors to stop (MESSAGE STOP).
func (s *instance) DeleteApp(ctx context.Context, app string) error {
	ld, err := s.leaderState()
	if err != nil {
		return err
	}
	// Its executors are told to stop through Mesos, and nothing else would stop them later.
	if err := ld.needsMesos(); err != nil {
		return fmt.Errorf("delete app %q: %w", app, err)
	}
	jobs, err := ld.store.DeleteApp(ctx, app)
	if err != nil {
		return err
	}
	for _, j := range jobs {
		ld.prod.Remove(j)
		ld.relaunch.forgetJob(j)
	}
	if err := ld.killJobs(ctx, false, jobs...); err != nil {
		return err
	}
	live, err := ld.masterExecutors(ctx)
	if err != nil {
		ld.log.WithError(err).Warn("cannot read the master's executors; stopping only those this leader launched")
	}
	err = ld.onLoop(ctx, func(ctx context.Context) {
		for id := range ld.executors {
			live[id] = true
		}
		var stop []string
		for id := range live {
			if ex, err := taskid.ParseExecutor(id); err == nil && ex.AppName == app {
				stop = append(stop, id)
			}
		}
		ld.stopExecutors(ctx, stop)
	})
	if errors.Is(err, errNotServing) {
		ld.log.WithField("app", app).Warn("the subscription ended: the app's executors are told to stop on the next one")
		return nil
	}
	return err
}

// masterState is what the scheduler reads of the master's /master/state.
type masterState struct {
	Frameworks []struct {
		ID        string `json:"id"`
		Executors []struct {
			ExecutorID string `json:"executor_id"`
			SlaveID    string `json:"slave_id"`
		} `json:"executors"`
		Tasks []struct {
			ExecutorID string `json:"executor_id"`
			SlaveID    string `json:"slave_id"`
		} `json:"tasks"` // the master lists terminal tasks under completed_tasks
	} `json:"frameworks"`
	Slaves []struct {
		ID       string `json:"id"`
		Hostname string `json:"hostname"`
		PID      string `json:"pid"` // slave(1)@ip:port: where the agent serves its /state
		Active   bool   `json:"active"`
		// Scalars as numbers, ranges ("ports") as strings: only the scalars are read.
		Resources        map[string]any `json:"resources"`
		UsedResources    map[string]any `json:"used_resources"`
		OfferedResources map[string]any `json:"offered_resources"`
	} `json:"slaves"`
	// RecoveredSlaves are the agents a master that took over knows from its registry only, until
	// they register again with it.
	RecoveredSlaves []struct {
		ID string `json:"id"`
	} `json:"recovered_slaves"`
}

// executorsOf is the set of the executors doc lists for framework fwID.
func (doc masterState) executorsOf(fwID string) map[string]bool {
	out := map[string]bool{}
	for _, f := range doc.Frameworks {
		if f.ID == fwID {
			for _, e := range f.Executors {
				out[e.ExecutorID] = true
			}
		}
	}
	return out
}

// mesosReader reads the master this leader subscribed at, and its agents.
func (ld *leader) mesosReader() mesosReader {
	var master string
	if m := ld.master.Load(); m != nil {
		master = *m
	}
	return ld.cfg.mesosReader(master)
}

func (ld *leader) masterState(ctx context.Context) (masterState, error) {
	var doc masterState
	var master string
	if m := ld.master.Load(); m != nil {
		master = *m
	} else if urls := ld.cfg.MesosURLs(); len(urls) > 0 {
		master = urls[0]
	} else {
		return doc, errors.New("read the master's state: not subscribed to a master yet")
	}
	resp, err := ld.cfg.mesosReader(master).get(ctx, strings.TrimSuffix(master, "/")+"/master/state")
	if err != nil {
		return doc, fmt.Errorf("read the master's state: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return doc, fmt.Errorf("read the master's state: %s answered %s", master, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&doc); err != nil {
		return doc, fmt.Errorf("decode /master/state: %w", err)
	}
	return doc, nil
}

// masterExecutors lists this framework's executors from the master's /master/state: the
// executors a previous leader launched are known only there.
func (ld *leader) masterExecutors(ctx context.Context) (map[string]bool, error) {
	fwID, err := ld.store.FrameworkID(ctx)
	if err != nil {
		return map[string]bool{}, err
	}
	doc, err := ld.masterState(ctx)
	if err != nil {
		return map[string]bool{}, err
	}
	return doc.executorsOf(fwID), nil
}

// Reconcile runs one explicit or implicit reconciliation (POST /api/operate/reconcile/…).
func (s *instance) Reconcile(ctx context.Context, explicit bool) error {
	ld, err := s.leaderState()
	if err != nil {
		return err
	}
	return ld.onLoop(ctx, func(ctx context.Context) {
		if explicit {
			ld.reconcileExplicit(ctx)
		} else {
			ld.call(ctx, calls.Reconcile())
		}
	})
}

// Sandboxes lists where the app's executors keep their files (GET /api/operate/sandbox).
func (s *instance) Sandboxes(ctx context.Context, app string) ([]api.Sandbox, error) {
	ld, err := s.leaderState()
	if err != nil {
		return nil, err
	}
	fwID, err := ld.store.FrameworkID(ctx)
	if errors.Is(err, state.ErrNotFound) {
		// Never subscribed: no executor of this framework can exist yet. The API answers 404
		// for an unknown app only, before it asks here.
		return []api.Sandbox{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the FrameworkID: %w", err)
	}
	doc, err := ld.masterState(ctx)
	if err != nil {
		return nil, &api.MesosError{Which: "the Mesos master", Err: err}
	}
	return sandboxes(ctx, ld.mesosReader(), doc, fwID, app)
}

// Trigger clears the job's stop, adds one run of a TRANSIENT job, like a misfire-enabled fire
// (SPEC §5.3), and wakes the leader at once.
func (s *instance) Trigger(ctx context.Context, job string) error {
	ld, err := s.leaderState()
	if err != nil {
		return err
	}
	j, err := ld.store.Job(ctx, job)
	if err != nil {
		return err
	}
	if j.JobExecutionType == config.Daemon {
		return fmt.Errorf("job %q is a DAEMON job: it cannot be triggered", job)
	}
	// A fire of a disabled job does nothing (SPEC §5.3), and disabling drops the ready entry
	// (§5.9): a queued trigger would run the job the moment it is enabled, long after it was
	// asked for. The operator is told instead.
	if off, err := ld.store.JobOrAppDisabled(ctx, j); err != nil {
		return err
	} else if off {
		return fmt.Errorf("%w: job %q or its app %q is disabled: enable it first", api.ErrConflictingState, job, j.AppName)
	}
	// Recorded in the fire ledger like a cron fire, so that the run's task ids show there and a
	// later launch is matched to the right slot; the ledger's last slot does not move. A full
	// ready queue refuses it, and the operator is told (§4).
	// A disable written since the check above fails the write (App).
	// The job's stop mark goes in the same write: a refused trigger keeps it, and a trigger
	// whose answer the client lost (and sends again) cannot have queued a run and failed.
	_, stopped, err := ld.store.Stopped(ctx, job)
	if err != nil {
		return err
	}
	now := time.Now()
	if _, err := ld.store.RecordFires(ctx, job, state.Fires{Accumulate: true, Refuse: true, App: j.AppName, ClearStop: true, Entries: []state.FireEntry{{
		Slot: now, Count: 1, Outcome: state.OutcomeFired, Triggered: true, Reason: "triggered through the API"}}}); errors.Is(err, state.ErrDisabled) {
		return fmt.Errorf("%w: job %q or its app %q was disabled: enable it first", api.ErrConflictingState, job, j.AppName)
	} else if err != nil {
		return err
	}
	ld.stopCleared(job, "job trigger", stopped)
	if j.ConcurrencyPolicy == config.Replace {
		ld.replacing.add(job)
	}
	ld.poke()
	return nil
}

// Idle reports whether a DAEMON task is between runs (its last heartbeat was COMPLETE).
func (s *instance) Idle(taskID string) bool {
	s.mu.Lock()
	ld := s.ld
	s.mu.Unlock()
	if ld == nil {
		return false
	}
	ld.mu.Lock()
	defer ld.mu.Unlock()
	return ld.idle[taskID]
}
