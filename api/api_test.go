package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/taskid"
)

const appBody = `{"appName":"app","appURL":"http://127.0.0.1/app.tar.gz","bootstrapScript":"bin/start.sh"}`
const jobBody = `{"jobName":"job","appName":"app","jobType":"SCRIPT","jobExecutionType":"TRANSIENT","cron":"0/5 * * * * ?",
 "shardingTotalCount":"3","cpuCount":"0.5","memoryMB":"64","scriptCommandLine":"echo hi","timeZone":"UTC"}`

type fixture struct {
	log   *logrus.Logger
	store *fakeStore
	sched *fakeSched
	h     http.Handler
}

func newFixture(cfg Config) *fixture {
	st := newFakeStore()
	sc := &fakeSched{store: st, idle: map[string]bool{}}
	log := logrus.New()
	log.SetOutput(io.Discard)
	cfg.Log, cfg.Zone = log, "UTC"
	cfg.Now = func() time.Time { return time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC) }
	return &fixture{log: log, store: st, sched: sc, h: New(st, sc, cfg)}
}

func (f *fixture) do(method, path, body string, auth ...string) *httptest.ResponseRecorder {
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if len(auth) == 2 {
		req.SetBasicAuth(auth[0], auth[1])
	}
	rec := httptest.NewRecorder()
	f.h.ServeHTTP(rec, req)
	return rec
}

// seeded has an app "app", a job "job" and a DAEMON job "daemon".
func seeded() *fixture {
	f := newFixture(Config{})
	f.do("POST", "/api/app", appBody)
	f.do("POST", "/api/job/register", jobBody)
	d := strings.Replace(strings.Replace(jobBody, `"job"`, `"daemon"`, 1), "TRANSIENT", "DAEMON", 1)
	f.do("POST", "/api/job/register", d)
	f.sched.ops = nil
	return f
}

// withDeps is jobBody renamed, with dependsOn.
func withDeps(name string, deps ...string) string {
	var j map[string]any
	json.Unmarshal([]byte(jobBody), &j)
	j["jobName"], j["dependsOn"] = name, deps
	b, _ := json.Marshal(j)
	return string(b)
}

// plus is body, a JSON object, with member (`"name":value`) added at its end.
func plus(body, member string) string { return strings.TrimSuffix(body, "}") + "," + member + "}" }

// allowing is jobBody renamed, with concurrencyPolicy Allow.
func allowing(name string) string {
	var j map[string]any
	json.Unmarshal([]byte(jobBody), &j)
	j["jobName"], j["concurrencyPolicy"], j["shardsIndependent"] = name, "Allow", true
	b, _ := json.Marshal(j)
	return string(b)
}

