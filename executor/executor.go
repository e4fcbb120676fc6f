// Package executor is ejcloud's Mesos executor (SPEC §6): it subscribes to the agent's v1
// executor API, runs each launched shard (SCRIPT jobs as processes, SIMPLE and DATAFLOW jobs
// through the SDK in executor/job), and reports their states. The stock binary is
// cmd/ejcloud-executor; users who write Go jobs build their own with Main.
//
//	agent ──LAUNCH──▶ decode payload ──▶ RUNNING ──▶ run shard ──▶ FINISHED | FAILED (jobFailed) | ERROR
//	      ──KILL────▶ cancel: SIGTERM to the script's process group, SIGKILL after the grace ──▶ KILLED
//	      ◀─UPDATE── retried until ACKNOWLEDGED; re-sent in SUBSCRIBE after the agent restarts
//
// Status updates are delivered as Mesos's own executor libraries deliver them (the libprocess
// executor driver, mesos-go's executor): every update is kept until the agent ACKNOWLEDGES it;
// while subscribed, an update the agent refused or could not take (503 "Agent has not finished
// recovery" during an agent's recovery, a connection error) is retried with backoff, 250 ms
// doubling to 5 s, by a goroutine of the executor, each task's updates in order; a lost
// subscription is re-subscribed with every unacknowledged update and task. So an executor
// never sits on an update it is not trying to deliver.
//
// A script runs under a small supervisor process (this binary re-executed, see internal/supervise)
// that kills the script's processes when the task is killed or ends, and when the executor
// itself dies, however it dies: a shard's processes never outlive its task.
//
// A transient run's end is recorded in the sandbox (package taskend) the moment it ends, by the
// script's supervisor or, for a Go job, when the job returns, and removed once the agent has
// the task's final update: a scheduler that hears from the agent of this executor's death
// reads it there, and does not run again a shard whose run had ended.
//
// With a scheduler's --task-lease, the executor also kills its tasks when no word of the
// scheduler (a LAUNCH, a MESSAGE LEASE) reached it for a whole lease: its agent is then cut
// off from the master, and the tasks may be relaunched elsewhere (lease.go).
package executor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/encoding/codecs"
	mesosexec "github.com/mesos/mesos-go/api/v1/lib/executor"
	"github.com/mesos/mesos-go/api/v1/lib/executor/calls"
	"github.com/mesos/mesos-go/api/v1/lib/httpcli"
	"github.com/mesos/mesos-go/api/v1/lib/httpcli/httpexec"
	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/taskdata"
	"github.com/ejcloud/ejcloud/taskend"
)

// StopMessage is the framework MESSAGE that tells the executor to kill its tasks and exit
// (sent when the app is deleted, SPEC §5.9).
const StopMessage = "STOP"

// defaultKillGrace is the grace between SIGTERM and SIGKILL when the task sets none.
const defaultKillGrace = 3 * time.Second

// Executor is one executor process.
type Executor struct {
	cfg        Config
	log        logrus.FieldLogger
	hostname   string
	ip         string
	sender     calls.Sender // UPDATE and MESSAGE
	subscriber calls.Sender // SUBSCRIBE, on a connection of its own

	mu           sync.Mutex // guards the fields below
	tasks        map[string]*task
	out          outbox                    // updates until ACKNOWLEDGED
	unackedTasks map[string]mesos.TaskInfo // launched, no update acknowledged yet
	connected    bool                      // subscribed: updates may be sent
	epoch        int                       // SUBSCRIBEDs so far
	inFlight     int                       // UPDATE calls under way (at most maxInFlight)
	sampling     int
	stopping     bool
	stopOnce     sync.Once     // stopAll's work is done once: a second call would wait out a new grace
	leaseTerm    time.Duration // 0: no lease (lease.go)
	leaseGen     int           // renewals so far: a timer set before the latest one is stale
	leaseTimer   *time.Timer
	endsDir      bool // the sandbox has the folder of the runs' end records (taskend)

	kick     chan struct{}  // wakes the delivery goroutine: an update, a subscription
	progress chan struct{}  // the delivery goroutine had an answer from the agent
	running  sync.WaitGroup // task goroutines
}

// New returns an executor for cfg.
func New(cfg Config, log logrus.FieldLogger) *Executor { return newExecutor(cfg, log) }

