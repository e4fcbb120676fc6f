package mesoslocal

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	executorapi "github.com/mesos/mesos-go/api/v1/lib/executor"
	"github.com/sirupsen/logrus"
)

type execState int

const (
	execRegistering execState = iota // launched, not yet subscribed
	execRunning                      // subscribed
	execTerminating                  // shutting down
	execTerminated
)

// executor is an executor process on an agent.
type executor struct {
	a            *agent
	frameworkID  string
	id           string
	info         mesos.ExecutorInfo
	resources    mesos.Resources
	checkpoint   bool
	pa           bool
	state        execState
	containerID  string
	dir          string
	stream       *stream
	queue        []mesos.TaskInfo      // tasks waiting for SUBSCRIBED
	tasks        map[string]*agentTask // tasks until their terminal update is acknowledged
	reported     bool                  // the executor has sent an update of one of its tasks
	reregistered bool                  // re-subscribed since the agent restarted

	proc      *os.Process
	ct        *container // set once the process is started
	started   bool       // the process was started (or failed to start)
	destroyed bool
	// failReason says why the container ended, for the updates of its live tasks; failState,
	// when set, is their state (TASK_FAILED otherwise).
	failReason *mesos.TaskStatus_Reason
	failMsg    string
	failState  *mesos.TaskState
	silent     bool // no status updates: the framework is being removed
	orphaned   bool // its non-checkpointing framework lost it with the agent connection
	forgotten  bool // killed by an agent restart that does not recover it: never a completed executor

	completedTasks []taskDoc // tasks whose terminal update was acknowledged, oldest first

	regTimer, killTimer, heartbeat Timer
	command                        *commandTask // set for the built-in command executor
}

type agentTask struct {
	info  mesos.TaskInfo
	state mesos.TaskState
	// delivered: the LAUNCH was sent (Mesos's launched task), whether or not it reached the
	// executor; a task that is not is still queued.
	delivered bool
}

func (a *agent) newExecutor(f *framework, info mesos.ExecutorInfo) *executor {
	e := &executor{
		a: a, frameworkID: f.id, id: info.ExecutorID.Value, info: info, resources: normalise(info.Resources),
		checkpoint: f.checkpoint(), pa: f.partitionAware(), containerID: newUUID(), tasks: map[string]*agentTask{},
	}
	a.executors[execKey{f.id, e.id}] = e
	runs := filepath.Join(a.c.opts.WorkDir, "slaves", a.id, "frameworks", f.id, "executors", e.id, "runs")
	e.dir = filepath.Join(runs, e.containerID)
	a.attach(e, runs)
	e.log().Info("launching executor")
	// The registration timeout counts from the launch request, fetch included.
	e.regTimer = a.c.clock.AfterFunc(a.c.opts.ExecutorRegistrationTimeout, func() {
		a.c.mu.Lock()
		defer a.c.mu.Unlock()
		if e.state == execRegistering {
			e.destroy(mesos.REASON_EXECUTOR_REGISTRATION_TIMEOUT.Enum(),
				"Executor did not register within "+StoutDuration(a.c.opts.ExecutorRegistrationTimeout))
		}
	})
	env := a.executorEnv(f, e)
	cmdInfo := *info.Command
	workDir, cache := a.c.opts.WorkDir, cmdInfo.URIs
	a.c.wg.Add(1)
	go func() { // fetch and start without holding the lock: fetching may be slow
		defer a.c.wg.Done()
		err := prepareSandbox(e.dir, runs)
		if err == nil {
			err = fetchAll(e.dir, workDir, cache)
		}
		a.c.mu.Lock()
		defer a.c.mu.Unlock()
		if e.destroyed {
			return
		}
		if err == nil {
			err = e.start(cmdInfo, env)
		}
		if err != nil {
			e.log().WithError(err).Warn("executor container launch failed")
			e.failReason, e.failMsg = mesos.REASON_CONTAINER_LAUNCH_FAILED.Enum(), "Failed to launch container: "+err.Error()
			e.started = true
			a.executorExited(e, -1)
		}
	}()
	return e
}

func (e *executor) log() logrus.FieldLogger {
	return e.a.log.WithFields(logrus.Fields{"framework": e.frameworkID, "executor": e.id})
}

func prepareSandbox(dir, runs string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	latest := filepath.Join(runs, "latest")
	os.Remove(latest)
	return os.Symlink(filepath.Base(dir), latest)
}