func TestEndpoints(t *testing.T) {
	id := taskid.New(taskid.Meta{JobName: "job", Item: 1}, taskid.Failover, "S3")
	tests := []struct {
		name         string
		method, path string
		body         string
		wantCode     int
		wantBody     string // JSON compared structurally when it starts with [ or {; substring otherwise
		wantOps      []string
	}{
		{name: "register an app", method: "POST", path: "/api/app", body: strings.Replace(appBody, `"app"`, `"other"`, 1), wantCode: 204},
		{name: "register an app twice", method: "POST", path: "/api/app", body: appBody, wantCode: 409, wantBody: `app \"app\" already exists`},
		{name: "list apps", method: "GET", path: "/api/app/list", wantCode: 200, wantBody: `"appName":"app"`},
		{name: "get an app", method: "GET", path: "/api/app/app", wantCode: 200, wantBody: `"bootstrapScript":"bin/start.sh"`},
		{name: "get a missing app", method: "GET", path: "/api/app/nope", wantCode: 404, wantBody: `app \"nope\" does not exist`},
		{name: "partial app update", method: "PUT", path: "/api/app", body: `{"appName":"app","memoryMB":"256"}`, wantCode: 204, wantOps: []string{"app-updated app"}},
		{name: "update of a missing app", method: "PUT", path: "/api/app", body: `{"appName":"nope","memoryMB":256}`, wantCode: 404},
		{name: "update without appName", method: "PUT", path: "/api/app", body: `{"memoryMB":256}`, wantCode: 400, wantBody: `"field":"appName"`},
		{name: "update with an invalid value", method: "PUT", path: "/api/app", body: `{"appName":"app","memoryMB":1}`, wantCode: 400, wantBody: `"field":"memoryMB"`},
		{name: "update with malformed JSON", method: "PUT", path: "/api/app", body: `{"appName":"app","cpuCount":}`, wantCode: 400, wantBody: `"field":"body"`},
		{name: "update naming the app in another case", method: "PUT", path: "/api/app", body: `{"appName":"app","appname":"zzz"}`, wantCode: 400, wantBody: `"field":"appname"`},
		{name: "update with a null body", method: "PUT", path: "/api/app", body: `null`, wantCode: 400, wantBody: `"field":"body"`},
		{name: "app disabled?", method: "GET", path: "/api/app/app/disable", wantCode: 200, wantBody: "false"},
		{name: "disable an app", method: "POST", path: "/api/app/app/disable", wantCode: 204, wantOps: []string{"disable-app app"}},
		{name: "enable an app", method: "POST", path: "/api/app/app/enable", wantCode: 204, wantOps: []string{"enable-app app"}},
		{name: "enable an app, 2.1.5 form", method: "DELETE", path: "/api/app/app/disable", wantCode: 204, wantOps: []string{"enable-app app"}},
		{name: "disable a missing app", method: "POST", path: "/api/app/nope/disable", wantCode: 404},
		{name: "delete an app", method: "DELETE", path: "/api/app/app", wantCode: 204, wantOps: []string{"delete-app app"}},
		{name: "register a job", method: "POST", path: "/api/job/register", body: strings.Replace(jobBody, `"job"`, `"new"`, 1), wantCode: 204, wantOps: []string{"changed new"}},
		{name: "register a job twice", method: "POST", path: "/api/job/register", body: jobBody, wantCode: 409, wantBody: `job \"job\" already exists`},
		{name: "register a job of a missing app", method: "POST", path: "/api/job/register", body: strings.Replace(strings.Replace(jobBody, `"job"`, `"x"`, 1), `"app"`, `"nope"`, 1), wantCode: 400, wantBody: `"field":"appName"`},
		{name: "update a job", method: "PUT", path: "/api/job/update", body: jobBody, wantCode: 204, wantOps: []string{"update job"}},
		{name: "update a missing job", method: "PUT", path: "/api/job/update", body: strings.Replace(jobBody, `"job"`, `"nope"`, 1), wantCode: 404},
		{name: "deregister, raw name", method: "DELETE", path: "/api/job/deregister", body: "dep", wantCode: 204, wantOps: []string{"delete dep"}},
		{name: "deregister, JSON name", method: "DELETE", path: "/api/job/deregister", body: `"dep"`, wantCode: 204, wantOps: []string{"delete dep"}},
		{name: "deregister a job another depends on", method: "DELETE", path: "/api/job/deregister", body: "job", wantCode: 409,
			wantBody: `{"error":"job \"dep\" depends on job \"job\": take it out of \"dep\"'s dependsOn first"}`},
		{name: "deregister a missing job", method: "DELETE", path: "/api/job/deregister", body: "nope", wantCode: 404},
		{name: "deregister without a name", method: "DELETE", path: "/api/job/deregister", body: " ", wantCode: 400, wantBody: `"field":"jobName"`},
		{name: "trigger", method: "POST", path: "/api/job/trigger", body: "job", wantCode: 204, wantOps: []string{"trigger job"}},
		{name: "trigger a DAEMON job", method: "POST", path: "/api/job/trigger", body: "daemon", wantCode: 400, wantBody: `DAEMON job; only TRANSIENT jobs can be triggered","field":"jobName"`},
		{name: "trigger a missing job", method: "POST", path: "/api/job/trigger", body: "nope", wantCode: 404},
		{name: "list jobs", method: "GET", path: "/api/job/jobs", wantCode: 200, wantBody: `"jobName":"daemon"`},
		{name: "get a job", method: "GET", path: "/api/job/jobs/job", wantCode: 200, wantBody: `"shardingTotalCount":3`},
		{name: "get a missing job", method: "GET", path: "/api/job/jobs/nope", wantCode: 404, wantBody: `job \"nope\" does not exist`},
		{name: "job disabled?", method: "GET", path: "/api/job/job/disable", wantCode: 200, wantBody: "false"},
		{name: "disable a job", method: "POST", path: "/api/job/job/disable", wantCode: 204, wantOps: []string{"disable job"}},
		{name: "enable a job", method: "POST", path: "/api/job/job/enable", wantCode: 204, wantOps: []string{"enable job"}},
		{name: "enable a job, 2.1.5 form", method: "DELETE", path: "/api/job/job/disable", wantCode: 204, wantOps: []string{"enable job"}},
		{name: "next fire times", method: "GET", path: "/api/job/job/next?count=2", wantCode: 200, wantBody: `["2026-11-22T00:00:05Z","2026-11-22T00:00:10Z"]`},
		{name: "failure of a healthy job", method: "GET", path: "/api/job/job/failure", wantCode: 200, wantBody: `{"jobName":"job","stopped":false,"backoff":[]}`},
		{name: "failure of a stopped job", method: "GET", path: "/api/job/daemon/failure", wantCode: 200,
			wantBody: `{"jobName":"daemon","stopped":true,"stop":{"reason":"unknown jobClass","message":"unknown jobClass \"x\"","taskId":"` + id.String() + `","state":"TASK_ERROR","since":"2026-11-22T00:00:00Z"},` +
				`"backoff":[{"jobName":"daemon","shardingItem":2,"failures":3,"delaySeconds":4,"retryAt":"2026-11-22T00:00:04Z","lastFailure":"TASK_LOST"}]}`},
		{name: "failure of a missing job", method: "GET", path: "/api/job/nope/failure", wantCode: 404},
		{name: "fires of a job that has not fired", method: "GET", path: "/api/job/daemon/fires", wantCode: 200,
			wantBody: `{"jobName":"daemon","misfirePolicy":"skip","startingDeadline":0,"lastSlot":null,"fires":[]}`},
		{name: "fires, newest first, limited", method: "GET", path: "/api/job/job/fires?limit=2", wantCode: 200,
			wantBody: `{"jobName":"job","misfirePolicy":"fireAll","startingDeadline":30,"lastSlot":"2026-11-22T00:00:10Z","fires":[` +
				`{"slot":"2026-11-22T00:00:10Z","count":1,"outcome":"fired","launched":"2026-11-22T00:00:11Z","tasks":1,"taskIds":["` + id.String() + `"]},` +
				`{"slot":"2026-11-22T00:00:05Z","count":1,"outcome":"merged","reason":"merged into the run already queued"}]}`},
		{name: "fires since a change of cron", method: "GET", path: "/api/job/changed/fires", wantCode: 200,
			wantBody: `"lastSlot":"2026-11-22T00:00:05Z","cronSince":"2026-11-22T00:00:07Z","fires":[`},
		{name: "fires of a job waiting for its dependency", method: "GET", path: "/api/job/dep/fires", wantCode: 200,
			wantBody: `"dependsOn":["job"],"waiting":"dependsOn: waiting for \"job\""`},
		{name: "fires of a missing job", method: "GET", path: "/api/job/nope/fires", wantCode: 404},
		{name: "fires with a bad limit", method: "GET", path: "/api/job/job/fires?limit=65", wantCode: 400, wantBody: `"field":"limit"`},
		{name: "depends on a job", method: "POST", path: "/api/job/register", body: withDeps("b", "job"), wantCode: 204, wantOps: []string{"changed b"}},
		{name: "depends on a missing job", method: "POST", path: "/api/job/register", body: withDeps("b", "nope"), wantCode: 400, wantBody: `does not exist`},
		{name: "depends on a DAEMON job", method: "POST", path: "/api/job/register", body: withDeps("b", "daemon"), wantCode: 400, wantBody: `"field":"dependsOn"`},
		{name: "depends on an Allow job", method: "POST", path: "/api/job/register", body: withDeps("b", "par"), wantCode: 400,
			wantBody: `"field":"dependsOn"`},
		{name: "a job others depend on made Allow", method: "PUT", path: "/api/job/update", body: allowing("job"), wantCode: 400,
			wantBody: `{"error":"job \"dep\" depends on this job: a job others depend on cannot have concurrencyPolicy Allow","field":"concurrencyPolicy"}`},
		{name: "an Allow job", method: "POST", path: "/api/job/register", body: allowing("b"), wantCode: 204, wantOps: []string{"changed b"}},
		{name: "a job others depend on made trigger-only", method: "PUT", path: "/api/job/update", body: strings.Replace(jobBody, `"cron":"0/5 * * * * ?",`, "", 1), wantCode: 400,
			wantBody: `{"error":"job \"dep\" depends on this job: a job others depend on must have a cron","field":"cron"}`},
		{name: "depends on itself", method: "POST", path: "/api/job/register", body: withDeps("b", "b"), wantCode: 400, wantBody: `cycle: b → b`},
		{name: "an update that closes a cycle", method: "PUT", path: "/api/job/update", body: withDeps("job", "dep"), wantCode: 400,
			wantBody: `{"error":"dependsOn would close a cycle: job → dep → job","field":"dependsOn"}`},
		{name: "next with a bad count", method: "GET", path: "/api/job/job/next?count=0", wantCode: 400, wantBody: `"field":"count"`},
		{name: "running tasks", method: "GET", path: "/api/job/tasks/running", wantCode: 200,
			wantBody: `[{"id":"` + id.String() + `","metaInfo":{"jobName":"job","shardingItems":[1]},"type":"FAILOVER","slaveId":"S3","idle":true}]`},
		{name: "ready tasks", method: "GET", path: "/api/job/tasks/ready", wantCode: 200, wantBody: `[{"jobName":"job","times":2}]`},
		{name: "failover tasks", method: "GET", path: "/api/job/tasks/failover", wantCode: 200,
			wantBody: `[{"taskInfo":{"jobName":"job","shardingItems":[1]},"originalTaskId":"` + id.String() + `"}]`},
		{name: "unknown path", method: "GET", path: "/api/nope", wantCode: 404},
		{name: "body over 1 MiB", method: "POST", path: "/api/app", body: `{"appName":"` + strings.Repeat("a", MaxBody) + `"}`, wantCode: 413},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := seeded()
			f.store.running = []state.RunningEntry{{Meta: id.Meta, TaskID: id.String()}}
			f.sched.idle[id.String()] = true
			at := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
			f.sched.failures = map[string]JobFailure{"daemon": {JobName: "daemon", Stopped: true,
				Stop:    &state.Stop{Reason: "unknown jobClass", Message: `unknown jobClass "x"`, TaskID: id.String(), State: "TASK_ERROR", Since: at},
				Backoff: []ShardBackoff{{JobName: "daemon", ShardingItem: 2, Failures: 3, DelaySeconds: 4, RetryAt: at.Add(4 * time.Second), LastFailure: "TASK_LOST"}}}}
			f.store.ready = []state.ReadyEntry{{JobName: "job", Count: 2}}
			dep := f.store.jobs["job"]
			dep.JobName, dep.DependsOn = "dep", []string{"job"}
			f.store.jobs["dep"] = dep
			j := f.store.jobs["job"]
			j.MisfirePolicy, j.StartingDeadline = config.FireAll, 30
			f.store.jobs["job"] = j
			f.store.ledgers = map[string]state.Ledger{"job": {Cron: j.Cron, Zone: "UTC", Last: at.Add(10 * time.Second), Fires: []state.FireEntry{
				{Slot: at, Count: 1, Outcome: state.OutcomeSkipped, Reason: "old"},
				{Slot: at.Add(5 * time.Second), Count: 1, Outcome: state.OutcomeMerged, Reason: state.ReasonMergedQueued},
				{Slot: at.Add(10 * time.Second), Count: 1, Outcome: state.OutcomeFired, Launched: at.Add(11 * time.Second), Tasks: 1, TaskIDs: []string{id.String()}}}}}
			changed := f.store.jobs["job"]
			changed.JobName = "changed"
			f.store.jobs["changed"] = changed
			f.store.ledgers["changed"] = state.Ledger{Cron: j.Cron, Zone: "UTC", Last: at.Add(5 * time.Second), From: at.Add(7 * time.Second)}
			f.store.failover = []state.FailoverEntry{{Meta: id.Meta, TaskID: id.String()}}
			par := f.store.jobs["job"]
			par.JobName, par.ConcurrencyPolicy, par.ShardsIndependent = "par", config.Allow, true
			f.store.jobs["par"] = par
			rec := f.do(tc.method, tc.path, tc.body)
			if rec.Code != tc.wantCode {
				t.Fatalf("%s %s: %d %s; want %d", tc.method, tc.path, rec.Code, rec.Body, tc.wantCode)
			}
			got := strings.TrimSpace(rec.Body.String())
			switch {
			case tc.wantBody == "":
			case strings.HasPrefix(tc.wantBody, "[") || strings.HasPrefix(tc.wantBody, "{"):
				var a, b any
				json.Unmarshal([]byte(got), &a)
				json.Unmarshal([]byte(tc.wantBody), &b)
				if !reflect.DeepEqual(a, b) {
					t.Fatalf("body %s; want %s", got, tc.wantBody)
				}
			case !strings.Contains(got, tc.wantBody):
				t.Fatalf("body %s; want it to contain %s", got, tc.wantBody)
			}
			if tc.wantOps != nil && !reflect.DeepEqual(f.sched.Ops(), tc.wantOps) {
				t.Fatalf("operations %v; want %v", f.sched.Ops(), tc.wantOps)
			}
			if rec.Code >= 400 && !strings.Contains(got, `"error"`) {
				t.Fatalf("error answer without an error message: %s", got)
			}
		})
	}
}