// newExecutor is New. A test's transport options are applied before the executor's own, so
// that what the executor sets overrides them, as it must override mesos-go's defaults.
func newExecutor(cfg Config, log logrus.FieldLogger, transport ...httpcli.ConfigOpt) *Executor {
	u := url.URL{Scheme: "http", Host: cfg.AgentEndpoint, Path: "/api/v1/executor"}
	// The agent is called directly (MESOS.md §6.1: libprocess knows no proxy). mesos-go's
	// transport takes HTTP_PROXY from the environment, which would hand every call, and the
	// executor's bearer token with it, to a proxy that the agent's environment happens to name.
	direct := httpcli.Transport(func(t *http.Transport) { t.Proxy = nil })
	do := httpcli.With(append(transport, httpcli.Timeout(10*time.Second), direct)...)
	opts := []httpcli.Opt{httpcli.Endpoint(u.String()), httpcli.Codec(codecs.ByMediaType[codecs.MediaTypeJSON]), httpcli.Do(do)}
	if cfg.AuthToken != "" {
		opts = append(opts, httpcli.DefaultHeader("Authorization", "Bearer "+cfg.AuthToken))
	}
	cli := httpcli.New(opts...)
	callOpts := mesosexec.CallOptions{calls.Framework(cfg.FrameworkID), calls.Executor(cfg.ExecutorID)}
	host, _ := os.Hostname()
	ip, _, err := net.SplitHostPort(cfg.AgentEndpoint)
	if err != nil {
		ip = cfg.AgentEndpoint
	}
	return &Executor{
		cfg: cfg, log: log, hostname: host, ip: ip,
		sender:       calls.SenderWith(httpexec.NewSender(cli.Send), callOpts...),
		subscriber:   calls.SenderWith(httpexec.NewSender(cli.Send, httpcli.Close(true)), callOpts...),
		tasks:        map[string]*task{},
		unackedTasks: map[string]mesos.TaskInfo{},
		kick:         make(chan struct{}, 1),
		progress:     make(chan struct{}, 1),
	}
}

// Run subscribes and serves the agent until SHUTDOWN, MESSAGE STOP or ctx ends (then it kills
// its tasks and returns nil), or until the agent has been unreachable for longer than the
// recovery timeout (an error). A framework that does not checkpoint gives up at the first
// disconnection, as Mesos expects.
func (e *Executor) Run(ctx context.Context) error {
	if e.cfg.Sandbox != "" {
		if err := os.MkdirAll(filepath.Join(e.cfg.Sandbox, taskend.Dir), 0o755); err != nil {
			e.log.WithError(err).Warn("no folder for the runs' end records: a run that ends just before this executor dies will be failed over")
		} else {
			e.endsDir = true
		}
	}
	// The delivery goroutine outlives ctx: the tasks' last updates go out after SIGTERM, while
	// stopAll waits for them.
	dctx, stopDelivery := context.WithCancel(context.Background())
	var delivery sync.WaitGroup
	delivery.Add(1)
	go func() {
		defer delivery.Done()
		e.deliver(dctx)
	}()
	defer func() {
		stopDelivery()
		delivery.Wait()
	}()
	var lostAt time.Time
	for {
		subscribed, err := e.subscribe(ctx)
		if e.isStopping() || ctx.Err() != nil {
			e.stopAll()
			return nil
		}
		e.setConnected(false)
		// An ERROR event comes from an agent that is there: the executor re-subscribes to it
		// (MESOS.md §6.4), checkpointing or not, and no recovery timeout applies to an agent
		// that just answered (without checkpointing there is none: MESOS_RECOVERY_TIMEOUT
		// is not set).
		agentError := errors.Is(err, errAgentError)
		if !e.cfg.Checkpoint && !agentError {
			e.stopAll()
			return fmt.Errorf("lost the agent connection (%v) and the framework does not checkpoint", err)
		}
		// The recovery timeout counts from the last time the agent answered (the end of a
		// subscription it took, an ERROR it sent), not from an older loss that it ended.
		if subscribed || agentError || lostAt.IsZero() {
			lostAt = time.Now()
		}
		if !agentError && time.Since(lostAt) > e.cfg.RecoveryTimeout {
			e.stopAll()
			return fmt.Errorf("agent at %s unreachable for longer than the recovery timeout %v: %v", e.cfg.AgentEndpoint, e.cfg.RecoveryTimeout, err)
		}
		e.log.WithError(err).Warn("agent connection lost; re-subscribing")
		backoffMax := e.cfg.SubscriptionBackoffMax
		if !e.cfg.Checkpoint {
			// Only an ERROR brings an executor that does not checkpoint here, and the agent
			// gave it no maximum: take the one an agent gives by default.
			backoffMax = defaultSubscriptionBackoffMax
		}
		select {
		case <-time.After(resubscribeWait(backoffMax)):
		case <-ctx.Done():
		}
	}
}

