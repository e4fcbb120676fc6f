package mesoslocal

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	executorapi "github.com/mesos/mesos-go/api/v1/lib/executor"
	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/internal/freeport"
)

// agentState is the agent as the master sees it (MESOS.md §5.1).
type agentState int

const (
	agentUp          agentState = iota // registered and connected
	agentPartitioned                   // link to the master broken; not yet marked unreachable
	agentDown                          // agent process killed; the master has not noticed yet
	agentUnreachable                   // marked unreachable by the master
	agentGone                          // marked gone by the operator
)

func (s agentState) String() string {
	return [...]string{"up", "partitioned", "down", "unreachable", "gone"}[s]
}

// agent is one Mesos agent: its executor endpoint, its executors and its status update
// manager. All of its state is guarded by the cluster's mutex.
type agent struct {
	c        *Cluster
	n        int
	id       string
	ip       string
	hostname string
	port     int
	total    mesos.Resources
	log      logrus.FieldLogger

	state      agentState
	recovering bool // restarted, waiting for executors to re-subscribe
	// awaitingRereg: the master failed over and this agent has not re-registered with the new
	// one yet. The new master knows the agent only from its registry (Mesos's "recovered"
	// agents), none of its tasks, and cannot reach it (failover.go).
	awaitingRereg bool
	reregTimer    Timer // the agent re-registering with a new master
	unreachableAt float64
	pingTimer     Timer // marks the agent unreachable when the master's pings have failed long enough
	recoverTimer  Timer
	pendingKills  []pendingKill // kills for this agent while it was not connected
	executors     map[execKey]*executor
	streams       map[taskKey]*updateStream
	frameworks    map[string]mesos.FrameworkInfo // frameworks with executors here
	// records are the frameworks the agent has had executors of, with their completed
	// executors; completedFws orders the records of frameworks with no executor left here
	// (state.go).
	records      map[string]*agentFramework
	completedFws []string
	files        map[string]attachment // the paths /files/read serves (files.go)

	ln  net.Listener
	srv *http.Server
}

type execKey struct{ framework, executor string }
type taskKey struct{ framework, task string }

type pendingKill struct {
	framework string
	task      string
	policy    *mesos.KillPolicy
}

func (c *Cluster) newAgent(i int, total mesos.Resources) (*agent, error) {
	a := &agent{
		c: c, n: i, id: fmt.Sprintf("%s-S%d", c.masterID, i), total: total,
		executors: map[execKey]*executor{}, streams: map[taskKey]*updateStream{}, frameworks: map[string]mesos.FrameworkInfo{},
		records: map[string]*agentFramework{}, files: map[string]attachment{},
	}
	// Each agent gets its own loopback address where the system allows it, so that agents have
	// distinct hostnames as on a real cluster; its port, below the ephemeral range, is still
	// free when RestartAgent binds it again (see freeport.Listen).
	var err error
	for _, ip := range []string{fmt.Sprintf("127.0.0.%d", 2+i%250), "127.0.0.1"} {
		if a.ln, err = freeport.Listen(ip); err == nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("mesoslocal: agent %d: listen: %w", i, err)
	}
	addr := a.ln.Addr().(*net.TCPAddr)
	a.ip, a.port = addr.IP.String(), addr.Port
	a.hostname = a.ip
	a.log = c.log.WithField("agent", a.id)
	a.startServer()
	return a, nil
}

func (a *agent) startServer() {
	mux := http.NewServeMux()
	mux.HandleFunc("/api/v1/executor", a.executorAPI)
	mux.HandleFunc("GET /state", a.readonly(a.stateJSON))
	mux.HandleFunc("GET /slave(1)/state", a.readonly(a.stateJSON))
	mux.HandleFunc("/files/read", a.readonly(a.filesRead))
	mux.HandleFunc("/files/read.json", a.readonly(a.filesRead))
	a.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	a.c.serve(a.srv, a.ln)
}

// readonly guards one of the agent's read-only endpoints: with AuthenticateAgentReadonly, a
// request needs the credentials (else 401 and a Basic challenge).
func (a *agent) readonly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if a.c.opts.AuthenticateAgentReadonly {
			if _, ok := a.c.authenticate(w, r); !ok {
				return
			}
		}
		h(w, r)
	}
}