// Every validation rule of SPEC §3 answers 400 naming the field, and writes nothing.
func TestValidationNamesTheFieldAndWritesNothing(t *testing.T) {
	for _, tc := range []struct{ path, body, field string }{
		{"/api/app", `{"appName":"a b","appURL":"/x","bootstrapScript":"s"}`, "appName"},
		{"/api/app", `{"appName":"a","appURL":"x","bootstrapScript":"s"}`, "appURL"},
		{"/api/app", `{"appName":"a","appURL":"/x"}`, "bootstrapScript"},
		{"/api/app", `{"appName":"a","appURL":"/x","bootstrapScript":"s","cpuCount":0}`, "cpuCount"},
		{"/api/app", `{"appName":"a","appURL":"/x","bootstrapScript":"s","cpuCount":0.0005}`, "cpuCount"},
		{"/api/app", `{"appName":"a","appURL":"/x","bootstrapScript":"s","memoryMB":"16"}`, "memoryMB"},
		{"/api/app", `{"appName":"a","appURL":"/x","bootstrapScript":"s","eventTraceSamplingCount":-1}`, "eventTraceSamplingCount"},
		{"/api/app", `{"appName":"a","appURL":"/x","bootstrapScript":"s","typo":1}`, "typo"},
		{"/api/job/register", strings.Replace(jobBody, `"job"`, `"a@-@b"`, 1), "jobName"},
		{"/api/job/register", strings.Replace(jobBody, `"SCRIPT"`, `"JAVA"`, 1), "jobType"},
		{"/api/job/register", strings.Replace(jobBody, `"TRANSIENT"`, `"ONCE"`, 1), "jobExecutionType"},
		{"/api/job/register", strings.Replace(jobBody, `"0/5 * * * * ?"`, `"0 0 25 * * ?"`, 1), "cron"},
		{"/api/job/register", strings.Replace(jobBody, `"UTC"`, `"Mars/Olympus"`, 1), "timeZone"},
		{"/api/job/register", strings.Replace(jobBody, `"3"`, `"0"`, 1), "shardingTotalCount"},
		{"/api/job/register", strings.Replace(jobBody, `"0.5"`, `"0"`, 1), "cpuCount"},
		{"/api/job/register", strings.Replace(jobBody, `"64"`, `"0.5"`, 1), "memoryMB"},
		{"/api/job/register", strings.Replace(jobBody, `"echo hi"`, `""`, 1), "scriptCommandLine"},
		{"/api/job/register", strings.Replace(jobBody, `"jobName"`, `"shardingItemParameters":"9=x","jobName"`, 1), "shardingItemParameters"},
		{"/api/job/register", strings.Replace(jobBody, `"jobName"`, `"placement":"RANDOM","jobName"`, 1), "placement"},
		{"/api/job/register", strings.Replace(jobBody, `"jobName"`, `"jobShardingStrategyType":"HASH","jobName"`, 1), "jobShardingStrategyType"},
		{"/api/job/register", strings.Replace(jobBody, `"jobName"`, `"streamingProcess":true,"jobName"`, 1), "streamingProcess"},
		{"/api/job/register", strings.Replace(jobBody, `"jobName"`, `"shardingTotalCnt":3,"jobName"`, 1), "shardingTotalCnt"},
		{"/api/job/register", strings.Replace(jobBody, `"job"`, `"`+strings.Repeat("j", 101)+`"`, 1), "jobName"},
		{"/api/job/register", strings.Replace(jobBody, `"app"`, `"a/b"`, 1), "appName"},
		{"/api/job/register", strings.Replace(jobBody, `"SCRIPT"`, `"SIMPLE"`, 1), "jobClass"},
		{"/api/job/register", strings.Replace(strings.Replace(jobBody, `"TRANSIENT"`, `"DAEMON"`, 1), `"cron":"0/5 * * * * ?",`, "", 1), "cron"},
		{"/api/job/register", strings.Replace(jobBody, `"jobName"`, `"shardingItemParameters":"0=a,0=b","jobName"`, 1), "shardingItemParameters"},
		{"/api/job/register", strings.Replace(jobBody, `"jobName"`, `"shardingItemParameters":"x=a","jobName"`, 1), "shardingItemParameters"},
		{"/api/job/register", strings.Replace(jobBody, `"jobName"`, `"failover":"maybe","jobName"`, 1), "failover"},
		{"/api/job/register", strings.Replace(jobBody, `"jobName"`, `"jobProperties":{"a":1},"jobName"`, 1), "jobProperties"},
		{"/api/job/register", `[1,2]`, "body"},
		{"/api/job/register", strings.Replace(jobBody, `"job"`, `"jobs"`, 1), "jobName"},  // /api/job/jobs/{jobName} takes its paths
		{"/api/app", `{"appName":"list","appURL":"/x","bootstrapScript":"s"}`, "appName"}, // GET /api/app/list lists the apps
		{"/api/job/register", strings.Replace(jobBody, `"0/5 * * * * ?"`, `"0 0 0 30 2 ?"`, 1), "cron"},
		{"/api/app", `{"appName":"a","appURL":"/x","bootstrapScript":"s","appCacheEnable":"sometimes"}`, "appCacheEnable"},
		{"/api/app", `{"appName":"` + strings.Repeat("a", 101) + `","appURL":"/x","bootstrapScript":"s"}`, "appName"},
		// URLs the Mesos fetcher can never fetch: every launch of the app's jobs would fail.
		{"/api/app", `{"appName":"a","appURL":"file:///","bootstrapScript":"s"}`, "appURL"},
		{"/api/app", `{"appName":"a","appURL":"http:///app.tar.gz","bootstrapScript":"s"}`, "appURL"},
		{"/api/app", `{"appName":"a","appURL":"https://?x","bootstrapScript":"s"}`, "appURL"},
		{"/api/app", `{"appName":"a","appURL":"http://h/a\u0000b","bootstrapScript":"s"}`, "appURL"},
		{"/api/app", `{"appName":"a","appURL":"http://h/a\u007fb","bootstrapScript":"s"}`, "appURL"},
		// The agent runs it as sh -c <bootstrapScript>: a NUL cannot pass exec.
		{"/api/app", `{"appName":"a","appURL":"/x","bootstrapScript":"./start.sh\u0000 --x"}`, "bootstrapScript"},
		// Numeric strings hold JSON numbers, not Go's (hex floats, a trailing dot, a leading '+').
		{"/api/job/register", strings.Replace(jobBody, `"3"`, `"0x10p0"`, 1), "shardingTotalCount"},
		{"/api/job/register", strings.Replace(jobBody, `"3"`, `"5."`, 1), "shardingTotalCount"},
		{"/api/job/register", strings.Replace(jobBody, `"3"`, `"+5"`, 1), "shardingTotalCount"},
		{"/api/job/register", strings.Replace(jobBody, `"0.5"`, `"0x1p-1"`, 1), "cpuCount"},
	} {
		t.Run(tc.field+" "+tc.path, func(t *testing.T) {
			f := newFixture(Config{})
			f.do("POST", "/api/app", appBody)
			apps, jobs := len(f.store.apps), len(f.store.jobs)
			rec := f.do("POST", tc.path, tc.body)
			var got map[string]string
			json.Unmarshal(rec.Body.Bytes(), &got)
			if rec.Code != 400 || got["field"] != tc.field || !strings.Contains(got["error"], tc.field) {
				t.Fatalf("POST %s %s: %d %s; want 400 naming %s", tc.path, tc.body, rec.Code, rec.Body, tc.field)
			}
			if len(f.store.apps) != apps || len(f.store.jobs) != jobs || len(f.sched.Ops()) != 0 {
				t.Fatal("a refused request changed something")
			}
		})
	}
}

