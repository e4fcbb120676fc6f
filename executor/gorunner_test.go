package executor

import (
	"context"
	"errors"
	"reflect"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/executor/job"
	"github.com/ejcloud/ejcloud/taskdata"
)

// A Go job's run ends its task however the job's goroutine ends: returning, panicking, or
// runtime.Goexit (which recover cannot see: the task stayed RUNNING for good); and a job killed
// before it started is not run at all.
func TestAGoJobsRunEndsHoweverItsGoroutineEnds(t *testing.T) {
	t.Parallel()
	grace := graceOf(time.Second)
	for _, tc := range []struct {
		name   string
		f      func(context.Context) error
		killed bool
		want   string // the job failure's cause; "" for success, "killed" for errKilled
	}{
		{"returns", func(context.Context) error { return nil }, false, ""},
		{"fails", func(context.Context) error { return errors.New("boom") }, false, "boom"},
		{"panics", func(context.Context) error { panic("oops") }, false, "panic: oops"},
		{"calls runtime.Goexit", func(context.Context) error { runtime.Goexit(); return nil }, false, "runtime.Goexit"},
		{"killed before it starts", func(context.Context) error { t.Error("a job killed before it started was run"); return nil }, true, "killed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.killed {
				cancel()
			}
			r := &goRunner{f: tc.f}
			done := make(chan error, 1)
			go func() { done <- r.run(ctx, grace) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the run did not end")
			}
			var jf *jobFailure
			switch {
			case tc.want == "":
				if err != nil {
					t.Fatalf("%v; want success", err)
				}
			case tc.want == "killed":
				if !errors.Is(err, errKilled) {
					t.Fatalf("%v; want errKilled", err)
				}
			case !errors.As(err, &jf) || !strings.Contains(jf.cause, tc.want):
				t.Fatalf("%v; want a job failure naming %q", err, tc.want)
			}
		})
	}
}

// An SDK job reads its job's jobProperties (SPEC §3.2: passed to the executor unchanged), and a
// jobClass registered under the other job type is named as such, not as unknown.
func TestSDKJobsGetTheirJobProperties(t *testing.T) {
	t.Parallel()
	var simple, flow map[string]string
	job.Register("test.props-simple", job.SimpleFunc(func(ctx context.Context, _ job.ShardingContext) error {
		simple = job.Properties(ctx)
		return nil
	}))
	job.RegisterDataflow("test.props-flow", dataflowFunc(func(ctx context.Context) { flow = job.Properties(ctx) }))
	props := map[string]string{"region": "eu", "batch": "500"}
	payload := func(jobType, class string) taskdata.Payload {
		j := config.Job{JobName: "j", JobType: jobType, JobClass: class, JobExecutionType: config.Transient, JobProperties: props}
		return taskdata.Payload{ShardingContext: taskdata.ShardingContext{TaskID: "t", JobName: "j", ShardingTotalCount: 1}, Job: j}
	}
	for _, p := range []taskdata.Payload{payload(config.Simple, "test.props-simple"), payload(config.Dataflow, "test.props-flow")} {
		r, err := (&Executor{}).runnerFor(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.run(context.Background(), graceOf(time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(simple, props) || !reflect.DeepEqual(flow, props) {
		t.Fatalf("the SIMPLE job saw %v and the DATAFLOW job %v; want %v", simple, flow, props)
	}
	if got := job.Properties(context.Background()); got == nil || len(got) != 0 {
		t.Fatalf("Properties outside a shard = %#v; want an empty map", got)
	}
	for _, tc := range []struct {
		p    taskdata.Payload
		want string
	}{
		{payload(config.Simple, "test.props-flow"), "registered in this executor as a DATAFLOW job"},
		{payload(config.Dataflow, "test.props-simple"), "registered in this executor as a SIMPLE job"},
		{payload(config.Simple, "test.nothing"), `unknown jobClass "test.nothing"`},
	} {
		if _, err := (&Executor{}).runnerFor(tc.p); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("runnerFor(%s %s): %v; want %q", tc.p.Job.JobType, tc.p.Job.JobClass, err, tc.want)
		}
	}
}

// dataflowFunc is a DATAFLOW job that calls f at its one fetch and fetches nothing.
type dataflowFunc func(ctx context.Context)

func (f dataflowFunc) Fetch(ctx context.Context, _ job.ShardingContext) ([]any, error) {
	f(ctx)
	return nil, nil
}

func (f dataflowFunc) Process(context.Context, job.ShardingContext, []any) error { return nil }
