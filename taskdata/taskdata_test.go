package taskdata

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/taskid"
)

func validPayload() Payload {
	j := config.Job{JobName: "job", AppName: "app", JobType: config.Script, JobExecutionType: config.Transient,
		TimeZone: "UTC", ShardingTotalCount: 3, CPUCount: 0.1, MemoryMB: 16, ScriptCommandLine: "true",
		Placement: config.Spread, JobShardingStrategyType: config.AvgAllocation, JobProperties: map[string]string{}}
	id := taskid.New(taskid.Meta{JobName: "job", Item: 2}, taskid.Ready, "S0")
	return Payload{ShardingContext: ShardingContext{TaskID: id.String(), JobName: "job", ShardingTotalCount: 3, ShardingItem: 2}, Job: j}
}

func TestDecodePayload(t *testing.T) {
	good := validPayload()
	got, err := DecodePayload(good.Encode())
	if err != nil || got.ShardingContext != good.ShardingContext || got.Job.ScriptCommandLine != "true" {
		t.Fatalf("DecodePayload(Encode(p)) = %+v, %v", got, err)
	}
	mutate := func(f func(*Payload)) []byte { p := validPayload(); f(&p); return p.Encode() }
	for _, tc := range []struct {
		name string
		data []byte
		want string
	}{
		{"empty", nil, "empty"},
		{"blank", []byte("  \n"), "empty"},
		{"not JSON", []byte("shard 2"), "not the JSON payload"},
		{"two objects", append(good.Encode(), []byte("{}")...), "after the JSON payload"},
		{"bad task id", mutate(func(p *Payload) { p.ShardingContext.TaskID = "x" }), "taskId"},
		{"job name mismatch", mutate(func(p *Payload) { p.ShardingContext.JobName = "other" }), "jobName"},
		{"item out of range", mutate(func(p *Payload) { p.ShardingContext.ShardingItem = 3 }), "sharding item"},
		{"no script", mutate(func(p *Payload) { p.Job.ScriptCommandLine = "" }), "scriptCommandLine"},
		{"no class", mutate(func(p *Payload) { p.Job.JobType, p.Job.JobClass = config.Simple, " " }), "jobClass"},
		{"an unknown job type", mutate(func(p *Payload) { p.Job.JobType = "PYTHON" }), "jobType"},
		{"an unknown execution type", mutate(func(p *Payload) { p.Job.JobExecutionType = "" }), "jobExecutionType"},
	} {
		_, err := DecodePayload(tc.data)
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: DecodePayload error = %v; want ErrInvalid mentioning %q", tc.name, err, tc.want)
		}
	}
}

// The executor checks what it runs, not the registration's rules: a job the scheduler reads
// (a 2.1.5 node naming an item twice, the last entry winning) or a field a newer scheduler
// allows must not fail every task as invalid task data, which stops the job.
func TestDecodePayloadTakesWhatTheSchedulerRuns(t *testing.T) {
	node := []byte(`{"jobName":"job","appName":"app","jobType":"SCRIPT","jobExecutionType":"TRANSIENT","cron":"0/5 * * * * ?",` +
		`"shardingTotalCount":3,"shardingItemParameters":"0=a,1=b,1=c,2=d","cpuCount":0.1,"memoryMB":16,"scriptCommandLine":"true"}`)
	j, err := config.ParseJob(node)
	if err != nil {
		t.Fatalf("ParseJob of a 2.1.5 node: %v", err)
	}
	p := validPayload()
	p.Job = j
	if _, err := DecodePayload(p.Encode()); err != nil {
		t.Errorf("a 2.1.5 job with an item given twice: %v", err)
	}
	p = validPayload()
	p.Job.ConcurrencyPolicy, p.Job.Placement, p.Job.CPUCount = "Future", "ZONE", 0
	if _, err := DecodePayload(p.Encode()); err != nil {
		t.Errorf("values the executor does not use: %v", err)
	}
}

func TestExecutionCompleteTruncatesTheCause(t *testing.T) {
	var e Execution
	e.Complete(time.Unix(0, 0), errors.New(strings.Repeat("x", 5000)))
	if e.Success || len(e.FailureCause) != MaxFailureCause || e.CompleteTime == nil {
		t.Fatalf("Complete with a long failure: success %v, cause length %d", e.Success, len(e.FailureCause))
	}
	e.Complete(time.Unix(1, 0), nil)
	if !e.Success {
		t.Fatal("Complete(nil) must be a success")
	}
}

func TestSource(t *testing.T) {
	fo := taskid.New(taskid.Meta{JobName: "j", Item: 0}, taskid.Failover, "S0")
	if Source(fo.String()) != FailoverRun || Source("garbage") != NormalTrigger {
		t.Fatal("Source must tell failover relaunches from normal runs")
	}
}

// FuzzDecodePayload: no input panics; anything accepted is a valid, consistent payload.
func FuzzDecodePayload(f *testing.F) {
	f.Add(validPayload().Encode())
	f.Add([]byte(`{"shardingContext":{"taskId":"j@-@0@-@READY@-@S@-@u","jobName":"j","shardingTotalCount":1},"job":{}}`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := DecodePayload(data)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("error %v does not wrap ErrInvalid", err)
			}
			return
		}
		if p.Job.Runnable() != nil || p.ShardingContext.ShardingItem >= p.ShardingContext.ShardingTotalCount {
			t.Fatalf("accepted an inconsistent payload %+v", p)
		}
	})
}