func TestAuthentication(t *testing.T) {
	f := newFixture(Config{Root: "root:secret", Guest: "guest:look"})
	f.do("POST", "/api/app", appBody, "root", "secret")
	for _, tc := range []struct {
		name         string
		method, path string
		auth         []string
		want         int
	}{
		{"no credentials", "GET", "/api/app/list", nil, 401},
		{"wrong password", "GET", "/api/app/list", []string{"root", "nope"}, 401},
		{"root reads", "GET", "/api/app/list", []string{"root", "secret"}, 200},
		{"guest reads", "GET", "/api/app/list", []string{"guest", "look"}, 200},
		{"guest writes", "POST", "/api/app/app/disable", []string{"guest", "look"}, 403},
		{"root writes", "POST", "/api/app/app/disable", []string{"root", "secret"}, 204},
	} {
		if rec := f.do(tc.method, tc.path, "", tc.auth...); rec.Code != tc.want {
			t.Errorf("%s: %d; want %d", tc.name, rec.Code, tc.want)
		}
	}
}

// An internal fault answers 500 with an id that finds its log line; the cause itself (a
// ZooKeeper path, a client library's message) stays in the log.
func TestInternalFaultsAre500WithAnIDInTheLog(t *testing.T) {
	f := seeded()
	hook := logtest.NewLocal(f.log)
	f.store.fault = errors.New("create /ns/config/job/x: zk: disk on fire")
	rec := f.do("GET", "/api/job/jobs", "")
	var body struct{ Error string }
	json.Unmarshal(rec.Body.Bytes(), &body)
	entry := hook.LastEntry()
	if rec.Code != 500 || entry == nil || entry.Data["error_id"] == nil {
		t.Fatalf("%d %s, log %v; want 500 and a logged error id", rec.Code, rec.Body, entry)
	}
	id := entry.Data["error_id"].(string)
	if !strings.Contains(body.Error, id) || strings.Contains(body.Error, "disk on fire") || strings.Contains(body.Error, "/ns/") ||
		!strings.Contains(fmt.Sprint(entry.Data[logrus.ErrorKey]), "disk on fire") {
		t.Fatalf("500 %q, log %v; want the log's error id in the body and the cause only in the log", body.Error, entry.Data)
	}
	f.store.fault = state.ErrQueueFull
	if rec := f.do("POST", "/api/app", strings.Replace(appBody, `"app"`, `"b"`, 1)); rec.Code != 503 {
		t.Fatalf("queue full: %d; want 503", rec.Code)
	}
	f.store.fault = fmt.Errorf("delete app: multi of 9000 ops: %w", state.ErrTooLarge)
	if rec := f.do("DELETE", "/api/app/app", ""); rec.Code != 409 || !strings.Contains(rec.Body.String(), "nothing changed") {
		t.Fatalf("a change too large for one ZooKeeper write: %d %s; want 409 saying nothing changed", rec.Code, rec.Body)
	}
}