// defaultSubscriptionBackoffMax is an agent's default MESOS_SUBSCRIPTION_BACKOFF_MAX (its
// --executor_reregistration_timeout).
const defaultSubscriptionBackoffMax = 2 * time.Second

// resubscribeWait is the wait before the next SUBSCRIBE: random in [0, backoffMax], as in
// Mesos's executor library (executor.cpp, backoff), so that the executors of a restarted
// agent do not all call it at once. It is also at most a second: the agent gives executors
// that same duration to re-subscribe once it is back (2 s by default), and waits of at most a
// second put two tries at least in the window, so that one lost try (a 503 while the agent
// still recovers) does not use it up. A shorter wait is still within the maximum.
func resubscribeWait(backoffMax time.Duration) time.Duration {
	return rand.N(min(max(backoffMax, 0), time.Second) + 1)
}

// errAgentError is the agent's ERROR event: subscribe ends, and the executor subscribes again.
var errAgentError = errors.New("agent reported an error")

// subscribe sends SUBSCRIBE, carrying every unacknowledged update and task, and handles
// events until the stream ends. It reports whether SUBSCRIBED came, and returns nil when the
// stream ended after it (an ERROR event is an error either way).
func (e *Executor) subscribe(ctx context.Context) (subscribed bool, err error) {
	e.mu.Lock()
	updates := e.out.all()
	tasks := make([]mesos.TaskInfo, 0, len(e.unackedTasks))
	for _, t := range e.unackedTasks {
		tasks = append(tasks, t)
	}
	e.mu.Unlock()
	if len(updates) > 0 || len(tasks) > 0 {
		e.log.WithFields(logrus.Fields{"updates": len(updates), "tasks": len(tasks)}).Info("subscribing with unacknowledged updates and tasks")
	}
	resp, err := e.subscriber.Send(ctx, calls.NonStreaming(calls.Subscribe(tasks, updates)))
	if err != nil {
		return false, fmt.Errorf("subscribe to %s: %w", e.cfg.AgentEndpoint, err)
	}
	defer resp.Close()
	stop := context.AfterFunc(ctx, func() { resp.Close() })
	defer stop()
	for {
		var ev mesosexec.Event
		if err := resp.Decode(&ev); err != nil {
			if subscribed {
				return true, nil
			}
			return false, fmt.Errorf("event stream: %w", err)
		}
		// An event may lack its member (the JSON decoder does not enforce proto2's required
		// fields): one that cannot be acted on without it is skipped, and the executor goes on
		// serving its other tasks.
		switch ev.Type {
		case mesosexec.Event_SUBSCRIBED:
			// The type alone says the agent took the subscription: skipping it would leave
			// every update of this stream undelivered.
			if ev.Subscribed == nil {
				e.malformed(ev, "no subscribed member; subscribed without the executor's data")
			}
			subscribed = true
			e.subscribed(ev.GetSubscribed(), updates)
		case mesosexec.Event_LAUNCH:
			if ev.Launch == nil || ev.Launch.Task.TaskID.Value == "" {
				e.malformed(ev, "no task, or a task without a task_id")
				continue
			}
			e.launched(ev.Launch.Task)
			e.launch(ev.Launch.Task)
		case mesosexec.Event_LAUNCH_GROUP:
			if ev.LaunchGroup == nil {
				e.malformed(ev, "no task_group")
				continue
			}
			for _, t := range ev.LaunchGroup.TaskGroup.Tasks {
				if t.TaskID.Value == "" {
					e.malformed(ev, "a task without a task_id")
					continue
				}
				e.launched(t)
				e.launch(t)
			}
		case mesosexec.Event_KILL:
			if ev.Kill == nil {
				e.malformed(ev, "no kill member")
				continue
			}
			e.kill(ev.Kill.TaskID.Value, ev.Kill.KillPolicy)
		case mesosexec.Event_ACKNOWLEDGED:
			if ev.Acknowledged == nil {
				e.malformed(ev, "no acknowledged member")
				continue
			}
			e.acknowledged(ev.Acknowledged.TaskID.Value, ev.Acknowledged.UUID)
		case mesosexec.Event_MESSAGE:
			if ev.Message == nil {
				e.malformed(ev, "no message member")
				continue
			}
			if string(ev.Message.Data) == StopMessage {
				e.log.Info("MESSAGE STOP: killing every task and exiting")
				e.stop() // kills the tasks while subscribed, so their last updates get through
				return subscribed, nil
			}
			if term, ok, err := parseLease(ev.Message.Data); ok {
				if err != nil {
					e.log.WithError(err).Warn("ignoring framework message")
				} else {
					e.renewLease(term)
				}
				continue
			}
			e.log.WithField("data", string(ev.Message.Data)).Info("ignoring framework message")
		case mesosexec.Event_SHUTDOWN:
			e.log.Info("SHUTDOWN: killing every task and exiting")
			e.stop()
			return subscribed, nil
		case mesosexec.Event_ERROR:
			// Without its message it is still the agent's ERROR, and re-subscribing is the cure.
			if ev.Error == nil {
				e.malformed(ev, "no error member; re-subscribing all the same")
			}
			return subscribed, fmt.Errorf("%w: %s", errAgentError, ev.GetError().GetMessage())
		default:
			// HEARTBEAT, and event types newer than this executor: nothing to do.
		}
	}
}

