package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/executor/internal/supervise"
	"github.com/ejcloud/ejcloud/executor/job"
	"github.com/ejcloud/ejcloud/taskdata"
	"github.com/ejcloud/ejcloud/taskend"
)

// runnerFor picks the runner of a shard; an unknown jobClass is an infrastructure error.
func (e *Executor) runnerFor(p taskdata.Payload) (runner, error) {
	sc := p.ShardingContext
	switch p.Job.JobType {
	case config.Script:
		return &scriptRunner{cmdline: p.Job.ScriptCommandLine, sc: sc, dir: e.cfg.Sandbox, endRecord: e.endRecord(p)}, nil
	case config.Simple:
		if j, ok := job.Simple(p.Job.JobClass); ok {
			return &goRunner{sc: sc, endRecord: e.endRecord(p), f: func(ctx context.Context) error {
				return j.Execute(job.WithProperties(ctx, p.Job.JobProperties), sc)
			}}, nil
		}
		if _, ok := job.Dataflow(p.Job.JobClass); ok {
			return nil, fmt.Errorf("jobClass %q of SIMPLE job %q is registered in this executor as a DATAFLOW job: the job config's jobType must say DATAFLOW", p.Job.JobClass, p.Job.JobName)
		}
	case config.Dataflow:
		if j, ok := job.Dataflow(p.Job.JobClass); ok {
			return &goRunner{sc: sc, endRecord: e.endRecord(p), f: func(ctx context.Context) error {
				return job.RunDataflow(job.WithProperties(ctx, p.Job.JobProperties), j, sc, p.Job.StreamingProcess)
			}}, nil
		}
		if _, ok := job.Simple(p.Job.JobClass); ok {
			return nil, fmt.Errorf("jobClass %q of DATAFLOW job %q is registered in this executor as a SIMPLE job: the job config's jobType must say SIMPLE", p.Job.JobClass, p.Job.JobName)
		}
	default:
		return nil, fmt.Errorf("unknown jobType %q", p.Job.JobType)
	}
	names := job.Names()
	if len(names) == 0 {
		names = []string{"none: this is the stock ejcloud-executor, which runs SCRIPT jobs; build your own with executor/job"}
	}
	return nil, fmt.Errorf("unknown jobClass %q for %s job %q: this executor has no job registered under that name (registered: %s)",
		p.Job.JobClass, p.Job.JobType, p.Job.JobName, strings.Join(names, ", "))
}

// endRecord is where a transient run of the shard records its end (package taskend), or ""
// for a daemon, whose runs never end its task, and where the sandbox has no records folder.
func (e *Executor) endRecord(p taskdata.Payload) string {
	if p.Job.JobExecutionType == config.Daemon || !e.endsDir {
		return ""
	}
	return taskend.Path(e.cfg.Sandbox, p.ShardingContext.TaskID)
}

// scriptRunner runs /bin/sh -c 'scriptCommandLine "$1"' sh '<sharding context JSON>' (SPEC §6.3):
// the context is one argument, so no quoting in it can reach the shell.
type scriptRunner struct {
	cmdline   string
	sc        taskdata.ShardingContext
	dir       string
	endRecord string // written by the supervisor
	// stdout and stderr take the script's output; nil for the executor's own, which the agent
	// gave it: its container logger's (2.1.5 and Mesos's command executor pass theirs on too).
	// Opening the sandbox's files by name wrote behind a logger's back: past a log-rotating
	// logger's count, so the file grew without bound, and never to a journald or fluent one.
	stdout, stderr *os.File
}

func (r *scriptRunner) run(ctx context.Context, k killing) error {
	if ctx.Err() != nil {
		return errKilled // killed before it started: the script is not run at all
	}
	ctxJSON, err := json.Marshal(r.sc)
	if err != nil {
		return err
	}
	argv := []string{"/bin/sh", "-c", r.cmdline + ` "$1"`, "sh", string(ctxJSON)}
	env := append(scriptEnv(os.Environ()), shardEnv(r.sc)...)
	stdout, stderr := r.stdout, r.stderr
	if stdout == nil {
		stdout = os.Stdout
	}
	if stderr == nil {
		stderr = os.Stderr
	}
	// The supervisor kills every process of the script when it ends, when it is killed, and
	// when this executor dies.
	sup, err := supervise.Start(argv, r.dir, env, stdout, stderr, r.endRecord)
	if err != nil {
		return fmt.Errorf("cannot start the script: %w", err)
	}
	select {
	case x := <-sup.Done():
		return scriptResult(x)
	case <-ctx.Done():
	}
	for {
		grace, cut := k.graceAndCut()
		sup.Terminate(grace)
		select {
		case <-sup.Done():
			return errKilled
		case <-cut: // a later kill cut the grace: the supervisor keeps the earlier deadline
		}
	}
}