func TestOperateAndTraceEndpoints(t *testing.T) {
	f := seeded() // its clock stands still, so the second reconciliation is within 10 s
	for _, tc := range []struct {
		name, method, path string
		want               int
		contains           string
	}{
		{"reconcile explicit", "POST", "/api/operate/reconcile/explicit", 204, ""},
		{"again within 10 s", "POST", "/api/operate/reconcile/explicit", 429, "10 s"},
		{"implicit is its own kind", "POST", "/api/operate/reconcile/implicit", 204, ""},
		{"unknown kind", "POST", "/api/operate/reconcile/sideways", 404, ""},
		{"sandbox", "GET", "/api/operate/sandbox?appName=app", 200, `"hostname":"127.0.0.2"`},
		{"sandbox without app", "GET", "/api/operate/sandbox", 400, `"field":"appName"`},
		{"sandbox of a missing app", "GET", "/api/operate/sandbox?appName=nope", 404, ""},
		{"executions", "GET", "/api/job/events/executions?per_page=10&page=1&startTime=2026-11-01%2000:00:00&endTime=2026-11-22", 200, `"total":0`},
		{"executions with a bad date", "GET", "/api/job/events/executions?startTime=yesterday", 400, `"field":"startTime"`},
		{"status traces ending before they start", "GET", "/api/job/events/statusTraces?startTime=2026-11-22&endTime=2026-11-01", 400, `"field":"endTime"`},
		{"bad page size", "GET", "/api/job/events/statusTraces?per_page=0", 400, `"field":"per_page"`},
		{"bad order", "GET", "/api/job/events/executions?order=up", 400, `"field":"order"`},
		{"task results", "GET", "/api/job/statistics/tasks/results?since=lastWeek", 200, "[]"},
		{"task results, bad since", "GET", "/api/job/statistics/tasks/results?since=forever", 400, `"field":"since"`},
		{"task results of the last hour", "GET", "/api/job/statistics/tasks/results/lastHour", 200, `"successCount":0`},
		{"running jobs", "GET", "/api/job/statistics/jobs/running", 200, "[]"},
		{"execution types", "GET", "/api/job/statistics/jobs/executionType", 200, "transientJobCount"},
	} {
		rec := f.do(tc.method, tc.path, "")
		if rec.Code != tc.want || !strings.Contains(rec.Body.String(), tc.contains) {
			t.Fatalf("%s: %s %s = %d %s; want %d containing %q", tc.name, tc.method, tc.path, rec.Code, rec.Body, tc.want, tc.contains)
		}
	}
	if ops := f.sched.Ops(); !reflect.DeepEqual(ops, []string{"reconcile explicit=true", "reconcile explicit=false"}) {
		t.Fatalf("operations %v", ops)
	}
}

// A Mesos agent or master that cannot be read is answered 503 (SPEC §7: Mesos cannot serve),
// naming it, not as an internal fault, and the body does not carry the client's error.
func TestSandboxesWhenMesosCannotBeRead(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want int
		says string
	}{
		{"an agent", fmt.Errorf("sandboxes: %w", &MesosError{Which: "Mesos agent S0", Err: errors.New("read http://127.0.0.2:5051/state: 401 Unauthorized")}),
			http.StatusServiceUnavailable, "Mesos agent S0 could not be read"},
		{"the master", &MesosError{Which: "the Mesos master", Err: errors.New("dial tcp 127.0.0.1:5050: connection refused")},
			http.StatusServiceUnavailable, "the Mesos master could not be read"},
		{"something else", errors.New("boom"), http.StatusInternalServerError, "internal error"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := seeded()
			f.sched.sandboxErr = tc.err
			rec := f.do("GET", "/api/operate/sandbox?appName=app", "")
			body := rec.Body.String()
			if rec.Code != tc.want || !strings.Contains(body, tc.says) || !strings.Contains(body, "error_id=") {
				t.Fatalf("%d %s; want %d saying %q with an error id", rec.Code, body, tc.want, tc.says)
			}
			// Not "401" alone: the error id is random hex, which now and then holds it.
			if strings.Contains(body, "401 Unauthorized") || strings.Contains(body, "127.0.0.2") || strings.Contains(body, "dial tcp") {
				t.Fatalf("the body carries the client's error: %s", body)
			}
		})
	}
}

// An operation the scheduler refuses is answered with SPEC §7's code and says why, and the
// refusal is not taken for an internal fault.
func TestRefusedOperations(t *testing.T) {
	for _, tc := range []struct {
		name         string
		err          error
		method, path string
		body         string
		want         int
		says         string
	}{
		{"a disabled job triggered", fmt.Errorf("%w: job \"job\" or its app \"app\" is disabled: enable it first", ErrConflictingState),
			"POST", "/api/job/trigger", "job", http.StatusConflict, `job \"job\" or its app \"app\" is disabled: enable it first`},
		{"no Mesos subscription", fmt.Errorf("disable job: %w", ErrNoSubscription),
			"POST", "/api/job/job/disable", "", http.StatusServiceUnavailable, "not subscribed to Mesos"},
		{"a full ready queue", fmt.Errorf("record: %w", state.ErrQueueFull),
			"POST", "/api/job/trigger", "job", http.StatusServiceUnavailable, "is full"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := seeded()
			f.sched.opErr = tc.err
			rec := f.do(tc.method, tc.path, tc.body)
			if body := rec.Body.String(); rec.Code != tc.want || !strings.Contains(body, tc.says) {
				t.Fatalf("%d %s; want %d saying %q", rec.Code, body, tc.want, tc.says)
			}
		})
	}
}

// A reconciliation that could not be made (no Mesos subscription) gives its 10 s slot back: the
// operator's retry is made, not answered 429.
func TestAReconciliationNotMadeGivesItsSlotBack(t *testing.T) {
	f := seeded() // its clock stands still
	f.sched.opErr = fmt.Errorf("reconcile: %w", ErrNoSubscription)
	if rec := f.do("POST", "/api/operate/reconcile/explicit", ""); rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("without a subscription: %d %s; want 503", rec.Code, rec.Body)
	}
	f.sched.opErr = nil
	if rec := f.do("POST", "/api/operate/reconcile/explicit", ""); rec.Code != http.StatusNoContent {
		t.Fatalf("the retry once subscribed: %d %s; want 204", rec.Code, rec.Body)
	}
	if rec := f.do("POST", "/api/operate/reconcile/explicit", ""); rec.Code != http.StatusTooManyRequests {
		t.Fatalf("again within 10 s of the one made: %d %s; want 429", rec.Code, rec.Body)
	}
}

func TestClusterAndUnplaced(t *testing.T) {
	f := newFixture(Config{Root: "root:secret", Guest: "guest:look"})
	if rec := f.do("GET", "/api/operate/cluster", "", "root", "secret"); rec.Code != 501 {
		t.Fatalf("cluster of a scheduler without the view: %d %s; want 501", rec.Code, rec.Body)
	}
	o := &fakeOverseer{fakeSched: f.sched,
		cluster: Cluster{Leader: "127.0.0.1:1", Subscribed: true, FrameworkID: "fw-1", Master: "http://127.0.0.1:2",
			Agents: []Agent{{ID: "S2"}, {ID: "S1", Hostname: "h", Total: Resources{CPUs: 4, MemMB: 1024}, Free: Resources{CPUs: 3, MemMB: 512},
				Executors: []Executor{{ID: "app@-@S1", AppName: "app", Tasks: 2}}}}},
		unplaced: map[string]map[string]int{"big": {"cpu": 3}}}
	h := New(f.store, o, Config{Root: "root:secret", Guest: "guest:look", Log: f.log})
	for _, tc := range []struct {
		path, want string
	}{
		{"/api/operate/cluster", `{"leader":"127.0.0.1:1","subscribed":true,"frameworkId":"fw-1","master":"http://127.0.0.1:2","agents":[` +
			`{"id":"S1","hostname":"h","active":false,"total":{"cpus":4,"mem":1024,"disk":0},"used":{"cpus":0,"mem":0,"disk":0},` +
			`"offered":{"cpus":0,"mem":0,"disk":0},"free":{"cpus":3,"mem":512,"disk":0},"executors":[{"id":"app@-@S1","appName":"app","tasks":2}]},` +
			`{"id":"S2","hostname":"","active":false,"total":{"cpus":0,"mem":0,"disk":0},"used":{"cpus":0,"mem":0,"disk":0},` +
			`"offered":{"cpus":0,"mem":0,"disk":0},"free":{"cpus":0,"mem":0,"disk":0},"executors":[]}]}`},
		{"/api/job/unplaced", `{"big":{"cpu":3}}`},
	} {
		req := httptest.NewRequest("GET", tc.path, nil)
		req.SetBasicAuth("guest", "look") // both are reads: the guest may see them
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if got := strings.TrimSpace(rec.Body.String()); rec.Code != 200 || got != tc.want {
			t.Errorf("GET %s = %d %s; want 200 %s", tc.path, rec.Code, got, tc.want)
		}
	}
}

