package mesoslocal

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
)

// commandTask is a task with a CommandInfo, run as Mesos's built-in command executor runs it:
// the executor id is the task id, updates come from SOURCE_EXECUTOR, and no FAILURE event is
// sent when it ends.
type commandTask struct {
	e      *executor
	taskID string
	proc   *os.Process
	killed bool
	timer  Timer
}

func (a *agent) runCommandTask(f *framework, t mesos.TaskInfo) {
	id := t.TaskID.Value
	if a.executors[execKey{f.id, id}] != nil {
		// Slave::__run, MESOS-9657: the command executor of an earlier task with this id is still
		// kept (it has ended, its task's terminal update not yet acknowledged).
		a.agentUpdate(f.id, id, id, lostOr(f.partitionAware(), mesos.TASK_DROPPED), mesos.REASON_TASK_INVALID,
			"Cannot reuse an already existing executor for a command task")
		return
	}
	info := mesos.ExecutorInfo{ExecutorID: mesos.ExecutorID{Value: id}, FrameworkID: &mesos.FrameworkID{Value: f.id},
		Command: t.Command, Name: ptr("Command Executor (Task: " + id + ")")}
	e := &executor{a: a, frameworkID: f.id, id: id, info: info, checkpoint: f.checkpoint(), pa: f.partitionAware(),
		containerID: newUUID(), tasks: map[string]*agentTask{}, state: execRunning}
	e.command = &commandTask{e: e, taskID: id}
	e.tasks[id] = &agentTask{info: t, state: mesos.TASK_STAGING, delivered: true}
	a.executors[execKey{f.id, id}] = e
	runs := filepath.Join(a.c.opts.WorkDir, "slaves", a.id, "frameworks", f.id, "executors", id, "runs")
	e.dir = filepath.Join(runs, e.containerID)
	a.attach(e, runs)
	env := a.executorEnv(f, e)
	ci, workDir := *t.Command, a.c.opts.WorkDir
	a.c.wg.Add(1)
	go func() {
		defer a.c.wg.Done()
		err := prepareSandbox(e.dir, runs)
		if err == nil {
			err = fetchAll(e.dir, workDir, ci.URIs)
		}
		a.c.mu.Lock()
		defer a.c.mu.Unlock()
		if e.destroyed {
			return
		}
		if err == nil {
			err = e.command.start(ci, env)
		}
		if err != nil {
			e.failReason, e.failMsg = mesos.REASON_CONTAINER_LAUNCH_FAILED.Enum(), "Failed to launch container: "+err.Error()
			e.started = true
			a.executorExited(e, -1)
		}
	}()
}

func (ct *commandTask) update(state mesos.TaskState, msg string) {
	e := ct.e
	e.a.executorUpdate(e, mesos.TaskStatus{
		TaskID: mesos.TaskID{Value: ct.taskID}, State: state.Enum(), Source: mesos.SOURCE_EXECUTOR.Enum(),
		Message: ptr(msg), UUID: uuidBytes(),
	})
}

func (ct *commandTask) start(ci mesos.CommandInfo, env []string) error {
	e := ct.e
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
	cmd, cont, err := e.a.c.cz.start(e.containerID, func() (*exec.Cmd, error) {
		cmd, err := command(ci, e.dir, env)
		if err == nil {
			cmd.Stdout, cmd.Stderr = stdout, stderr
		}
		return cmd, err
	})
	if err != nil {
		return err
	}
	ct.proc, e.proc, e.ct, e.started = cmd.Process, cmd.Process, cont, true
	ct.update(mesos.TASK_RUNNING, "")
	c := e.a.c
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		ws := syscall.WaitStatus(cont.wait(cmd, e.log()))
		c.mu.Lock()
		defer c.mu.Unlock()
		if ct.timer != nil {
			ct.timer.Stop()
		}
		if !e.silent && !terminal(e.tasks[ct.taskID].state) {
			switch {
			case ct.killed:
				ct.update(mesos.TASK_KILLED, "Command terminated with signal "+ws.Signal().String())
			case ws.Exited() && ws.ExitStatus() == 0:
				ct.update(mesos.TASK_FINISHED, "Command exited with status 0")
			case ws.Signaled():
				ct.update(mesos.TASK_FAILED, "Command terminated with signal "+ws.Signal().String())
			default:
				ct.update(mesos.TASK_FAILED, fmt.Sprintf("Command exited with status %d", ws.ExitStatus()))
			}
		}
		e.a.executorExited(e, int32(ws))
	}()
	return nil
}

// kill sends SIGTERM to the command's process group and SIGKILL to its container after the grace period
// (the kill policy's, else 3 s, the command executor's default).
func (ct *commandTask) kill(policy *mesos.KillPolicy) {
	if ct.proc == nil || ct.killed {
		return
	}
	ct.killed = true
	grace := 3 * time.Second
	if policy != nil && policy.GracePeriod != nil {
		grace = time.Duration(policy.GracePeriod.Nanoseconds)
	}
	syscall.Kill(-ct.proc.Pid, syscall.SIGTERM)
	cont := ct.e.ct
	ct.timer = ct.e.a.c.clock.AfterFunc(grace, func() { cont.kill() })
}

func (ct *commandTask) destroy() {
	if ct.e.ct != nil {
		ct.e.ct.kill()
		return
	}
	e := ct.e
	if !e.started {
		e.started = true
		e.a.executorExited(e, -1)
	}
}
