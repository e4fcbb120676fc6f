// Package executor is ejcloud's Mesos executor (SPEC §6): it subscribes to the agent's v1
// executor API, runs each launched shard (SCRIPT jobs as processes, SIMPLE and DATAFLOW jobs
// through the SDK in executor/job), and reports their states. The stock binary is
// cmd/ejcloud-executor; users who write Go jobs build their own with Main.
//
//	agent ──LAUNCH──▶ decode payload ──▶ RUNNING ──▶ run shard ──▶ FINISHED | FAILED (jobFailed) | ERROR
//	      ──KILL────▶ cancel: SIGTERM to the script's process group, SIGKILL after the grace ──▶ KILLED
//	      ◀─UPDATE── kept until ACKNOWLEDGED; re-sent in SUBSCRIBE after the agent restarts
package executor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
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
	unacked      []mesosexec.Call_Update   // sent or not, in order, until ACKNOWLEDGED
	unackedTasks map[string]mesos.TaskInfo // launched, no update acknowledged yet
	connected    bool                      // subscribed: updates may be sent
	sampling     int
	stopping     bool

	sendMu  sync.Mutex     // serialises sends so that the agent sees each task's updates in order
	running sync.WaitGroup // task goroutines
}

// New returns an executor for cfg.
func New(cfg Config, log logrus.FieldLogger) *Executor {
	u := url.URL{Scheme: "http", Host: cfg.AgentEndpoint, Path: "/api/v1/executor"}
	cli := httpcli.New(httpcli.Endpoint(u.String()), httpcli.Codec(codecs.ByMediaType[codecs.MediaTypeJSON]),
		httpcli.Do(httpcli.With(httpcli.Timeout(10*time.Second))))
	opts := mesosexec.CallOptions{calls.Framework(cfg.FrameworkID), calls.Executor(cfg.ExecutorID)}
	host, _ := os.Hostname()
	ip, _, err := net.SplitHostPort(cfg.AgentEndpoint)
	if err != nil {
		ip = cfg.AgentEndpoint
	}
	return &Executor{
		cfg: cfg, log: log, hostname: host, ip: ip,
		sender:       calls.SenderWith(httpexec.NewSender(cli.Send), opts...),
		subscriber:   calls.SenderWith(httpexec.NewSender(cli.Send, httpcli.Close(true)), opts...),
		tasks:        map[string]*task{},
		unackedTasks: map[string]mesos.TaskInfo{},
	}
}

// Run subscribes and serves the agent until SHUTDOWN, MESSAGE STOP or ctx ends (then it kills
// its tasks and returns nil), or until the agent has been unreachable for longer than the
// recovery timeout (an error). A framework that does not checkpoint gives up at the first
// disconnection, as Mesos expects.
func (e *Executor) Run(ctx context.Context) error {
	var lostAt time.Time
	for {
		err := e.subscribe(ctx)
		if e.isStopping() || ctx.Err() != nil {
			e.stopAll()
			return nil
		}
		e.setConnected(false)
		if !e.cfg.Checkpoint {
			e.stopAll()
			return fmt.Errorf("lost the agent connection (%v) and the framework does not checkpoint", err)
		}
		if err == nil || lostAt.IsZero() {
			lostAt = time.Now()
		}
		if time.Since(lostAt) > e.cfg.RecoveryTimeout {
			e.stopAll()
			return fmt.Errorf("agent at %s unreachable for longer than the recovery timeout %v: %v", e.cfg.AgentEndpoint, e.cfg.RecoveryTimeout, err)
		}
		e.log.WithError(err).Warn("agent connection lost; re-subscribing")
		select {
		case <-time.After(min(time.Second, max(e.cfg.SubscriptionBackoffMax, 100*time.Millisecond))):
		case <-ctx.Done():
		}
	}
}