func TestRole(t *testing.T) {
	for _, tc := range []struct {
		root, guest string
		auth        []string
		want        string
	}{
		{"", "", nil, RoleRoot},
		{"root:pw", "", nil, RoleNone},
		{"root:pw", "g:x", []string{"root", "pw"}, RoleRoot},
		{"root:pw", "g:x", []string{"g", "x"}, RoleGuest},
		{"root:pw", "g:x", []string{"g", "pw"}, RoleNone},
		{"root:pw", "", []string{"", ""}, RoleNone},
	} {
		req := httptest.NewRequest("GET", "/", nil)
		if tc.auth != nil {
			req.SetBasicAuth(tc.auth[0], tc.auth[1])
		}
		if got := Role(tc.root, tc.guest, req); got != tc.want {
			t.Errorf("Role(%q, %q, %v) = %q; want %q", tc.root, tc.guest, tc.auth, got, tc.want)
		}
	}
}

// A write a browser sends for another site's page is refused (CSRF: the browser would attach
// the operator's Basic credentials), whatever the credentials; the console's own requests, and
// tools that say nothing of origins, are served; reads are never refused.
func TestCrossSiteWritesAreRefused(t *testing.T) {
	for _, cfg := range []Config{{Root: "root:secret"}, {}} {
		f := newFixture(cfg)
		f.do("POST", "/api/app", appBody, "root", "secret")
		for _, tc := range []struct {
			name         string
			method, path string
			headers      map[string]string
			want         int
		}{
			{"a cross-site form POST", "POST", "/api/app/app/disable", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
			{"a same-site page's POST", "POST", "/api/app/app/disable", map[string]string{"Sec-Fetch-Site": "same-site"}, 403},
			{"a foreign Origin without Sec-Fetch-Site", "POST", "/api/app/app/disable", map[string]string{"Origin": "https://evil.example"}, 403},
			{"a cross-site DELETE", "DELETE", "/api/app/app", map[string]string{"Sec-Fetch-Site": "cross-site"}, 403},
			{"the console's own POST", "POST", "/api/app/app/disable", map[string]string{"Sec-Fetch-Site": "same-origin"}, 204},
			{"the same Origin", "POST", "/api/app/app/enable", map[string]string{"Origin": "http://example.com"}, 204},
			{"curl", "POST", "/api/app/app/disable", nil, 204},
			{"a cross-site read", "GET", "/api/app/list", map[string]string{"Sec-Fetch-Site": "cross-site"}, 200},
		} {
			req := httptest.NewRequest(tc.method, tc.path, nil)
			req.SetBasicAuth("root", "secret")
			for k, v := range tc.headers {
				req.Header.Set(k, v)
			}
			rec := httptest.NewRecorder()
			f.h.ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Errorf("root %q: %s: %d %s; want %d", cfg.Root, tc.name, rec.Code, rec.Body, tc.want)
			}
		}
		if apps := f.do("GET", "/api/app/list", "", "root", "secret").Body.String(); !strings.Contains(apps, `"app"`) {
			t.Fatalf("the app is gone after refused deletes: %s", apps)
		}
	}
}

// An app cannot be deleted while a job of another app depends on one of its jobs (409, nothing
// deleted); its own jobs depending on each other go with it.
func TestDeletingAnAppOthersDependOnIsRefused(t *testing.T) {
	f := seeded()
	f.do("POST", "/api/job/register", withDeps("own", "job"))
	f.do("POST", "/api/app", strings.Replace(appBody, `"app"`, `"other"`, 1))
	var j map[string]any
	json.Unmarshal([]byte(withDeps("theirs", "job")), &j)
	j["appName"] = "other"
	b, _ := json.Marshal(j)
	if rec := f.do("POST", "/api/job/register", string(b)); rec.Code != 204 {
		t.Fatalf("register a job of app other: %d %s", rec.Code, rec.Body)
	}
	f.sched.ops = nil
	rec := f.do("DELETE", "/api/app/app", "")
	if rec.Code != 409 || !strings.Contains(rec.Body.String(), `job \"theirs\" depends on job \"job\"`) || len(f.sched.Ops()) != 0 {
		t.Fatalf("DELETE /api/app/app: %d %s, ops %v; want 409 naming theirs and nothing done", rec.Code, rec.Body, f.sched.Ops())
	}
	delete(f.store.jobs, "theirs") // deregistered
	if rec := f.do("DELETE", "/api/app/app", ""); rec.Code != 204 {
		t.Fatalf("DELETE /api/app/app once nothing outside depends on it: %d %s; want 204", rec.Code, rec.Body)
	}
}

// The errors of a request's own end are not internal errors: a client that went away gets no
// answer and no error in the log; an expired session or a stopped leadership is the 503 of an
// instance that no longer leads; a deadline is a 503 to retry. Each was a 500 logged as an
// internal error.
func TestRequestsEndedByTheirContextOrTheLeadershipAreNotInternalErrors(t *testing.T) {
	const nothing = logrus.Level(99) // nothing logged at Info or above
	for _, tc := range []struct {
		name       string
		fault      error
		gone       bool // the client gave up the request
		wantCode   int
		wantLogged logrus.Level // the most severe level logged at Info or above
	}{
		{"the client went away", context.Canceled, true, 0, nothing},
		{"the leadership's work was stopped", context.Canceled, false, http.StatusServiceUnavailable, logrus.InfoLevel},
		{"the session expired", fmt.Errorf("read /ns/config/job: %w", state.ErrSessionExpired), false, http.StatusServiceUnavailable, logrus.InfoLevel},
		{"ZooKeeper did not answer in time", context.DeadlineExceeded, false, http.StatusServiceUnavailable, logrus.WarnLevel},
		{"anything else", errors.New("boom"), false, http.StatusInternalServerError, logrus.ErrorLevel},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := seeded()
			f.log.SetLevel(logrus.DebugLevel)
			hook := logtest.NewLocal(f.log)
			f.store.fault = tc.fault
			req := httptest.NewRequest("GET", "/api/job/jobs", nil)
			if tc.gone {
				ctx, cancel := context.WithCancel(req.Context())
				cancel()
				req = req.WithContext(ctx)
			}
			rec := httptest.NewRecorder()
			f.h.ServeHTTP(rec, req)
			worst := nothing
			for _, e := range hook.AllEntries() {
				if e.Level <= logrus.InfoLevel && e.Level < worst {
					worst = e.Level
				}
			}
			if tc.wantCode != 0 && rec.Code != tc.wantCode || worst != tc.wantLogged {
				t.Fatalf("HTTP %d, logged at %v; want %d, %v", rec.Code, worst, tc.wantCode, tc.wantLogged)
			}
		})
	}
}