func (e *Executor) malformed(ev mesosexec.Event, what string) {
	e.log.WithField("event", ev.Type.String()).Warnf("malformed event from the agent: %s", what)
}

// subscribed takes SUBSCRIBED (s may be nil): the agent has the updates the SUBSCRIBE carried;
// the ones made since are delivered now.
func (e *Executor) subscribed(s *mesosexec.Event_Subscribed, carried []mesosexec.Call_Update) {
	info, agent := s.GetExecutorInfo(), s.GetAgentInfo()
	d, err := taskdata.DecodeExecutorData(info.Data)
	if err != nil {
		e.log.WithError(err).Warn("ignoring ExecutorInfo.data")
	}
	e.mu.Lock()
	e.sampling = d.EventTraceSamplingCount
	e.connected = true
	e.epoch++
	e.out.subscribed(carried)
	e.mu.Unlock()
	e.log.WithField("agent", agent.GetID().GetValue()).Info("subscribed")
	e.wake()
}

func (e *Executor) isStopping() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.stopping
}

// stop marks the executor as stopping and kills every task, waiting for their last updates.
func (e *Executor) stop() {
	e.mu.Lock()
	e.stopping = true
	e.mu.Unlock()
	e.stopAll()
}

func (e *Executor) setConnected(v bool) {
	e.mu.Lock()
	e.connected = v
	e.mu.Unlock()
}

// stopAll kills every task and waits until the agent has their final updates, at most for the
// shutdown grace period the agent gives us before it kills the whole container. Only the first
// call does it: Run stops again on its way out after SHUTDOWN or MESSAGE STOP, and that second
// wait would outlast the agent's grace.
func (e *Executor) stopAll() { e.stopOnce.Do(e.stopTasks) }

func (e *Executor) stopTasks() {
	deadline := time.Now().Add(e.cfg.ShutdownGracePeriod)
	// A task's own grace (its kill policy, default 3 s) is cut so that its SIGKILL comes before
	// the agent's, with time left to report it, as Mesos's command executor cuts it: otherwise
	// a script that ignores SIGTERM outlives the grace, and its end is the agent's TASK_FAILED
	// instead of this executor's TASK_KILLED.
	killBy := time.Until(deadline) - shutdownMargin(e.cfg.ShutdownGracePeriod)
	e.mu.Lock()
	for _, t := range e.tasks {
		t.kill(max(0, min(t.killGrace(), killBy))) // a lease lapse may set the grace meanwhile (fence)
	}
	e.mu.Unlock()
	done := make(chan struct{})
	go func() { e.running.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Until(deadline)):
		e.log.Warn("tasks still running at the end of the shutdown grace period")
	}
	e.flush(deadline)
}

// shutdownMargin is the part of the agent's shutdown grace kept for after the tasks' SIGKILL:
// their processes' end and the last updates. Mesos's command executor keeps two seconds of
// its five; a short grace keeps a quarter.
func shutdownMargin(grace time.Duration) time.Duration { return min(2*time.Second, grace/4) }

// flush waits until the agent has taken every update, the subscription is lost, or deadline.
func (e *Executor) flush(deadline time.Time) {
	timeout := time.NewTimer(time.Until(deadline))
	defer timeout.Stop()
	for {
		e.mu.Lock()
		left, connected := e.out.untaken(), e.connected
		e.mu.Unlock()
		if left == 0 || !connected {
			return
		}
		select {
		case <-e.progress:
		case <-timeout.C:
			e.log.WithField("updates", left).Warn("updates not delivered by the end of the shutdown grace period")
			return
		}
	}
}

