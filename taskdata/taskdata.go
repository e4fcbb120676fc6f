// Package taskdata is the contract between the scheduler and the executor inside Mesos's opaque
// data fields:
//
//	TaskInfo.data      Payload: the shard's sharding context and its job config (SPEC §6.1)
//	TaskStatus.data    Status: the job-failure marker (SPEC §6.2, §5.7) and the execution event
//	ExecutorInfo.data  ExecutorData: what the executor needs of its app (never credentials)
package taskdata

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/taskid"
)

// ErrInvalid is wrapped by every decoding error.
var ErrInvalid = errors.New("invalid task data")

// ShardingContext tells a shard who it is; SDK jobs receive it as job.ShardingContext.
type ShardingContext struct {
	TaskID             string `json:"taskId"`
	JobName            string `json:"jobName"`
	ShardingTotalCount int    `json:"shardingTotalCount"`
	JobParameter       string `json:"jobParameter"`
	ShardingItem       int    `json:"shardingItem"`
	ShardingParameter  string `json:"shardingParameter"`
}

// Payload is TaskInfo.data.
type Payload struct {
	ShardingContext ShardingContext `json:"shardingContext"`
	Job             config.Job      `json:"job"`
}

// Encode returns the JSON form.
func (p Payload) Encode() []byte {
	b, err := json.Marshal(p)
	if err != nil {
		panic(fmt.Sprintf("taskdata: encode payload: %v", err)) // plain structs always encode
	}
	return b
}

// DecodePayload decodes and checks TaskInfo.data: it must be one JSON object whose sharding
// context names a task of its job, and whose job config says what to run (config.Job.Runnable).
func DecodePayload(data []byte) (Payload, error) {
	if len(bytes.TrimSpace(data)) == 0 {
		return Payload{}, fmt.Errorf("%w: TaskInfo.data is empty; it must hold the shard's JSON payload", ErrInvalid)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	var p Payload
	if err := dec.Decode(&p); err != nil {
		return Payload{}, fmt.Errorf("%w: TaskInfo.data is not the JSON payload {\"shardingContext\":…,\"job\":…}: %v", ErrInvalid, err)
	}
	if dec.More() {
		return Payload{}, fmt.Errorf("%w: TaskInfo.data has data after the JSON payload", ErrInvalid)
	}
	sc := p.ShardingContext
	id, err := taskid.Parse(sc.TaskID)
	switch {
	case err != nil:
		return Payload{}, fmt.Errorf("%w: shardingContext.taskId: %v", ErrInvalid, err)
	case sc.JobName == "" || sc.JobName != p.Job.JobName || id.JobName != sc.JobName:
		return Payload{}, fmt.Errorf("%w: shardingContext.jobName %q does not match the task id %q and job %q", ErrInvalid, sc.JobName, sc.TaskID, p.Job.JobName)
	case sc.ShardingTotalCount < 1 || sc.ShardingItem < 0 || sc.ShardingItem >= sc.ShardingTotalCount || id.Item != sc.ShardingItem:
		return Payload{}, fmt.Errorf("%w: sharding item %d of %d does not fit the task id %q", ErrInvalid, sc.ShardingItem, sc.ShardingTotalCount, sc.TaskID)
	}
	if err := p.Job.Runnable(); err != nil {
		return Payload{}, fmt.Errorf("%w: job config: %v", ErrInvalid, err)
	}
	return p, nil
}

// Execution sources, as Elastic-Job records them.
const (
	NormalTrigger = "NORMAL_TRIGGER"
	FailoverRun   = "FAILOVER"
)

// MaxFailureCause bounds Execution.FailureCause, as the JOB_EXECUTION_LOG column does.
const MaxFailureCause = 4000

// Execution is one run of a shard, for the JOB_EXECUTION_LOG that the scheduler writes: the
// executor never talks to a database.
type Execution struct {
	ID              string     `json:"id"`
	JobName         string     `json:"jobName"`
	TaskID          string     `json:"taskId"`
	Hostname        string     `json:"hostname"`
	IP              string     `json:"ip"`
	ShardingItem    int        `json:"shardingItem"`
	ExecutionSource string     `json:"executionSource"`
	StartTime       time.Time  `json:"startTime"`
	CompleteTime    *time.Time `json:"completeTime,omitempty"`
	Success         bool       `json:"success"`
	FailureCause    string     `json:"failureCause,omitempty"`
}

// Complete records the end of the run; a failure cause longer than MaxFailureCause is cut.
func (e *Execution) Complete(at time.Time, failure error) {
	e.CompleteTime = &at
	e.Success = failure == nil
	if failure != nil {
		cause := failure.Error()
		if len(cause) > MaxFailureCause {
			cause = cause[:MaxFailureCause]
		}
		e.FailureCause = cause
	}
}

// Status is TaskStatus.data from the executor.
type Status struct {
	// JobFailed marks a FAILED task that failed by the job's own fault (a script exiting
	// non-zero, an SDK job returning an error): the scheduler does not fail it over.
	JobFailed bool       `json:"jobFailed,omitempty"`
	Execution *Execution `json:"execution,omitempty"`
}

// Encode returns the JSON form.
func (s Status) Encode() []byte {
	b, _ := json.Marshal(s)
	return b
}

// DecodeStatus decodes TaskStatus.data; empty data is an empty Status.
func DecodeStatus(data []byte) (Status, error) {
	var s Status
	if len(bytes.TrimSpace(data)) == 0 {
		return s, nil
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return Status{}, fmt.Errorf("%w: TaskStatus.data: %v", ErrInvalid, err)
	}
	return s, nil
}

// ExecutorData is ExecutorInfo.data: what the executor needs of its app.
type ExecutorData struct {
	// EventTraceSamplingCount: daemon jobs report every N-th run (0 or 1: every run).
	EventTraceSamplingCount int `json:"eventTraceSamplingCount"`
}

// Encode returns the JSON form.
func (d ExecutorData) Encode() []byte {
	b, _ := json.Marshal(d)
	return b
}

// DecodeExecutorData decodes ExecutorInfo.data; empty data means the defaults.
func DecodeExecutorData(data []byte) (ExecutorData, error) {
	var d ExecutorData
	if len(bytes.TrimSpace(data)) == 0 {
		return d, nil
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return ExecutorData{}, fmt.Errorf("%w: ExecutorInfo.data: %v", ErrInvalid, err)
	}
	return d, nil
}

// Source returns the execution source of a task: FAILOVER for a relaunch.
func Source(taskID string) string {
	if id, err := taskid.Parse(taskID); err == nil && id.Type == taskid.Failover {
		return FailoverRun
	}
	return NormalTrigger
}
