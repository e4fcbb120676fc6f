package lite

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/ejcloud/ejcloud/executor/job"
)

// ShardingContext tells an item's run who it is, as in the cloud mode's SDK. Its TaskID is
// "{jobName}@-@{item}@-@{fire}@-@{instanceId}", fire being the scheduled fire time in Unix
// milliseconds (the trigger time for a triggered run): runs of one item for one fire share its
// first three parts, which a job whose side effects must not repeat can key them by.
type ShardingContext = job.ShardingContext

// killGrace is how long a script gets between SIGTERM and SIGKILL when its run is cancelled.
const killGrace = 3 * time.Second

// runItem runs one item of the job and returns its error; a panic is an error too.
func (in *Instance) runItem(ctx context.Context, cfg *parsed, sc ShardingContext) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	switch cfg.JobType {
	case Simple:
		if in.simple == nil {
			return fmt.Errorf("job %s is SIMPLE but this instance has no SimpleJob", cfg.JobName)
		}
		return in.simple.Execute(ctx, sc)
	case Dataflow:
		if in.dataflow == nil {
			return fmt.Errorf("job %s is DATAFLOW but this instance has no DataflowJob", cfg.JobName)
		}
		return job.RunDataflow(ctx, in.dataflow, sc, cfg.StreamingProcess)
	case Script:
		return runScript(ctx, cfg.ScriptCommandLine, sc)
	}
	return fmt.Errorf("unknown job type %q", cfg.JobType)
}

// runScript runs the command line as the cloud executor does (SPEC §6.3): the sharding
// context is one quoted argument, the EJCLOUD_* variables say the same, and the script runs in
// its own process group, which a cancelled run ends (SIGTERM, then SIGKILL after killGrace).
func runScript(ctx context.Context, command string, sc ShardingContext) error {
	arg, err := json.Marshal(sc)
	if err != nil {
		return err
	}
	cmd := exec.Command("/bin/sh", "-c", command+` "$1"`, "sh", string(arg))
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Env = append(os.Environ(),
		"EJCLOUD_JOB_NAME="+sc.JobName,
		"EJCLOUD_TASK_ID="+sc.TaskID,
		"EJCLOUD_SHARDING_ITEM="+strconv.Itoa(sc.ShardingItem),
		"EJCLOUD_SHARDING_TOTAL_COUNT="+strconv.Itoa(sc.ShardingTotalCount),
		"EJCLOUD_SHARDING_PARAMETER="+sc.ShardingParameter,
		"EJCLOUD_JOB_PARAMETER="+sc.JobParameter)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start script: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("script: %w", err)
		}
		return nil
	case <-ctx.Done():
	}
	pgid := cmd.Process.Pid
	syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-done:
	case <-time.After(killGrace):
		syscall.Kill(-pgid, syscall.SIGKILL)
		<-done
	}
	return fmt.Errorf("script: %w", ctx.Err())
}