// update reports a task's state; the update is kept until the agent acknowledges it.
func (e *Executor) update(taskID string, state mesos.TaskState, msg string, data []byte) {
	st := mesos.TaskStatus{
		TaskID: mesos.TaskID{Value: taskID}, State: state.Enum(), Source: mesos.SOURCE_EXECUTOR.Enum(),
		ExecutorID: &mesos.ExecutorID{Value: e.cfg.ExecutorID}, UUID: newUUID(), Data: data,
		Timestamp: ptr(float64(time.Now().UnixNano()) / 1e9),
	}
	if msg != "" {
		st.Message = &msg
	}
	e.mu.Lock()
	e.out.add(mesosexec.Call_Update{Status: st}, time.Now())
	e.mu.Unlock()
	e.log.WithFields(logrus.Fields{"task": taskID, "state": state.String(), "message": msg}).Info("task update")
	e.wake()
}

func (e *Executor) wake() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// deliver sends the updates of the outbox while the executor is subscribed, one at a time, in
// the order next gives, retrying those the agent does not take, until ctx ends.
func (e *Executor) deliver(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	var posts sync.WaitGroup
	defer posts.Wait()
	for {
		e.mu.Lock()
		var it *outgoing
		wait := time.Duration(-1)
		if e.connected && e.inFlight < maxInFlight {
			it, wait = e.out.next(time.Now())
		}
		if it != nil {
			it.inFlight = true
			e.inFlight++
		}
		epoch := e.epoch
		e.mu.Unlock()
		if it != nil {
			posts.Add(1)
			go func() {
				defer posts.Done()
				e.post(ctx, it, epoch)
			}()
			continue
		}
		if wait >= 0 {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return
		case <-e.kick:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// maxInFlight bounds the UPDATE calls under way at once. Updates of different tasks go out in
// parallel, so that a busy agent answering slowly does not hold a finished task's update behind
// hundreds of others: the longer an update waits, the wider the window in which the death of
// the executor loses it (the agent then reports the task failed, and a shard that ran is run
// again). A task's own updates still go one at a time, in order.
const maxInFlight = 8

// post sends one update. A refusal counts only if no SUBSCRIBED came meanwhile: that SUBSCRIBE
// carried the update, and the agent has it.
func (e *Executor) post(ctx context.Context, it *outgoing, epoch int) {
	resp, err := e.sender.Send(ctx, calls.NonStreaming(calls.Update(it.update.Status)))
	if resp != nil {
		resp.Close()
	}
	e.mu.Lock()
	var retry time.Duration
	if err == nil || e.epoch == epoch {
		retry = e.out.result(it, err, time.Now())
	}
	it.inFlight = false
	e.inFlight--
	e.mu.Unlock()
	e.wake() // a slot is free, and the task's next update may go
	if err != nil && ctx.Err() == nil {
		e.log.WithError(err).WithFields(logrus.Fields{"task": it.update.Status.TaskID.Value, "state": it.update.Status.State.String(), "retry_in": retry}).
			Info("update not taken by the agent; retrying")
	}
	select {
	case e.progress <- struct{}{}:
	default:
	}
}

func (e *Executor) acknowledged(taskID string, uuid []byte) {
	e.mu.Lock()
	u, _ := e.out.acknowledged(uuid)
	delete(e.unackedTasks, taskID)
	e.mu.Unlock()
	// The agent has the task's final update now, and answers for it whatever becomes of this
	// executor: the run's end record has done its work.
	if e.endsDir && u.Status.State != nil && terminal(*u.Status.State) {
		if err := os.Remove(taskend.Path(e.cfg.Sandbox, taskID)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			e.log.WithError(err).WithField("task", taskID).Warn("cannot remove the run's end record")
		}
	}
}

// terminal reports whether s ends a task.
func terminal(s mesos.TaskState) bool {
	switch s {
	case mesos.TASK_STAGING, mesos.TASK_STARTING, mesos.TASK_RUNNING, mesos.TASK_KILLING, mesos.TASK_UNREACHABLE:
		return false
	}
	return true
}

func newUUID() []byte {
	b := make([]byte, 16)
	if _, err := randRead(b); err != nil {
		panic(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return b
}

func ptr[T any](v T) *T { return &v }

var errKilled = errors.New("killed")