// executorEnv is exactly the environment of MESOS.md §6.2: nothing is inherited from us.
func (a *agent) executorEnv(f *framework, e *executor) []string {
	grace := a.c.opts.ExecutorShutdownGracePeriod
	if g := e.info.ShutdownGracePeriod; g != nil {
		grace = time.Duration(g.Nanoseconds)
	}
	checkpoint := "0"
	if e.checkpoint {
		checkpoint = "1"
	}
	env := map[string]string{
		"MESOS_FRAMEWORK_ID":                   f.id,
		"MESOS_EXECUTOR_ID":                    e.id,
		"MESOS_DIRECTORY":                      e.dir,
		"MESOS_SANDBOX":                        e.dir,
		"MESOS_AGENT_ENDPOINT":                 a.endpoint(),
		"MESOS_SLAVE_ID":                       a.id,
		"MESOS_SLAVE_PID":                      a.pid(),
		"MESOS_CHECKPOINT":                     checkpoint,
		"MESOS_HTTP_COMMAND_EXECUTOR":          "0",
		"MESOS_EXECUTOR_SHUTDOWN_GRACE_PERIOD": StoutDuration(grace),
		"LIBPROCESS_PORT":                      "0",
		"PATH":                                 "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
	}
	if e.checkpoint {
		env["MESOS_RECOVERY_TIMEOUT"] = StoutDuration(a.c.opts.RecoveryTimeout)
		env["MESOS_SUBSCRIPTION_BACKOFF_MAX"] = StoutDuration(a.c.opts.ExecutorReregistrationTimeout)
	}
	if ce := e.info.Command.Environment; ce != nil {
		for _, v := range ce.Variables {
			if (v.Type == nil || *v.Type == mesos.Environment_Variable_VALUE) && v.Value != nil {
				env[v.Name] = *v.Value // CommandInfo.environment wins over everything above
			}
		}
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

// start runs the executor's command in its sandbox, in a container of its own, with stdout and
// stderr in sandbox files. Caller holds c.mu.
func (e *executor) start(ci mesos.CommandInfo, env []string) error {
	stdout, err := os.OpenFile(filepath.Join(e.dir, "stdout"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer stdout.Close()
	stderr, err := os.OpenFile(filepath.Join(e.dir, "stderr"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer stderr.Close()
	if ci.User != nil {
		e.log().WithField("user", *ci.User).Debug("mesos-local runs executors as its own user")
	}
	cmd, ct, err := e.a.c.cz.start(e.containerID, func() (*exec.Cmd, error) {
		cmd, err := command(ci, e.dir, env)
		if err == nil {
			cmd.Stdout, cmd.Stderr = stdout, stderr
		}
		return cmd, err
	})
	if err != nil {
		return err
	}
	e.proc, e.ct, e.started = cmd.Process, ct, true
	c := e.a.c
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		status := ct.wait(cmd, e.log())
		c.mu.Lock()
		defer c.mu.Unlock()
		e.a.executorExited(e, status)
	}()
	return nil
}

// command builds the process of a CommandInfo (MESOS.md §7.1): shell=true (the default) runs
// "/bin/sh -c value"; shell=false execs value with argv = arguments verbatim, looking a
// relative value up in the sandbox and then in PATH.
func command(ci mesos.CommandInfo, dir string, env []string) (*exec.Cmd, error) {
	value := ""
	if ci.Value != nil {
		value = *ci.Value
	}
	var cmd *exec.Cmd
	if ci.Shell == nil || *ci.Shell {
		cmd = exec.Command("/bin/sh", "-c", value)
	} else {
		path := value
		if !filepath.IsAbs(path) {
			if p := filepath.Join(dir, path); fileExists(p) {
				path = p
			} else if p, err := lookPath(path, env); err == nil {
				path = p
			} else {
				return nil, fmt.Errorf("cannot find %q in the sandbox or PATH", value)
			}
		}
		cmd = &exec.Cmd{Path: path, Args: ci.Arguments}
		if len(cmd.Args) == 0 {
			cmd.Args = []string{value}
		}
	}
	cmd.Dir, cmd.Env = dir, env
	return cmd, nil
}

func lookPath(name string, env []string) (string, error) {
	for _, kv := range env {
		if p, ok := strings.CutPrefix(kv, "PATH="); ok {
			for _, d := range filepath.SplitList(p) {
				if full := filepath.Join(d, name); fileExists(full) {
					return full, nil
				}
			}
		}
	}
	return "", os.ErrNotExist
}

func fileExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir()
}

// send queues an event on the executor's stream, if it is subscribed.
func (e *executor) send(ev *executorapi.Event) {
	if e.stream != nil {
		e.stream.send(ev)
	}
}

// deliver sends LAUNCH for a task; with no connection, it is lost. Caller holds c.mu.
func (e *executor) deliver(t mesos.TaskInfo) {
	if at := e.tasks[t.TaskID.Value]; at != nil {
		at.delivered = true
	}
	e.send(&executorapi.Event{Type: executorapi.Event_LAUNCH, Launch: &executorapi.Event_Launch{Task: t}})
}

// everSentTask is Mesos's Executor::everSentTask: a sent task is still live, or the executor
// has reported on one of its tasks. Sent tasks that the agent dropped because the executor
// never got them do not count, so an executor left with nothing but those is shut down when it
// re-subscribes, as one whose tasks were all killed before delivery is.
func (e *executor) everSentTask() bool {
	if e.reported {
		return true
	}
	for _, t := range e.tasks {
		if t.delivered && !terminal(t.state) {
			return true
		}
	}
	return false
}

func (e *executor) dequeue(taskID string) {
	for i, t := range e.queue {
		if t.TaskID.Value == taskID {
			e.queue = append(e.queue[:i], e.queue[i+1:]...)
			return
		}
	}
}

// shutdownExecutor sends SHUTDOWN and kills the executor after its grace period
// (MESOS.md §6.5). Caller holds c.mu.
func (a *agent) shutdownExecutor(e *executor, updates bool) {
	if e.state == execTerminating || e.state == execTerminated {
		return
	}
	if !updates {
		e.silent = true
	}
	e.state = execTerminating
	e.send(&executorapi.Event{Type: executorapi.Event_SHUTDOWN})
	grace := a.c.opts.ExecutorShutdownGracePeriod
	if g := e.info.ShutdownGracePeriod; g != nil {
		grace = time.Duration(g.Nanoseconds)
	}
	e.killTimer = a.c.clock.AfterFunc(grace, func() {
		a.c.mu.Lock()
		defer a.c.mu.Unlock()
		if e.state != execTerminated {
			e.destroy(nil, "")
		}
	})
}

// destroy kills the executor's container; the process waiter then reports the exit.
// If the process never started, the exit is reported at once. Caller holds c.mu.
func (e *executor) destroy(reason *mesos.TaskStatus_Reason, msg string) {
	if e.destroyed {
		return
	}
	e.destroyed = true
	if reason != nil && e.failReason == nil {
		e.failReason, e.failMsg = reason, msg
	}
	if e.command != nil {
		e.command.destroy()
		return
	}
	if e.ct != nil {
		e.ct.kill()
		return
	}
	if !e.started {
		e.started = true
		e.a.executorExited(e, -1)
	}
}

// executorExited handles the end of an executor process (MESOS.md §6.5): its live tasks
// fail, the framework gets FAILURE, and the master forgets it and frees its resources. The
// agent keeps it, TERMINATED, until the terminal updates of its tasks are acknowledged, and its
// id is not free until then (Slave::executorTerminated, runTask).
func (a *agent) executorExited(e *executor, status int32) {
	if e.state == execTerminated {
		return
	}
	e.state = execTerminated
	e.destroyed = true
	for _, t := range []Timer{e.regTimer, e.killTimer, e.heartbeat} {
		if t != nil {
			t.Stop()
		}
	}
	if e.stream != nil {
		e.stream.close()
		e.stream = nil
	}
	e.log().WithField("status", status).Info("executor exited")
	if !e.silent {
		reason, msg := mesos.REASON_EXECUTOR_TERMINATED, "Executor terminated"
		if e.failReason != nil {
			reason, msg = *e.failReason, e.failMsg
		}
		state := mesos.TASK_FAILED
		if e.failState != nil {
			state = *e.failState
		}
		for _, id := range sortedKeys(e.tasks) {
			if t := e.tasks[id]; !terminal(t.state) {
				t.state = state
				a.agentUpdate(e.frameworkID, id, e.id, state, reason, msg)
			}
		}
		if e.command == nil { // the master does not know the built-in command executor
			a.exitedExecutor(e.frameworkID, e.id, status)
		}
	}
	// Executor::incompleteTasks: e.tasks holds the tasks whose terminal update is not yet
	// acknowledged; the last acknowledgement removes the executor (agent.acknowledged). A
	// framework being shut down acknowledges nothing, so its executors go at once.
	if e.silent || len(e.tasks) == 0 {
		a.removeExecutor(e)
	}
}

// exitedExecutor is the agent's ExitedExecutorMessage: the master forgets the executor (its
// view is the agent's live executors) and tells the framework, if it is connected, with a
// FAILURE event (Master::exitedExecutor). A message the master cannot get is lost.
func (a *agent) exitedExecutor(frameworkID, executorID string, status int32) {
	if f := a.c.frameworks[frameworkID]; f != nil && a.linked() {
		f.send(failureEvent(a.id, executorID, status))
	}
}

// removeExecutor is Slave::removeExecutor: the agent forgets an executor that has ended, which
// then shows among its framework's completed executors, and its id is free. Caller holds c.mu.
func (a *agent) removeExecutor(e *executor) {
	if a.executors[execKey{e.frameworkID, e.id}] == e {
		delete(a.executors, execKey{e.frameworkID, e.id})
	}
	a.executorCompleted(e)
}