// subscribe sends SUBSCRIBE, carrying every unacknowledged update and task, and handles
// events until the stream ends. It returns nil when the stream ended after SUBSCRIBED.
func (e *Executor) subscribe(ctx context.Context) error {
	e.mu.Lock()
	updates := append([]mesosexec.Call_Update(nil), e.unacked...)
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
		return fmt.Errorf("subscribe to %s: %w", e.cfg.AgentEndpoint, err)
	}
	defer resp.Close()
	stop := context.AfterFunc(ctx, func() { resp.Close() })
	defer stop()
	subscribed := false
	for {
		var ev mesosexec.Event
		if err := resp.Decode(&ev); err != nil {
			if subscribed {
				return nil
			}
			return fmt.Errorf("event stream: %w", err)
		}
		switch ev.Type {
		case mesosexec.Event_SUBSCRIBED:
			subscribed = true
			e.subscribed(ev.Subscribed)
		case mesosexec.Event_LAUNCH:
			e.launch(ev.Launch.Task)
		case mesosexec.Event_LAUNCH_GROUP:
			for _, t := range ev.LaunchGroup.TaskGroup.Tasks {
				e.launch(t)
			}
		case mesosexec.Event_KILL:
			e.kill(ev.Kill.TaskID.Value, ev.Kill.KillPolicy)
		case mesosexec.Event_ACKNOWLEDGED:
			e.acknowledged(ev.Acknowledged.TaskID.Value, ev.Acknowledged.UUID)
		case mesosexec.Event_MESSAGE:
			if string(ev.Message.Data) == StopMessage {
				e.log.Info("MESSAGE STOP: killing every task and exiting")
				e.stop() // kills the tasks while subscribed, so their last updates get through
				return nil
			}
			e.log.WithField("data", string(ev.Message.Data)).Info("ignoring framework message")
		case mesosexec.Event_SHUTDOWN:
			e.log.Info("SHUTDOWN: killing every task and exiting")
			e.stop()
			return nil
		case mesosexec.Event_ERROR:
			return fmt.Errorf("agent reported an error: %s", ev.Error.Message)
		default:
			// HEARTBEAT, and event types newer than this executor: nothing to do.
		}
	}
}

func (e *Executor) subscribed(s *mesosexec.Event_Subscribed) {
	d, err := taskdata.DecodeExecutorData(s.ExecutorInfo.Data)
	if err != nil {
		e.log.WithError(err).Warn("ignoring ExecutorInfo.data")
	}
	e.mu.Lock()
	e.sampling = d.EventTraceSamplingCount
	e.connected = true
	pending := append([]mesosexec.Call_Update(nil), e.unacked...)
	e.mu.Unlock()
	e.log.WithField("agent", s.AgentInfo.GetID().GetValue()).Info("subscribed")
	// Updates queued after the SUBSCRIBE call was built are sent now; the agent ignores the
	// ones it already has (by uuid).
	for _, u := range pending {
		e.send(u)
	}
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

// stopAll kills every task and waits for their final updates, at most for the shutdown grace
// period the agent gives us before it kills the whole container.
func (e *Executor) stopAll() {
	e.mu.Lock()
	for _, t := range e.tasks {
		t.kill(t.grace)
	}
	e.mu.Unlock()
	done := make(chan struct{})
	go func() { e.running.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(e.cfg.ShutdownGracePeriod):
		e.log.Warn("tasks still running at the end of the shutdown grace period")
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
	u := mesosexec.Call_Update{Status: st}
	e.mu.Lock()
	e.unacked = append(e.unacked, u)
	connected := e.connected
	e.mu.Unlock()
	e.log.WithFields(logrus.Fields{"task": taskID, "state": state.String(), "message": msg}).Info("task update")
	if connected {
		e.send(u)
	}
}

// send posts an update; one that does not get through stays unacknowledged and travels in the
// next SUBSCRIBE, so no update is lost while the agent restarts.
func (e *Executor) send(u mesosexec.Call_Update) {
	e.sendMu.Lock()
	defer e.sendMu.Unlock()
	resp, err := e.sender.Send(context.Background(), calls.NonStreaming(calls.Update(u.Status)))
	if resp != nil {
		resp.Close()
	}
	if err != nil {
		e.log.WithError(err).WithField("task", u.Status.TaskID.Value).Info("update not delivered; it will be re-sent on re-subscription")
		e.setConnected(false)
	}
}

func (e *Executor) acknowledged(taskID string, uuid []byte) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, u := range e.unacked {
		if string(u.Status.UUID) == string(uuid) {
			e.unacked = append(e.unacked[:i], e.unacked[i+1:]...)
			break
		}
	}
	delete(e.unackedTasks, taskID)
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