// A config whose stored JSON is more than one ZooKeeper write holds is bad input (SPEC §3: 400
// naming the field), checked before anything is written: encoding/json writes '<' as \u003c,
// so a body well under the 1 MiB limit stores six times as much. It was a 409 speaking of "it"
// and of deleting an app's jobs.
func TestAConfigTooLargeForOneWriteIs400NamingItsField(t *testing.T) {
	do, dump := realFixture(t)
	big := strings.Repeat("<", 300000)
	for _, tc := range []struct{ name, method, path, body, field string }{
		{"job registration", "POST", "/api/job/register", plus(strings.Replace(jobBody, `"job"`, `"big"`, 1), `"description":"`+big+`"`), "description"},
		{"job update", "PUT", "/api/job/update", plus(jobBody, `"description":"`+big+`"`), "description"},
		{"job properties", "PUT", "/api/job/update", plus(jobBody, `"jobProperties":{"a":"`+big[:100000]+`","b":"`+big[:100000]+`"}`), "jobProperties"},
		{"app registration", "POST", "/api/app", `{"appName":"bigapp","appURL":"/x","bootstrapScript":"` + big + `"}`, "bootstrapScript"},
		{"app partial update", "PUT", "/api/app", `{"appName":"app","bootstrapScript":"` + big + `"}`, "bootstrapScript"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := dump()
			rec := do(tc.method, tc.path, tc.body)
			var got map[string]string
			json.Unmarshal(rec.Body.Bytes(), &got)
			if rec.Code != 400 || got["field"] != tc.field || !strings.HasPrefix(got["error"], tc.field+" is too large to store") {
				t.Errorf("%s %s: %d %.300s; want 400 naming %s, too large to store", tc.method, tc.path, rec.Code, rec.Body, tc.field)
			}
			if after := dump(); !reflect.DeepEqual(after, before) {
				t.Errorf("a refused request wrote to ZooKeeper")
			}
		})
	}
	// Up to the bound a config is stored.
	fits := strings.Repeat("x", 200000)
	if rec := do("PUT", "/api/job/update", plus(jobBody, `"description":"`+fits+`"`)); rec.Code != 204 {
		t.Errorf("a job of 200 KB: %d %.300s; want 204", rec.Code, rec.Body)
	}
}

// A config write that ZooKeeper refuses as too large though the config passed the bound (what
// the write carries beside it left no room) is the config's size too: 400 naming its largest
// field, not the 409 about a change to many nodes with its advice to delete an app's jobs.
func TestAConfigWriteTooLargeForZooKeeperIs400NamingItsField(t *testing.T) {
	for _, tc := range []struct{ name, method, path, body, field string }{
		{"app registration", "POST", "/api/app", `{"appName":"b","appURL":"/x","bootstrapScript":"` + strings.Repeat("s", 1000) + `"}`, "bootstrapScript"},
		{"job registration", "POST", "/api/job/register", plus(strings.Replace(jobBody, `"job"`, `"b"`, 1), `"description":"`+strings.Repeat("d", 1000)+`"`), "description"},
		{"job update", "PUT", "/api/job/update", plus(jobBody, `"jobParameter":"`+strings.Repeat("p", 1000)+`"`), "jobParameter"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := seeded()
			f.store.fault = fmt.Errorf("create: multi of 3 ops, 1040000 bytes: %w", state.ErrTooLarge)
			rec := f.do(tc.method, tc.path, tc.body)
			var got map[string]string
			json.Unmarshal(rec.Body.Bytes(), &got)
			if rec.Code != 400 || got["field"] != tc.field || !strings.Contains(got["error"], "too large to store") ||
				!strings.Contains(got["error"], "nothing changed") || strings.Contains(got["error"], "app's jobs") {
				t.Errorf("%s %s: %d %s; want 400 naming %s, too large to store", tc.method, tc.path, rec.Code, rec.Body, tc.field)
			}
		})
	}
}

// A body is one JSON value and nothing after it: a stray '}' or ']' after the object (which
// json.Decoder.More does not see) is refused, 400 naming "body", on every endpoint taking a
// config, and nothing changes.
func TestABodyWithDataAfterItsJSONIs400NamingBody(t *testing.T) {
	for _, tc := range []struct{ method, path, body string }{
		{"POST", "/api/app", strings.Replace(appBody, `"app"`, `"other"`, 1) + "}"},
		{"POST", "/api/app", strings.Replace(appBody, `"app"`, `"other"`, 1) + "]"},
		{"POST", "/api/app", strings.Replace(appBody, `"app"`, `"other"`, 1) + ` {}`},
		{"POST", "/api/job/register", strings.Replace(jobBody, `"job"`, `"new"`, 1) + "}"},
		{"POST", "/api/job/register", strings.Replace(jobBody, `"job"`, `"new"`, 1) + "x"},
		{"PUT", "/api/job/update", jobBody + "]"},
		{"PUT", "/api/app", `{"appName":"app","memoryMB":256}}`},
		{"PUT", "/api/app", `{"appName":"app","memoryMB":256}]`},
	} {
		t.Run(tc.method+tc.path+tc.body[len(tc.body)-1:], func(t *testing.T) {
			f := seeded()
			apps, jobs := fmt.Sprint(f.store.apps), fmt.Sprint(f.store.jobs)
			rec := f.do(tc.method, tc.path, tc.body)
			var got map[string]string
			json.Unmarshal(rec.Body.Bytes(), &got)
			if rec.Code != 400 || got["field"] != "body" {
				t.Errorf("%s %s …%q: %d %s; want 400 naming body", tc.method, tc.path, tc.body[len(tc.body)-5:], rec.Code, rec.Body)
			}
			if fmt.Sprint(f.store.apps) != apps || fmt.Sprint(f.store.jobs) != jobs || len(f.sched.Ops()) != 0 {
				t.Errorf("the refused request changed something: ops %v", f.sched.Ops())
			}
		})
	}
	// White space after the value is no data.
	if rec := seeded().do("PUT", "/api/job/update", jobBody+"\n \t"); rec.Code != 204 {
		t.Errorf("a body ending in white space: %d %s; want 204", rec.Code, rec.Body)
	}
}

// A member given twice is refused, 400 naming it: encoding/json keeps the last one silently,
// and a client that sends two appNames does not know which app it made or updated.
func TestAKeyGivenTwiceIs400NamingIt(t *testing.T) {
	for _, tc := range []struct{ method, path, body, field string }{
		{"POST", "/api/app", `{"appName":"first","appURL":"/x","bootstrapScript":"s","appName":"second"}`, "appName"},
		{"POST", "/api/app", `{"appName":"first","appURL":"/x","bootstrapScript":"s","app\u004eame":"second"}`, "appName"},
		{"PUT", "/api/app", `{"appName":"app","memoryMB":256,"appName":"other"}`, "appName"},
		{"PUT", "/api/app", `{"appName":"app","memoryMB":256,"memoryMB":512}`, "memoryMB"},
		{"POST", "/api/job/register", plus(strings.Replace(jobBody, `"job"`, `"new"`, 1), `"jobName":"newer"`), "jobName"},
		{"PUT", "/api/job/update", plus(jobBody, `"cron":"0/5 * * * * ?"`), "cron"},
	} {
		t.Run(tc.method+tc.path+" "+tc.field, func(t *testing.T) {
			f := seeded()
			apps, jobs := fmt.Sprint(f.store.apps), fmt.Sprint(f.store.jobs)
			rec := f.do(tc.method, tc.path, tc.body)
			var got map[string]string
			json.Unmarshal(rec.Body.Bytes(), &got)
			if rec.Code != 400 || got["field"] != tc.field || got["error"] != tc.field+" is given more than once" {
				t.Errorf("%s %s %s: %d %s; want 400 %q naming %s", tc.method, tc.path, tc.body, rec.Code, rec.Body, tc.field+" is given more than once", tc.field)
			}
			if fmt.Sprint(f.store.apps) != apps || fmt.Sprint(f.store.jobs) != jobs || len(f.sched.Ops()) != 0 {
				t.Errorf("the refused request changed something: ops %v", f.sched.Ops())
			}
		})
	}
}

