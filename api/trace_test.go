package api

import (
	"context"
	"encoding/json"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/eventtrace"
	"github.com/ejcloud/ejcloud/taskdata"
)

var now = time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC) // the fixture's clock

// traced is seeded() with an SQLite event trace holding two executions (one running, one
// failed), three status traces and statistics rows.
func traced(t *testing.T) (*fixture, *eventtrace.DB) {
	t.Helper()
	db, err := eventtrace.Open(context.Background(), "sqlite://"+filepath.Join(t.TempDir(), "trace.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	log := logrus.New()
	log.SetOutput(io.Discard)
	w := eventtrace.NewWriter(db, eventtrace.WriterConfig{}, log)
	tid := "job@-@0@-@READY@-@agent-S0@-@u1"
	start := now.Add(-time.Hour)
	w.Execution(taskdata.Execution{ID: "run-1", JobName: "job", TaskID: tid, Hostname: "h1", IP: "127.0.0.1", ShardingItem: 0, ExecutionSource: "NORMAL_TRIGGER", StartTime: start})
	failed := taskdata.Execution{ID: "run-2", JobName: "job", TaskID: "job@-@1@-@FAILOVER@-@agent-S0@-@u2", Hostname: "h1", IP: "127.0.0.2", ShardingItem: 1, ExecutionSource: "FAILOVER", StartTime: start.Add(time.Minute)}
	failed.Complete(start.Add(2*time.Minute), io.ErrUnexpectedEOF)
	w.Execution(failed)
	for i, st := range []string{"TASK_STAGING", "TASK_RUNNING", "TASK_FINISHED"} {
		w.Trace(eventtrace.StatusTrace{JobName: "job", TaskID: tid, SlaveID: "agent-S0", Source: "CLOUD_SCHEDULER", ExecutionType: "READY", ShardingItems: "[0]", State: st, CreationTime: start.Add(time.Duration(i) * time.Second)})
	}
	w.Close()
	ctx := context.Background()
	res := eventtrace.NewResults()
	s := &eventtrace.Statistics{DB: db, Results: res, Source: countSource{}, Log: log, Now: func() time.Time { return now.Add(-2 * time.Minute) }}
	res.Add(true)
	res.Add(false)
	s.Tick(ctx, now.Add(-3*time.Minute), now.Add(-2*time.Minute))
	res.Add(true)
	s.Now = func() time.Time { return now }
	s.Tick(ctx, now.Add(-time.Minute), now) // a minute missed, and the day turns
	res.Add(true)                           // pending: counted in online and lastWeek
	f := seeded()
	f.h = New(f.store, f.sched, Config{Log: log, Zone: "UTC", Now: func() time.Time { return now }, Trace: &Trace{DB: db, Results: res}})
	return f, db
}

type countSource struct{}

func (countSource) RunningCounts(context.Context) (int, int, error) { return 5, 2, nil }
func (countSource) RegisteredJobs(context.Context) (int, error)     { return 2, nil }

func decode[T any](t *testing.T, body string) T {
	t.Helper()
	var v T
	if err := json.Unmarshal([]byte(body), &v); err != nil {
		t.Fatalf("%v: %s", err, body)
	}
	return v
}

func TestTraceEndpoints(t *testing.T) {
	f, _ := traced(t)
	cases := []struct {
		name, path string
		code       int
		want       []string // substrings of the body
	}{
		{"executions, newest first", "/api/job/events/executions", 200, []string{`"total":2`, `"rows":[{"id":"run-2"`, `"failureCause":"unexpected EOF","success":false,"running":false`, `"id":"run-1"`, `"success":false,"running":true`, `"completeTime":null`}},
		{"executions of a host", "/api/job/events/executions?ip=127.0.0.1", 200, []string{`"total":1`, `"id":"run-1"`}},
		{"failed executions", "/api/job/events/executions?isSuccess=false", 200, []string{`"total":1`, `"id":"run-2"`, `"source":"FAILOVER"`}},
		{"executions by source", "/api/job/events/executions?executionSource=NORMAL_TRIGGER", 200, []string{`"total":1`, `"id":"run-1"`}},
		{"executions, a page past 10000", "/api/job/events/executions?page=10001", 200, []string{`"total":2`, `"rows":[]`}},
		{"executions, page 0", "/api/job/events/executions?page=0", 400, []string{`"field":"page"`}},
		{"executions, second page of one", "/api/job/events/executions?per_page=1&page=2&sort=startTime&order=desc", 200, []string{`"total":2`, `"id":"run-1"`}},
		{"executions in a time range", "/api/job/events/executions?startTime=2026-11-21%2023:00:30&endTime=2026-11-22", 200, []string{`"total":1`, `"id":"run-2"`}},
		{"status traces ascending", "/api/job/events/statusTraces?sort=creationTime&order=asc&per_page=1", 200, []string{`"total":3`, `"state":"TASK_STAGING"`, `"shardingItems":"[0]"`, `"slaveId":"agent-S0"`, `"executionType":"READY"`, `"originalTaskId":""`}},
		{"status traces of a state", "/api/job/events/statusTraces?state=TASK_FINISHED", 200, []string{`"total":1`}},
		{"executions by failure cause", "/api/job/events/executions?sort=failureCause&order=asc", 200, []string{`"total":2`}},
		{"executions by failure_cause", "/api/job/events/executions?sort=failure_cause&order=desc", 200, []string{`"total":2`}},
		{"failure cause is no filter", "/api/job/events/executions?failureCause=x", 200, []string{`"total":2`}},
		{"sort injection", "/api/job/events/executions?sort=id%3BDROP%20TABLE%20JOB_EXECUTION_LOG", 400, []string{`"field":"sort"`}},
		{"filter injection", "/api/job/events/statusTraces?jobName=job%27%20OR%20%271%27%3D%271", 400, []string{`"field":"jobName"`}},
		{"state injection", "/api/job/events/statusTraces?state=TASK_RUNNING%27--", 400, []string{`"field":"state"`}},
		{"minute results of 24 hours, gap filled", "/api/job/statistics/tasks/results?since=last24hours", 200, []string{`"successCount":1,"failedCount":1,"statisticInterval":"MINUTE"`, `"successCount":0,"failedCount":0`, `"successCount":1,"failedCount":0`}},
		{"last minute", "/api/job/statistics/tasks/results/lastMinute", 200, []string{`"successCount":1,"failedCount":0,"statisticInterval":"MINUTE","statisticsTime":1795305600000`, `"id":3`, `"creationTime":`}},
		{"last hour", "/api/job/statistics/tasks/results/lastHour", 200, []string{`"successCount":2,"failedCount":1,"statisticInterval":"HOUR"`}},
		{"since online", "/api/job/statistics/tasks/results/online", 200, []string{`"successCount":3,"failedCount":1,"statisticInterval":"DAY"`}},
		{"last week", "/api/job/statistics/tasks/results/lastWeek", 200, []string{`"successCount":3,"failedCount":1`}},
		{"last day", "/api/job/statistics/tasks/results/lastDay", 200, []string{`"successCount":3,"failedCount":1,"statisticInterval":"DAY"`}},
		{"running tasks", "/api/job/statistics/tasks/running?since=lastWeek", 200, []string{`"runningCount":5`, `"statisticsTime":1795305600000`}},
		{"running jobs", "/api/job/statistics/jobs/running?since=lastWeek", 200, []string{`"runningCount":2`}},
		{"running jobs without since", "/api/job/statistics/jobs/running", 200, []string{`[]`}},
		{"registered jobs", "/api/job/statistics/jobs/register", 200, []string{`"registeredCount":2`}},
		{"job types", "/api/job/statistics/jobs/type", 200, []string{`{"scriptJobCount":2,"simpleJobCount":0,"dataflowJobCount":0}`}},
		{"execution types", "/api/job/statistics/jobs/executionType", 200, []string{`{"transientJobCount":1,"daemonJobCount":1}`}},
	}
	for _, c := range cases {
		rec := f.do("GET", c.path, "")
		body := rec.Body.String()
		if rec.Code != c.code {
			t.Errorf("%s: %d %s; want %d", c.name, rec.Code, body, c.code)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(body, w) {
				t.Errorf("%s: body %s lacks %s", c.name, body, w)
			}
		}
	}
	// The injection attempts touched nothing.
	p := decode[eventtrace.Page[eventtrace.Execution]](t, f.do("GET", "/api/job/events/executions", "").Body.String())
	tr := decode[eventtrace.Page[eventtrace.Trace]](t, f.do("GET", "/api/job/events/statusTraces", "").Body.String())
	if p.Total != 2 || tr.Total != 3 {
		t.Fatalf("after the attempts: %d executions, %d traces; want 2 and 3", p.Total, tr.Total)
	}
}

// Without a database: 2.1.5's empty shapes, with every field, and the job counts all the same.
func TestTraceEndpointsWithoutDatabase(t *testing.T) {
	f := seeded()
	cases := []struct{ path, want string }{
		{"/api/job/events/executions", `{"total":0,"rows":[]}`},
		{"/api/job/events/statusTraces?jobName=job", `{"total":0,"rows":[]}`},
		{"/api/job/statistics/tasks/results/online", `{"id":0,"successCount":0,"failedCount":0,"statisticInterval":"DAY","statisticsTime":1795305600000,"creationTime":1795305600000}`},
		{"/api/job/statistics/tasks/results/lastMinute", `{"id":0,"successCount":0,"failedCount":0,"statisticInterval":"MINUTE","statisticsTime":1795305600000,"creationTime":1795305600000}`},
		{"/api/job/statistics/tasks/results?since=last24hours", `[]`},
		{"/api/job/statistics/tasks/running?since=lastWeek", `[]`},
		{"/api/job/statistics/jobs/register", `[]`},
		{"/api/job/statistics/jobs/type", `{"scriptJobCount":2,"simpleJobCount":0,"dataflowJobCount":0}`},
		{"/api/job/statistics/jobs/executionType", `{"transientJobCount":1,"daemonJobCount":1}`},
	}
	for _, c := range cases {
		rec := f.do("GET", c.path, "")
		if got := strings.TrimSpace(rec.Body.String()); rec.Code != 200 || got != c.want {
			t.Errorf("GET %s: %d %s; want 200 %s", c.path, rec.Code, got, c.want)
		}
	}
	// Parameters are checked all the same: an injection is 400 with or without a database.
	for _, p := range []string{"/api/job/events/executions?sort=1%3BSELECT", "/api/job/events/statusTraces?source=x%27"} {
		if rec := f.do("GET", p, ""); rec.Code != 400 {
			t.Errorf("GET %s: %d %s; want 400", p, rec.Code, rec.Body)
		}
	}
}

// A database that cannot be read is a dependency that cannot serve: 503, as for ZooKeeper and
// Mesos, not an internal fault; parameters are still checked first.
func TestTraceEndpointsWhenTheDatabaseFails(t *testing.T) {
	f, db := traced(t)
	db.Close()
	for _, p := range []string{"/api/job/events/executions", "/api/job/events/statusTraces?jobName=job",
		"/api/job/statistics/tasks/results/online", "/api/job/statistics/tasks/results?since=last24hours",
		"/api/job/statistics/tasks/running?since=lastWeek", "/api/job/statistics/jobs/register"} {
		rec := f.do("GET", p, "")
		if rec.Code != 503 || !strings.Contains(rec.Body.String(), "event trace database") {
			t.Errorf("GET %s: %d %s; want 503 naming the event trace database", p, rec.Code, rec.Body)
		}
	}
	if rec := f.do("GET", "/api/job/events/executions?sort=1%3BSELECT", ""); rec.Code != 400 {
		t.Errorf("an injection with the database down: %d %s; want 400", rec.Code, rec.Body)
	}
}

// lastDay sums the hour rows of the last 24 hours: a row stamped H holds the hour before H, so
// the row stamped 24 hours ago holds the 25th hour back and is left out. This hour's results,
// not yet in a row, are added.
func TestTraceLastDayIsTheLast24Hours(t *testing.T) {
	f, db := traced(t)
	ctx := context.Background()
	if err := db.AddTaskResult(ctx, eventtrace.Hour, now.Add(-24*time.Hour), 100, 100); err != nil { // 24 to 25 hours ago
		t.Fatal(err)
	}
	if err := db.AddTaskResult(ctx, eventtrace.Hour, now.Add(-23*time.Hour), 10, 20); err != nil { // 23 to 24 hours ago
		t.Fatal(err)
	}
	rec := f.do("GET", "/api/job/statistics/tasks/results/lastDay", "")
	// The fixture's hour row at now holds 2 successes and 1 failure, and 1 success is pending.
	if want := `"successCount":13,"failedCount":21`; rec.Code != 200 || !strings.Contains(rec.Body.String(), want) {
		t.Fatalf("lastDay: %d %s; want %s", rec.Code, rec.Body, want)
	}
}

// A statistics period that is none of the endpoint's is a bad parameter, answered 400 naming
// it and the valid ones, with or without a database: not the 404 of an unknown endpoint.
func TestTraceStatisticsPeriodIsChecked(t *testing.T) {
	withDB, _ := traced(t)
	for _, f := range []struct {
		name string
		f    *fixture
	}{{"with a database", withDB}, {"without", seeded()}} {
		for _, c := range []struct {
			period string
			code   int
		}{{"lastMinute", 200}, {"lastDay", 200}, {"lastMonth", 400}, {"LastWeek", 400}, {"last%20week", 400}} {
			rec := f.f.do("GET", "/api/job/statistics/tasks/results/"+c.period, "")
			body := rec.Body.String()
			if rec.Code != c.code || c.code == 400 && (!strings.Contains(body, `"field":"period"`) || !strings.Contains(body, "online, lastWeek, lastHour, lastMinute, lastDay")) {
				t.Errorf("%s: period %s: %d %s; want %d (a 400 naming period and the valid ones)", f.name, c.period, rec.Code, body, c.code)
			}
		}
	}
}

// A sharding item is an INT column: a filter beyond int32 is refused naming the parameter,
// with or without a database (PostgreSQL could not bind it: a 503).
func TestTraceShardingItemIsBounded(t *testing.T) {
	f, _ := traced(t)
	for _, c := range []struct {
		item string
		code int
	}{{"2147483647", 200}, {"2147483648", 400}, {"9223372036854775808", 400}, {"-1", 400}, {"x", 400}} {
		rec := f.do("GET", "/api/job/events/executions?shardingItem="+c.item, "")
		if rec.Code != c.code || c.code == 400 && !strings.Contains(rec.Body.String(), `"field":"shardingItem"`) {
			t.Errorf("shardingItem=%s: %d %s; want %d (a 400 naming shardingItem)", c.item, rec.Code, rec.Body, c.code)
		}
	}
}