// stopServer closes the executor endpoint and every connection to it, as the agent process
// dying does. It must not be called with c.mu held (the handlers take it).
func (a *agent) stopServer(srv *http.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	srv.Shutdown(ctx)
	srv.Close()
}

func (a *agent) endpoint() string { return net.JoinHostPort(a.ip, strconv.Itoa(a.port)) }
func (a *agent) pid() string      { return "slave(1)@" + a.endpoint() }

// linked reports whether the master and the agent can talk.
func (a *agent) linked() bool { return a.state == agentUp && !a.recovering && !a.awaitingRereg }

// offerable reports whether the agent's resources are in the allocator.
func (a *agent) offerable() bool { return a.linked() }

func (a *agent) info() mesos.AgentInfo {
	port := int32(a.port)
	return mesos.AgentInfo{Hostname: a.hostname, Port: &port, ID: &mesos.AgentID{Value: a.id}, Resources: a.total.Clone()}
}

// agentExecutors are all the agent's executors, in id order: those the master knows, and those
// that have ended but wait for the acknowledgement of a terminal update of one of their tasks
// (TERMINATED), which the master has forgotten (Master::exitedExecutor).
func (a *agent) agentExecutors() []*executor {
	out := make([]*executor, 0, len(a.executors))
	for _, e := range a.executors {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// liveExecutors are the agent's executors that hold resources, in id order: the master's view.
func (a *agent) liveExecutors() []*executor {
	var out []*executor
	for _, e := range a.agentExecutors() {
		if e.state != execTerminated {
			out = append(out, e)
		}
	}
	return out
}

// executorInfo is the master's record of an executor on the agent; nil for one it does not
// know, including one that has ended but that the agent still keeps.
func (a *agent) executorInfo(frameworkID, executorID string) *mesos.ExecutorInfo {
	if e := a.executors[execKey{frameworkID, executorID}]; e != nil && e.state != execTerminated {
		return &e.info
	}
	return nil
}

// runTask is the agent receiving a task from the master (MESOS.md §7.2); launch is the
// master's launch_executor: it did not know the task's executor on the agent, and counted it
// as starting with this task.
func (a *agent) runTask(f *framework, t mesos.TaskInfo, launch bool) {
	a.frameworks[f.id] = f.info
	a.record(f)
	if t.Command != nil {
		a.runCommandTask(f, t)
		return
	}
	key := execKey{f.id, t.Executor.ExecutorID.Value}
	e := a.executors[key]
	dropped := lostOr(f.partitionAware(), mesos.TASK_DROPPED)
	switch {
	case launch && e != nil:
		// Slave::__run: the master asks for a new executor while the agent still has one by that
		// id. Here it is always one that has ended, kept until its tasks' terminal updates are
		// acknowledged: the master forgot it at its exit, the agent did not. The agent tells the
		// master of its exit again, as the master now counts it as started (the scheduler gets
		// another FAILURE, with status -1).
		e.log().WithField("task", t.TaskID.Value).Warn("task dropped: its executor has ended and waits for acknowledgements of its tasks' terminal updates")
		a.agentUpdate(f.id, t.TaskID.Value, e.id, dropped, mesos.REASON_EXECUTOR_TERMINATED,
			"Master wants to launch executor, but one already exists")
		if e.state == execTerminated {
			a.exitedExecutor(e.frameworkID, e.id, -1)
		} else {
			a.shutdownExecutor(e, true) // an executor the master does not know: cannot happen here
		}
		return
	case !launch && e == nil:
		// Slave::__run: the task was meant for an executor an earlier task started, and there
		// is none. The master hears of it from the ExitedExecutorMessage already on its way.
		a.agentUpdate(f.id, t.TaskID.Value, t.Executor.ExecutorID.Value, dropped, mesos.REASON_EXECUTOR_TERMINATED,
			"No executor is expected to launch and there is none running")
		return
	case e == nil:
		e = a.newExecutor(f, *t.Executor)
	}
	switch e.state {
	case execTerminating, execTerminated:
		// Slave::__run: the master knows the executor (or started it earlier in this ACCEPT) but
		// it is ending or has ended. Mesos's update carries no executor id here.
		msg := "Executor terminating"
		if e.state == execTerminated {
			msg = "Executor terminated"
		}
		e.log().WithField("task", t.TaskID.Value).Warn("task dropped: " + msg)
		a.agentUpdate(f.id, t.TaskID.Value, "", dropped, mesos.REASON_EXECUTOR_TERMINATED, msg)
		return
	}
	e.tasks[t.TaskID.Value] = &agentTask{info: t, state: mesos.TASK_STAGING}
	if e.state == execRunning {
		// Sent at once even if the executor's connection has dropped: Mesos sends the LAUNCH into
		// the closed connection, where it is lost, and counts the task as launched. The executor
		// re-subscribes without it, and the task is dropped then (executorSubscribed).
		e.deliver(t)
	} else {
		e.queue = append(e.queue, t) // REGISTERING: sent right after SUBSCRIBED
	}
}

// kill is the agent's side of KILL (MESOS.md §3.5).
func (a *agent) kill(f *framework, taskID string, policy *mesos.KillPolicy) {
	if !a.linked() {
		a.pendingKills = append(a.pendingKills, pendingKill{f.id, taskID, policy})
		return
	}
	var e *executor
	for k, x := range a.executors {
		if k.framework == f.id && x.tasks[taskID] != nil {
			e = x
		}
	}
	if e == nil {
		state := lostOr(f.partitionAware(), mesos.TASK_DROPPED)
		a.agentUpdate(f.id, taskID, "", state, mesos.REASON_EXECUTOR_TERMINATED, "Cannot find executor")
		return
	}
	t := e.tasks[taskID]
	switch {
	case e.state == execTerminating || e.state == execTerminated:
		return // the task fails when the executor ends
	case terminal(t.state):
		return
	case !t.delivered:
		e.dequeue(taskID)
		t.state = mesos.TASK_KILLED
		a.agentUpdate(f.id, taskID, e.id, mesos.TASK_KILLED, mesos.REASON_TASK_KILLED_DURING_LAUNCH, "Killed before delivery to the executor")
		// MESOS-8411: Slave::kill shuts down a RUNNING executor left with no task it was ever
		// sent. A REGISTERING one is left be ("TODO(mzhu): Consider shutting down the executor
		// here"): a task sent to it meanwhile is queued as usual, and the same check is made at
		// its SUBSCRIBE (executorSubscribed).
		if e.state == execRunning && !e.everSentTask() && len(e.queue) == 0 {
			a.shutdownExecutor(e, true)
		}
	case e.command != nil:
		e.command.kill(policy)
	default:
		// A task sent into a dropped connection gets its KILL the same way: lost, nothing is
		// reported until the executor re-subscribes without the task and it is dropped.
		e.send(&executorapi.Event{Type: executorapi.Event_KILL, Kill: &executorapi.Event_Kill{TaskID: mesos.TaskID{Value: taskID}, KillPolicy: policy}})
	}
}

// message delivers a framework message to a subscribed executor; otherwise it is dropped.
func (a *agent) message(frameworkID, executorID string, data []byte) {
	if e := a.executors[execKey{frameworkID, executorID}]; e != nil && e.state == execRunning && e.stream != nil {
		e.send(&executorapi.Event{Type: executorapi.Event_MESSAGE, Message: &executorapi.Event_Message{Data: data}})
	}
}

// removeFramework shuts down a removed framework's executors without status updates and
// forgets its pending updates (Slave::shutdownFramework). An executor that has ended and waits
// for acknowledgements it will not get now is removed at once.
func (a *agent) removeFramework(frameworkID string) {
	for k, e := range a.executors {
		if k.framework != frameworkID {
			continue
		}
		e.silent = true
		if e.state == execTerminated {
			a.removeExecutor(e)
		} else {
			a.shutdownExecutor(e, false)
		}
	}
	for k, s := range a.streams {
		if k.framework == frameworkID {
			s.stop()
			delete(a.streams, k)
		}
	}
	delete(a.frameworks, frameworkID)
}

// shutdown kills everything the agent runs; used when the cluster closes.
func (a *agent) shutdown() {
	for _, e := range a.executors {
		e.silent = true
		e.destroy(nil, "")
	}
	for _, s := range a.streams {
		s.stop()
	}
	for _, t := range []Timer{a.pingTimer, a.recoverTimer, a.reregTimer} {
		if t != nil {
			t.Stop()
		}
	}
	if a.srv != nil {
		srv := a.srv
		go a.stopServer(srv) // handlers need c.mu, which the caller holds
	}
}