// shardVars are the variables that tell a script of its shard, beside its argument (SPEC §6.3).
var shardVars = []string{"EJCLOUD_JOB_NAME", "EJCLOUD_TASK_ID", "EJCLOUD_SHARDING_ITEM",
	"EJCLOUD_SHARDING_TOTAL_COUNT", "EJCLOUD_SHARDING_PARAMETER", "EJCLOUD_JOB_PARAMETER"}

// shardEnv is shardVars' values for sc.
func shardEnv(sc taskdata.ShardingContext) []string {
	vals := []string{sc.JobName, sc.TaskID, strconv.Itoa(sc.ShardingItem), strconv.Itoa(sc.ShardingTotalCount),
		sc.ShardingParameter, sc.JobParameter}
	env := make([]string, len(shardVars))
	for i, name := range shardVars {
		env[i] = name + "=" + vals[i]
	}
	return env
}

// scriptEnv is the executor's environment less what a script must not hold: the agent's
// token for this executor, with which a script could end its siblings' tasks (Mesos's own
// executor library unsets it for the same reason), and any shardVars the executor itself was
// started with (by an agent's --executor_environment_variables, or by another job's script):
// the script's shell takes the first of two values of a name, so they hid the shard's own.
func scriptEnv(env []string) []string {
	return slices.DeleteFunc(env, func(kv string) bool {
		name, _, _ := strings.Cut(kv, "=")
		return name == "MESOS_EXECUTOR_AUTHENTICATION_TOKEN" || slices.Contains(shardVars, name)
	})
}

func scriptResult(x supervise.Exit) error {
	switch ws := x.Status; {
	case x.Err != nil:
		return x.Err
	case ws.Signaled():
		return &jobFailure{cause: "script killed by signal " + ws.Signal().String()}
	case ws.ExitStatus() != 0:
		return &jobFailure{cause: fmt.Sprintf("script exited with status %d", ws.ExitStatus())}
	}
	return nil
}

// goRunner runs an SDK job. A killed Go job is asked to stop through its context; if it does
// not return within the grace period the task is reported killed anyway and the job is
// abandoned (Go cannot stop a goroutine from outside).
type goRunner struct {
	sc        taskdata.ShardingContext
	f         func(ctx context.Context) error
	endRecord string
}

func (r *goRunner) run(ctx context.Context, k killing) error {
	if ctx.Err() != nil {
		return errKilled // killed before it started: the job is not run at all
	}
	done := make(chan error, 1)
	go func() {
		returned := false
		defer func() {
			if returned {
				return
			}
			// A panic, or runtime.Goexit (recover gives nil): either way the job did not
			// return, and its task must still end.
			cause := "the job's goroutine ended without returning (runtime.Goexit)"
			if p := recover(); p != nil {
				cause = fmt.Sprintf("panic: %v", p)
				fmt.Fprintf(os.Stderr, "ejcloud executor: job of task %s panicked: %v\n%s", r.sc.TaskID, p, debug.Stack())
			}
			r.recordEnd(ctx, 2)
			done <- &jobFailure{cause: cause}
		}()
		err := r.f(ctx)
		returned = true
		r.recordEnd(ctx, map[bool]int{true: 0, false: 1}[err == nil])
		if err != nil {
			done <- &jobFailure{cause: err.Error()}
			return
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if ctx.Err() != nil {
			return errKilled
		}
		return err
	case <-ctx.Done():
	}
	// As a script's supervisor does: a later kill may bring the end closer, never put it off.
	var deadline time.Time
	for {
		grace, cut := k.graceAndCut()
		if at := time.Now().Add(grace); deadline.IsZero() || at.Before(deadline) {
			deadline = at
		}
		select {
		case <-done:
			return errKilled
		case <-time.After(time.Until(deadline)):
			return errKilled
		case <-cut:
		}
	}
}

// recordEnd records that the job ended on its own with code (0 ok, 1 an error, 2 a panic), as a
// script's exit would be; a job that ended because it was killed is not recorded.
func (r *goRunner) recordEnd(ctx context.Context, code int) {
	if r.endRecord == "" || ctx.Err() != nil {
		return
	}
	if err := taskend.Write(r.endRecord, taskend.Record{Exited: true, Code: code}); err != nil {
		fmt.Fprintln(os.Stderr, "ejcloud executor:", err)
	}
}