// A trigger or deregister body is the job's name, raw or as a JSON string (2.1.5's forms). A
// JSON object or array is neither: 400 naming jobName, not a 404 for a job named
// {"jobName":"job"}. Anything else stays a raw name, so that the jobs 2.1.5 registered under
// names ejcloud would refuse can still be deregistered.
func TestAJobNameBodyThatIsAJSONObjectOrArrayIs400(t *testing.T) {
	for _, tc := range []struct {
		body string
		want int
	}{
		{`{"jobName":"job"}`, 400},
		{` {"jobName":"job"} `, 400},
		{`["job"]`, 400},
		{`{}`, 400},
		{`{job`, 404},   // not JSON: a raw name, of no job here
		{`[job]`, 404},  // likewise
		{`"job"`, 204},  // a JSON string
		{"job\n", 204},  // a raw name
		{`{"job"`, 404}, // not JSON
		{`null`, 404},   // a raw name, as 2.1.5 took it
		{`[1] x`, 404},  // not JSON
		{`1`, 404},      // a raw name
		{"{\n}", 400},   // an object
		{`[{"a":1}]`, 400},
	} {
		for _, ep := range []struct{ method, path, op string }{{"POST", "/api/job/trigger", "trigger job"}, {"DELETE", "/api/job/deregister", "delete job"}} {
			f := seeded()
			rec := f.do(ep.method, ep.path, tc.body)
			var got map[string]string
			json.Unmarshal(rec.Body.Bytes(), &got)
			switch {
			case rec.Code != tc.want:
				t.Errorf("%s %s %q: %d %s; want %d", ep.method, ep.path, tc.body, rec.Code, rec.Body, tc.want)
			case tc.want == 400 && got["field"] != "jobName":
				t.Errorf("%s %s %q: %s; want it to name jobName", ep.method, ep.path, tc.body, rec.Body)
			case tc.want != 204 && len(f.sched.Ops()) != 0, tc.want == 204 && !reflect.DeepEqual(f.sched.Ops(), []string{ep.op}):
				t.Errorf("%s %s %q: operations %v", ep.method, ep.path, tc.body, f.sched.Ops())
			}
		}
	}
}

// A job whose stored cron Quartz cannot parse (2.1.5 stored such crons, SPEC §12) has no next
// fire times because of its config, not of a fault here: 409 naming cron and saying the job
// must be updated, not 500. A stored zone that is no zone likewise names timeZone.
func TestNextOfAJobWithAStoredInvalidCronIs409NamingCron(t *testing.T) {
	for _, tc := range []struct{ cron, zone, field string }{
		{"0 0 12 * * *", "UTC", "cron"}, // both day fields: Quartz refuses it
		{"0 0 25 * * ?", "UTC", "cron"},
		{"0/5 * * * * ?", "Mars/Olympus", "timeZone"},
	} {
		f := seeded()
		j := f.store.jobs["job"]
		j.JobName, j.Cron, j.TimeZone = "old", tc.cron, tc.zone
		f.store.jobs["old"] = j
		rec := f.do("GET", "/api/job/old/next", "")
		var got map[string]string
		json.Unmarshal(rec.Body.Bytes(), &got)
		if rec.Code != 409 || got["field"] != tc.field || !strings.Contains(got["error"], `job "old"'s stored `+tc.field) ||
			!strings.Contains(got["error"], "update the job") {
			t.Errorf("next of a job stored with cron %q in %q: %d %s; want 409 naming %s, saying to update the job", tc.cron, tc.zone, rec.Code, rec.Body, tc.field)
		}
	}
}

// A 405 carries Allow, the methods the path is served with (RFC 9110 §15.5.6: MUST), and HEAD
// is served wherever GET is (RFC 9110 §9.3.2; the auth layer lets the guest send it as a read).
func TestA405NamesTheAllowedMethodsAndHEADIsServedWhereGETIs(t *testing.T) {
	f := newFixture(Config{Root: "root:secret", Guest: "guest:look"})
	f.do("POST", "/api/app", appBody, "root", "secret")
	f.do("POST", "/api/job/register", jobBody, "root", "secret")
	for _, tc := range []struct{ method, path, allow string }{
		{"GET", "/api/job/register", "POST"},
		{"POST", "/api/job/jobs", "GET, HEAD"},
		{"DELETE", "/api/app", "POST, PUT"},
		{"PUT", "/api/job/job/disable", "GET, HEAD, POST, DELETE"},
		{"PATCH", "/api/app/app", "GET, HEAD, DELETE"},
		{"GET", "/api/operate/reconcile/explicit", "POST"},
	} {
		rec := f.do(tc.method, tc.path, "", "root", "secret")
		if rec.Code != 405 || rec.Header().Get("Allow") != tc.allow || !strings.Contains(rec.Body.String(), `"error"`) {
			t.Errorf("%s %s: %d Allow=%q %s; want 405 Allow=%q", tc.method, tc.path, rec.Code, rec.Header().Get("Allow"), rec.Body, tc.allow)
		}
	}
	for _, tc := range []struct {
		path string
		want int
	}{
		{"/api/app/list", 200}, {"/api/app/app", 200}, {"/api/app/nope", 404}, {"/api/job/jobs", 200},
		{"/api/job/jobs/job", 200}, {"/api/job/job/next", 200}, {"/api/job/tasks/ready", 200},
		{"/api/job/events/executions", 200}, {"/api/operate/sandbox?appName=app", 200},
	} {
		for _, user := range [][]string{{"root", "secret"}, {"guest", "look"}} {
			get, head := f.do("GET", tc.path, "", user...), f.do("HEAD", tc.path, "", user...)
			if get.Code != tc.want || head.Code != tc.want || head.Header().Get("Content-Type") != get.Header().Get("Content-Type") {
				t.Errorf("%s: GET %s = %d, HEAD = %d; want both %d", user[0], tc.path, get.Code, head.Code, tc.want)
			}
		}
	}
	// Every route that serves GET serves HEAD.
	(&Server{store: f.store, sched: f.sched, cfg: Config{Log: f.log}}).router().Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		methods, _ := route.GetMethods()
		path, _ := route.GetPathTemplate()
		if slices.Contains(methods, http.MethodGet) && !slices.Contains(methods, http.MethodHead) {
			t.Errorf("%s serves GET but not HEAD (%v)", path, methods)
		}
		return nil
	})
}

// A scheduler builds its API at each term, and a process may hold several (tests do): the
// routers share nothing, so two built at once do not race (go test -race fails this when
// they share a slice that mux writes).
func TestServersBuiltAtOnceShareNothing(t *testing.T) {
	var wg sync.WaitGroup
	fs := make([]*fixture, 4)
	for k := range fs {
		wg.Go(func() { fs[k] = newFixture(Config{}) })
	}
	wg.Wait()
	for _, f := range fs {
		if rec := f.do("HEAD", "/api/app/list", ""); rec.Code != http.StatusOK {
			t.Fatalf("HEAD /api/app/list: %d %s", rec.Code, rec.Body)
		}
	}
}
