package mesoslocal_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/executor"
	"github.com/mesos/mesos-go/api/v1/lib/recordio"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/ejcloud/ejcloud/integration/mesoslocal"
	"github.com/ejcloud/ejcloud/integration/mesostest"
	"github.com/ejcloud/ejcloud/internal/await"
)

// executorDir finds an executor's sandbox as a framework or an operator does on a real
// cluster: the master's /master/state names the agent, whose own /state has the directory.
func executorDir(t *testing.T, c *mesoslocal.Cluster, fwID, execID string) string {
	t.Helper()
	var agentID string
	execs, _ := frameworkField(t, c, fwID, "executors").([]any)
	for _, e := range execs {
		if m := e.(map[string]any); m["executor_id"] == execID {
			if _, ok := m["directory"]; ok {
				t.Fatalf("/master/state reports a directory for executor %s: a real master does not", execID)
			}
			agentID, _ = m["slave_id"].(string)
		}
	}
	for _, sl := range masterState(t, c)["slaves"].([]any) {
		m := sl.(map[string]any)
		if m["id"] != agentID {
			continue
		}
		_, hostPort, _ := strings.Cut(m["pid"].(string), "@")
		for _, path := range []string{"/state", "/slave(1)/state"} {
			resp, err := http.Get("http://" + hostPort + path)
			if err != nil {
				t.Fatal(err)
			}
			var st struct {
				ID         string `json:"id"`
				Frameworks []struct {
					ID        string `json:"id"`
					Executors []struct {
						ID        string `json:"id"`
						Directory string `json:"directory"`
					} `json:"executors"`
				} `json:"frameworks"`
			}
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
			if err != nil || st.ID != agentID {
				t.Fatalf("GET %s%s: agent %q, %v; want agent %s", hostPort, path, st.ID, err, agentID)
			}
			for _, f := range st.Frameworks {
				for _, e := range f.Executors {
					if f.ID == fwID && e.ID == execID && path == "/slave(1)/state" {
						return e.Directory
					}
				}
			}
		}
	}
	t.Fatalf("no executor %s in the /state of agent %q", execID, agentID)
	return ""
}

// sandboxOf finds a (possibly ended) executor's latest sandbox under the work dir.
func sandboxOf(t *testing.T, c *mesoslocal.Cluster, execID string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(c.WorkDir(), "slaves", "*", "frameworks", "*", "executors", execID, "runs", "latest"))
	if len(m) != 1 {
		t.Fatalf("sandbox of %s: %v", execID, m)
	}
	return m[0]
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Item 39: the executor's environment is exactly the Mesos one; nothing of ours leaks in.
func TestExecutorEnvironment(t *testing.T) {
	os.Setenv("EJCLOUD_LEAK_CHECK", "must-not-reach-executors")
	defer os.Unsetenv("EJCLOUD_LEAK_CHECK")
	c := newCluster(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	s.Launch(o, task("t1", o, testExecutor("e1", "env,basic"), "run"))
	s.Update("t1", mesos.TASK_RUNNING) // config.FromEnv accepted it
	env := map[string]string{}
	for _, kv := range strings.Split(readFile(t, filepath.Join(executorDir(t, c, s.FrameworkID, "e1"), "env.txt")), "\n") {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	want := map[string]string{
		"MESOS_FRAMEWORK_ID": s.FrameworkID, "MESOS_EXECUTOR_ID": "e1", "MESOS_SLAVE_ID": o.AgentID.Value,
		"MESOS_CHECKPOINT": "1", "MESOS_HTTP_COMMAND_EXECUTOR": "0", "MESOS_EXECUTOR_SHUTDOWN_GRACE_PERIOD": "500ms",
		"MESOS_RECOVERY_TIMEOUT": "20secs", "MESOS_SUBSCRIPTION_BACKOFF_MAX": "3secs", "LIBPROCESS_PORT": "0",
		"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", executorModeEnv: testExecutor("x", "env,basic").Command.Environment.Variables[0].GetValue(),
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q; want %q", k, env[k], v)
		}
	}
	for _, k := range []string{"MESOS_DIRECTORY", "MESOS_SANDBOX", "MESOS_AGENT_ENDPOINT", "MESOS_SLAVE_PID"} {
		if env[k] == "" {
			t.Errorf("%s is missing", k)
		}
	}
	if env["MESOS_DIRECTORY"] != env["MESOS_SANDBOX"] || !strings.HasPrefix(env["MESOS_SLAVE_PID"], "slave(1)@") {
		t.Errorf("sandbox/pid: %q %q %q", env["MESOS_DIRECTORY"], env["MESOS_SANDBOX"], env["MESOS_SLAVE_PID"])
	}
	var extra []string
	for k := range env {
		if _, ok := want[k]; !ok && !strings.HasPrefix(k, "MESOS_") {
			extra = append(extra, k)
		}
	}
	sort.Strings(extra)
	if len(extra) > 0 {
		t.Errorf("variables that real Mesos would not set: %v", extra)
	}
}

// Item 40: executor call validation on the agent endpoint (MESOS.md §6.1).
func TestExecutorCallValidation(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	s.Launch(o, task("t1", o, testExecutor("e1", "nosubscribe"), "run"))
	url := agentURL(o) + "/api/v1/executor"
	call := func(mut func(*executor.Call)) []byte {
		st := mesos.TaskStatus{TaskID: mesos.TaskID{Value: "t1"}, State: mesos.TASK_RUNNING.Enum(), Source: mesos.SOURCE_EXECUTOR.Enum(), UUID: make([]byte, 16)}
		cl := executor.Call{Type: executor.Call_UPDATE, FrameworkID: mesos.FrameworkID{Value: s.FrameworkID}, ExecutorID: mesos.ExecutorID{Value: "e1"},
			Update: &executor.Call_Update{Status: st}}
		if mut != nil {
			mut(&cl)
		}
		b, _ := json.Marshal(&cl)
		return b
	}
	await.True(t, wait, "executor e1 registered at the agent", func() bool {
		execs, _ := frameworkField(t, c, s.FrameworkID, "executors").([]any)
		return len(execs) == 1
	})
	// typed is e1's call with the JSON type field typ ("": none).
	typed := func(typ string) []byte {
		return []byte(`{` + typ + `"framework_id":{"value":"` + s.FrameworkID + `"},"executor_id":{"value":"e1"}}`)
	}
	tests := []struct {
		name string
		ct   string
		body []byte
		want int
	}{
		{"no Content-Type", "", call(nil), 400},
		{"unsupported Content-Type", "text/plain", call(nil), 415},
		{"unparsable", "application/json", []byte("{"), 400},
		{"uuid of 15 bytes", "application/json", call(func(c *executor.Call) { c.Update.Status.UUID = make([]byte, 15) }), 400},
		{"source not the executor", "application/json", call(func(c *executor.Call) { c.Update.Status.Source = mesos.SOURCE_MASTER.Enum() }), 400},
		{"TASK_STAGING", "application/json", call(func(c *executor.Call) { c.Update.Status.State = mesos.TASK_STAGING.Enum() }), 400},
		{"executor id mismatch", "application/json", call(func(c *executor.Call) { c.Update.Status.ExecutorID = &mesos.ExecutorID{Value: "other"} }), 400},
		{"unknown framework", "application/json", call(func(c *executor.Call) { c.FrameworkID.Value = "nope-0000" }), 400},
		{"unknown executor", "application/json", call(func(c *executor.Call) { c.ExecutorID.Value = "nope" }), 400},
		{"UPDATE before SUBSCRIBE", "application/json", call(nil), 403},
		{"HEARTBEAT", "application/json", call(func(c *executor.Call) { c.Type = executor.Call_HEARTBEAT; c.Update = nil }), 202},
		// Mesos: 400 "Expecting 'type' to be present"; a type UNKNOWN passes validation, and
		// an executor not yet subscribed is refused before the 501 (see
		// TestAnExecutorCallOfTypeUnknownIsNotImplemented).
		{"no type", "application/json", typed(""), 400},
		{"a null type", "application/json", typed(`"type":null,`), 400},
		{"type UNKNOWN before SUBSCRIBE", "application/json", typed(`"type":"UNKNOWN",`), 403},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := rawPost(t, url, tc.ct, "", "", tc.body)
			if resp.StatusCode != tc.want {
				t.Fatalf("%d %q; want %d", resp.StatusCode, body, tc.want)
			}
		})
	}
	get, err := http.Get(url)
	if err != nil || get.StatusCode != 405 {
		t.Fatalf("GET: %v %v; want 405", get, err)
	}
	get.Body.Close()
}

func itoa(n int) string { return strconv.Itoa(n) }

// The agent answers an executor call that names type UNKNOWN, of a subscribed executor, 501
// "501 Not Implemented." (libprocess's NotImplemented, as text), in JSON and in protobuf; a
// call without a type is refused at validation (TestExecutorCallValidation).
func TestAnExecutorCallOfTypeUnknownIsNotImplemented(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	s.Launch(o, task("t1", o, testExecutor("e1", "basic"), "run"))
	s.Update("t1", mesos.TASK_RUNNING)
	url := agentURL(o) + "/api/v1/executor"
	unknown, err := (&executor.Call{FrameworkID: mesos.FrameworkID{Value: s.FrameworkID}, ExecutorID: mesos.ExecutorID{Value: "e1"}}).Marshal()
	if err != nil {
		t.Fatal(err)
	}
	unknown = append(unknown, 3<<3|0, 0) // type (field 3) = UNKNOWN, present
	for _, tc := range []struct {
		contentType string
		body        []byte
	}{
		{"application/json", []byte(`{"type":"UNKNOWN","framework_id":{"value":"` + s.FrameworkID + `"},"executor_id":{"value":"e1"}}`)},
		{"application/x-protobuf", unknown},
	} {
		resp, body := rawPost(t, url, tc.contentType, "", "", tc.body)
		if resp.StatusCode != 501 || body != "501 Not Implemented." || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
			t.Fatalf("%s: %d %q (Content-Type %q); want 501 \"501 Not Implemented.\" as text/plain; charset=utf-8", tc.contentType, resp.StatusCode, body, resp.Header.Get("Content-Type"))
		}
	}
}

// Item 41: tasks queued for a new executor are all delivered right after SUBSCRIBED.
func TestQueuedLaunchesFollowSubscribed(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	e := testExecutor("e1", "basic")
	s.Launch(o, task("t1", o, e, "run"), task("t2", o, e, "run"), task("t3", o, e, "run"))
	for _, id := range []string{"t1", "t2", "t3"} {
		s.Update(id, mesos.TASK_RUNNING)
	}
	events := strings.Fields(readFile(t, filepath.Join(executorDir(t, c, s.FrameworkID, "e1"), "events.txt")))
	if len(events) < 4 || strings.Join(events[:4], " ") != "SUBSCRIBED LAUNCH LAUNCH LAUNCH" {
		t.Fatalf("executor saw %v; want SUBSCRIBED then three LAUNCHes", events)
	}
}

// Item 42: one executor id, one process: later tasks go to the running executor, whose
// resources are counted once.
func TestExecutorSharing(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	s.Launch(o, task("t1", o, testExecutor("e1", "basic"), "pid"))
	first := s.Update("t1", mesos.TASK_RUNNING)
	o = s.Offers()[0]
	if cpus(o) != 3.4 {
		t.Fatalf("after one task: %v cpus offered; want 3.4", cpus(o))
	}
	s.Launch(o, task("t2", o, testExecutor("e1", "basic"), "pid"))
	second := s.Update("t2", mesos.TASK_RUNNING)
	if string(first.Data) != string(second.Data) {
		t.Fatalf("tasks of one executor id ran in processes %s and %s", first.Data, second.Data)
	}
	if o := s.Offers()[0]; cpus(o) != 2.9 {
		t.Fatalf("after two tasks on one executor: %v cpus offered; want 2.9 (executor counted once)", cpus(o))
	}
}

func commandTask(id string, o mesos.Offer, ci *mesos.CommandInfo) mesos.TaskInfo {
	return mesos.TaskInfo{Name: id, TaskID: mesos.TaskID{Value: id}, AgentID: o.AgentID, Command: ci, Resources: scalars(0.1, 32)}
}

// Item 43: command tasks — shell=false execs with argv = arguments verbatim, in the sandbox.
func TestCommandLaunch(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	s.Launch(o,
		commandTask("argv", o, &mesos.CommandInfo{Shell: ptrTo(false), Value: ptrTo("/bin/sh"), Arguments: []string{"my-name", "-c", `echo "$0" > argv.txt; pwd > cwd.txt`}}),
		commandTask("shell", o, &mesos.CommandInfo{Value: ptrTo("echo hi > out.txt; exit 4")}))
	if st := s.Terminal("argv"); *st.State != mesos.TASK_FINISHED {
		t.Fatalf("argv task: %v", st.String())
	}
	if st := s.Terminal("shell"); *st.State != mesos.TASK_FAILED || !strings.Contains(st.GetMessage(), "status 4") {
		t.Fatalf("shell task exiting 4: %v; want TASK_FAILED naming the status", st.String())
	}
	dir := sandboxOf(t, c, "argv")
	real, _ := filepath.EvalSymlinks(dir)
	if got := strings.TrimSpace(readFile(t, filepath.Join(dir, "argv.txt"))); got != "my-name" {
		t.Fatalf("argv[0] = %q; want arguments[0] verbatim", got)
	}
	if got := strings.TrimSpace(readFile(t, filepath.Join(dir, "cwd.txt"))); got != real {
		t.Fatalf("cwd = %q; want the sandbox %q", got, real)
	}
	if got := readFile(t, filepath.Join(sandboxOf(t, c, "shell"), "out.txt")); got != "hi\n" {
		t.Fatalf("shell task wrote %q", got)
	}
}

func tarball(t *testing.T, files map[string]string) []byte {
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for name, body := range files {
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o755, Size: int64(len(body))})
		tw.Write([]byte(body))
	}
	tw.Close()
	gz.Close()
	return buf.Bytes()
}

// Item 44: the fetcher — a tarball over HTTP is extracted, output_file and executable apply,
// the cache fetches once, and a failed fetch fails the task.
func TestFetcher(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	archive := tarball(t, map[string]string{"app/hello.txt": "world"})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		switch r.URL.Path {
		case "/app.tar.gz":
			w.Write(archive)
		case "/tool":
			w.Write([]byte("#!/bin/sh\necho tool ran > tool.txt\n"))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	c := newCluster(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	uris := []mesos.CommandInfo_URI{
		{Value: srv.URL + "/app.tar.gz", Cache: ptrTo(true)},
		{Value: srv.URL + "/tool", Executable: ptrTo(true), OutputFile: ptrTo("bin/run")},
	}
	s.Launch(o,
		commandTask("fetch1", o, &mesos.CommandInfo{URIs: uris, Value: ptrTo("cat app/hello.txt > seen.txt && ./bin/run")}),
		commandTask("missing", o, &mesos.CommandInfo{URIs: []mesos.CommandInfo_URI{{Value: srv.URL + "/nope.tar.gz"}}, Value: ptrTo("true")}))
	if st := s.Terminal("fetch1"); *st.State != mesos.TASK_FINISHED {
		t.Fatalf("fetching task: %v", st.String())
	}
	dir := sandboxOf(t, c, "fetch1")
	if readFile(t, filepath.Join(dir, "seen.txt")) != "world" || readFile(t, filepath.Join(dir, "tool.txt")) != "tool ran\n" {
		t.Fatal("the fetched tarball was not extracted or the executable not run")
	}
	st := s.Terminal("missing")
	if *st.State != mesos.TASK_FAILED || *st.Reason != mesos.REASON_CONTAINER_LAUNCH_FAILED || *st.Source != mesos.SOURCE_AGENT {
		t.Fatalf("failed fetch: %v; want TASK_FAILED / CONTAINER_LAUNCH_FAILED from the agent", st.String())
	}
	before := hits.Load()
	o = s.Offers()[0]
	s.Launch(o, commandTask("fetch2", o, &mesos.CommandInfo{URIs: uris[:1], Value: ptrTo("cat app/hello.txt")}))
	s.Terminal("fetch2")
	if hits.Load() != before {
		t.Fatalf("a cached URI was fetched again (%d requests after %d)", hits.Load(), before)
	}
}

// Item 45: MESSAGE both ways; a message for an executor that is not subscribed is dropped.
func TestMessages(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	s.Launch(o, task("t1", o, testExecutor("e1", "basic"), "run"), task("t2", o, testExecutor("e2", "nosubscribe"), "run"))
	s.Update("t1", mesos.TASK_RUNNING)
	s.MustCall(calls.Message(o.AgentID.Value, "e1", []byte("ping")))
	m := s.Await("MESSAGE", isType(scheduler.Event_MESSAGE)).Message
	if string(m.Data) != "pong" || m.ExecutorID.Value != "e1" || m.AgentID != o.AgentID {
		t.Fatalf("MESSAGE %v; want pong from e1", m.String())
	}
	if err := s.Call(calls.Message(o.AgentID.Value, "e2", []byte("ping"))); err != nil {
		t.Fatalf("MESSAGE to an unsubscribed executor: %v; want a silent drop", err)
	}
	s.None("answer from an unsubscribed executor", 300*time.Millisecond, isType(scheduler.Event_MESSAGE))
}

// Item 46: executor HEARTBEAT events do not upset an executor.
func TestExecutorHeartbeats(t *testing.T) {
	t.Parallel()
	c := newCluster(t, func(o *mesoslocal.Options) { o.ExecutorHeartbeatInterval = 100 * time.Millisecond })
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	s.Launch(o, task("t1", o, testExecutor("e1", "basic"), "run"))
	s.Update("t1", mesos.TASK_RUNNING)
	dir := executorDir(t, c, s.FrameworkID, "e1")
	await.True(t, wait, "three executor heartbeats", func() bool {
		b, _ := os.ReadFile(filepath.Join(dir, "events.txt"))
		return strings.Count(string(b), "HEARTBEAT") >= 3
	})
	s.MustCall(calls.Message(o.AgentID.Value, "e1", []byte("ping")))
	s.Await("MESSAGE after heartbeats", isType(scheduler.Event_MESSAGE))
}

// Item 24: updates from the executor or the agent carry a 16-byte uuid; the master's never do.
func TestUUIDPresenceBySource(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	url, _ := slowFetch(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	s.Launch(o, task("run", o, testExecutor("e1", "basic"), "run"),
		task("slow", o, withURI(testExecutor("e2", "basic"), url), "run"))
	s.Update("run", mesos.TASK_RUNNING)
	s.MustCall(calls.Kill("slow", o.AgentID.Value))                                         // agent: KILLED_DURING_LAUNCH
	s.MustCall(calls.Reconcile())                                                           // master: reconciliation
	s.MustCall(calls.Kill("run", o.AgentID.Value))                                          // executor: KILLED
	s.MustCall(calls.Accept(calls.OfferOperations{}.WithOffers(mesos.OfferID{Value: "x"}))) // nothing to report
	seen := map[mesos.TaskStatus_Source]int{}
	for len(seen) < 3 {
		st := s.Await("UPDATE", isType(scheduler.Event_UPDATE)).Update.Status
		src := *st.Source
		seen[src]++
		if (src == mesos.SOURCE_MASTER) != (len(st.UUID) == 0) || src != mesos.SOURCE_MASTER && len(st.UUID) != 16 {
			t.Fatalf("%v: source %v with uuid of %d bytes", st.String(), src, len(st.UUID))
		}
		if len(st.UUID) == 16 {
			s.Ack(st)
		}
	}
}

// Two agents fetching one cached URI at the same moment both get it (the cache entry is
// fetched once).
func TestConcurrentFetchesOfOneCachedURI(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		time.Sleep(50 * time.Millisecond) // let the other agent's fetch start meanwhile
		w.Write([]byte("#!/bin/sh\nexit 0\n"))
	}))
	defer srv.Close()
	c := newCluster(t, func(o *mesoslocal.Options) { o.Agents = 2 })
	s := subscribe(t, c.URL(), codec, paInfo())
	var offers []mesos.Offer
	for len(offers) < 2 {
		offers = append(offers, s.Offers()...)
	}
	uri := []mesos.CommandInfo_URI{{Value: srv.URL + "/tool", Cache: ptrTo(true), Executable: ptrTo(true)}}
	for i, o := range offers[:2] {
		s.Launch(o, commandTask("cached"+strconv.Itoa(i), o, &mesos.CommandInfo{URIs: uri, Value: ptrTo("./tool")}))
	}
	for i := range 2 {
		if st := s.Terminal("cached" + strconv.Itoa(i)); *st.State != mesos.TASK_FINISHED {
			t.Fatalf("task %d: %v", i, st.String())
		}
	}
	if hits.Load() != 1 {
		t.Fatalf("the cached URI was fetched %d times; want once", hits.Load())
	}
}

// execConn is one SUBSCRIBE of an executor made over raw HTTP on behalf of a test executor that
// never subscribes itself, so that the test decides what the executor got and when its
// connection drops.
type execConn struct {
	t      *testing.T
	url    string
	call   executor.Call // framework and executor ids for the calls
	resp   *http.Response
	events chan executor.Event
}

// executorSubscribe subscribes executor execID listing tasks as its unacknowledged tasks.
func executorSubscribe(t *testing.T, o mesos.Offer, fwID, execID string, tasks ...mesos.TaskInfo) *execConn {
	t.Helper()
	return executorSubscribeWith(t, o, fwID, execID, executor.Call_Subscribe{UnacknowledgedTasks: tasks})
}

// executorSubscribeWith subscribes executor execID with sub.
func executorSubscribeWith(t *testing.T, o mesos.Offer, fwID, execID string, subscribe executor.Call_Subscribe) *execConn {
	t.Helper()
	x := &execConn{t: t, url: "http://" + o.URL.Address.GetIP() + ":" + itoa(int(o.URL.Address.Port)) + "/api/v1/executor",
		call:   executor.Call{FrameworkID: mesos.FrameworkID{Value: fwID}, ExecutorID: mesos.ExecutorID{Value: execID}},
		events: make(chan executor.Event, 100)}
	sub := x.call
	sub.Type, sub.Subscribe = executor.Call_SUBSCRIBE, &subscribe
	body, _ := json.Marshal(&sub)
	resp, text := rawPost(t, x.url, "application/json", "application/json", "", body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("executor SUBSCRIBE: %d %q", resp.StatusCode, text)
	}
	x.resp = resp
	t.Cleanup(x.drop)
	go func() {
		defer close(x.events)
		r := recordio.NewReader(resp.Body)
		for {
			frame, err := r.ReadFrame()
			if err != nil {
				return
			}
			var ev executor.Event
			if json.Unmarshal(frame, &ev) != nil {
				return
			}
			x.events <- ev
		}
	}()
	return x
}

// next is the next event on the connection but ACKNOWLEDGED (of the test's own updates).
func (x *execConn) next(want executor.Event_Type) executor.Event {
	x.t.Helper()
	deadline := time.After(wait)
	for {
		select {
		case ev, ok := <-x.events:
			if !ok {
				x.t.Fatalf("executor connection ended; want %v", want)
			}
			if ev.Type == executor.Event_ACKNOWLEDGED {
				continue
			}
			if ev.Type != want {
				got := ev.Type.String()
				if ev.Launch != nil {
					got += " of " + ev.Launch.Task.TaskID.Value
				}
				x.t.Fatalf("executor event %s; want %v", got, want)
			}
			return ev
		case <-deadline:
			x.t.Fatalf("no executor event within %v; want %v", wait, want)
		}
	}
}

// sentBefore sends an UPDATE of a task and returns the events, but ACKNOWLEDGEDs and HEARTBEATs,
// that the agent sent on the connection before it acknowledged that update: whatever it had
// sent to the executor by the time it took the update.
func (x *execConn) sentBefore(taskID string, state mesos.TaskState) []executor.Event_Type {
	x.t.Helper()
	uuid := x.update(taskID, state)
	var out []executor.Event_Type
	deadline := time.After(wait)
	for {
		select {
		case ev, ok := <-x.events:
			switch {
			case !ok:
				x.t.Fatalf("executor connection ended after %v; want the ACKNOWLEDGED of the update", out)
			case ev.Type == executor.Event_ACKNOWLEDGED && bytes.Equal(ev.Acknowledged.UUID, uuid):
				return out
			case ev.Type != executor.Event_ACKNOWLEDGED && ev.Type != executor.Event_HEARTBEAT:
				out = append(out, ev.Type)
			}
		case <-deadline:
			x.t.Fatalf("no ACKNOWLEDGED of the update within %v (events before: %v)", wait, out)
		}
	}
}

// update sends an executor UPDATE of a task and returns its uuid.
func (x *execConn) update(taskID string, state mesos.TaskState) []byte {
	x.t.Helper()
	uuid := make([]byte, 16)
	rand.Read(uuid)
	call := x.call
	call.Type, call.Update = executor.Call_UPDATE, &executor.Call_Update{Status: mesos.TaskStatus{
		TaskID: mesos.TaskID{Value: taskID}, State: state.Enum(), Source: mesos.SOURCE_EXECUTOR.Enum(), UUID: uuid}}
	body, _ := json.Marshal(&call)
	if resp, text := rawPost(x.t, x.url, "application/json", "", "", body); resp.StatusCode != http.StatusAccepted {
		x.t.Fatalf("executor UPDATE: %d %q", resp.StatusCode, text)
	}
	return uuid
}

// runT1 launches task t1 on executor e of a raw executor-API client, which takes it and reports
// it running; it returns the client and the offer the test goes on with.
func runT1(t *testing.T, s *mesostest.Sched, e *mesos.ExecutorInfo) (*execConn, mesos.Offer) {
	t.Helper()
	o := s.Offers()[0]
	s.Launch(o, task("t1", o, e, "run"))
	x := executorSubscribe(t, o, s.FrameworkID, "e1")
	x.next(executor.Event_SUBSCRIBED)
	x.next(executor.Event_LAUNCH)
	x.update("t1", mesos.TASK_RUNNING)
	s.Ack(s.Update("t1", mesos.TASK_RUNNING))
	return x, o
}

// drop closes the connection from the executor's side, as a network break does.
func (x *execConn) drop() { x.resp.Body.Close() }

// loggedCluster is a cluster whose log a test can wait on.
func loggedCluster(t *testing.T) (*mesoslocal.Cluster, *logtest.Hook) {
	l := mesostest.QuietLogger()
	hook := logtest.NewLocal(l)
	return newCluster(t, func(o *mesoslocal.Options) { o.Logger = l }), hook
}

// awaitLogged waits for the log entry msg about executor execID.
func awaitLogged(t *testing.T, hook *logtest.Hook, msg, execID string) {
	t.Helper()
	await.True(t, wait, "log entry "+msg+" of executor "+execID, func() bool {
		for _, e := range hook.AllEntries() {
			if e.Message == msg && e.Data["executor"] == execID {
				return true
			}
		}
		return false
	})
}

func wantDroppedAtSubscribe(t *testing.T, st mesos.TaskStatus, state mesos.TaskState) {
	t.Helper()
	if *st.State != state || st.GetReason() != mesos.REASON_AGENT_RESTARTED || st.GetMessage() != "Task launched during agent restart" ||
		st.GetSource() != mesos.SOURCE_AGENT || len(st.UUID) != 16 {
		t.Fatalf("%s: %v; want %v / AGENT_RESTARTED \"Task launched during agent restart\" from the agent, with a uuid",
			st.TaskID.Value, st.String(), state)
	}
}

// MESOS.md §5.6, §6.3: on every SUBSCRIBE, not only after an agent restart, a sent task still
// STAGING that the executor does not list is dropped (TASK_LOST for a framework that is not
// partition-aware); a listed one is not.
func TestSubscribeDropsSentTasksTheExecutorDoesNotList(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := subscribe(t, c.URL(), codec, frameworkInfo())
	e := testExecutor("e1", "nosubscribe")
	x, o := runT1(t, s, e)
	o = s.Offers()[0]
	t2, t3 := task("t2", o, e, "run"), task("t3", o, e, "run")
	s.Launch(o, t2, t3)
	if id := x.next(executor.Event_LAUNCH).Launch.Task.TaskID.Value; id != "t2" {
		t.Fatalf("LAUNCH of %s; want t2", id)
	}
	x.next(executor.Event_LAUNCH)
	// The executor lost t2 (say it did not take the LAUNCH before its connection broke) and
	// comes back with t3 only; the agent itself has not restarted.
	x.drop()
	x = executorSubscribe(t, o, s.FrameworkID, "e1", t3)
	x.next(executor.Event_SUBSCRIBED)
	wantDroppedAtSubscribe(t, s.Update("t2"), mesos.TASK_LOST)
	x.update("t3", mesos.TASK_RUNNING)
	if st := s.Update("t3"); *st.State != mesos.TASK_RUNNING || st.GetSource() != mesos.SOURCE_EXECUTOR {
		t.Fatalf("t3, listed by the executor: %v; want its TASK_RUNNING", st.String())
	}
}

// MESOS.md §6.5, §5.6: a LAUNCH for a RUNNING executor whose connection has dropped is sent into
// the dropped connection and lost, not kept for a re-subscription, and so is a KILL of that
// task; the executor re-subscribes without the tasks and they are dropped.
func TestLaunchIntoADroppedConnectionIsLost(t *testing.T) {
	t.Parallel()
	c, hook := loggedCluster(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	e := testExecutor("e1", "nosubscribe")
	x, o := runT1(t, s, e)
	x.drop()
	awaitLogged(t, hook, "executor disconnected", "e1")
	o = s.Offers()[0]
	s.Launch(o, task("t2", o, e, "run"), task("t3", o, e, "run"))
	s.MustCall(calls.Kill("t3", o.AgentID.Value))
	x = executorSubscribe(t, o, s.FrameworkID, "e1")
	x.next(executor.Event_SUBSCRIBED)
	wantDroppedAtSubscribe(t, s.Update("t3"), mesos.TASK_DROPPED) // its first update: not killed before delivery
	wantDroppedAtSubscribe(t, s.Update("t2"), mesos.TASK_DROPPED)
	// Nothing was kept for the new connection: the next event on it is one sent after SUBSCRIBED.
	s.MustCall(calls.Message(o.AgentID.Value, "e1", []byte("ping")))
	x.next(executor.Event_MESSAGE)
}

// MESOS.md §6.3: an executor left by the drops at its SUBSCRIBE with no task it was ever sent
// and reported on, and nothing queued, is shut down, as Mesos's agent checks after the drops.
func TestSubscribeShutsDownAnExecutorLeftWithNothingSent(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	s.Launch(o, task("t1", o, testExecutor("e1", "nosubscribe"), "run"))
	x := executorSubscribe(t, o, s.FrameworkID, "e1")
	x.next(executor.Event_SUBSCRIBED)
	x.next(executor.Event_LAUNCH)
	x.drop() // before the executor took the task
	x = executorSubscribe(t, o, s.FrameworkID, "e1")
	x.next(executor.Event_SHUTDOWN)
	wantDroppedAtSubscribe(t, s.Update("t1"), mesos.TASK_DROPPED)
	if f := s.Await("FAILURE", isType(scheduler.Event_FAILURE)).Failure; f.GetExecutorID().Value != "e1" {
		t.Fatalf("FAILURE %v; want executor e1's", f.String())
	}
}

// MESOS.md §6.4: SUBSCRIBED is the first event of an executor's stream, also when the
// subscription carries unacknowledged updates: their ACKNOWLEDGEDs come after it.
func TestCarriedUpdatesAreAcknowledgedAfterSubscribed(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	t1 := task("t1", o, testExecutor("e1", "nosubscribe"), "run")
	s.Launch(o, t1)
	x := executorSubscribe(t, o, s.FrameworkID, "e1")
	x.next(executor.Event_SUBSCRIBED)
	x.next(executor.Event_LAUNCH)
	x.drop() // the executor took the task; its RUNNING is still to be acknowledged
	uuid := make([]byte, 16)
	rand.Read(uuid)
	running := mesos.TaskStatus{TaskID: t1.TaskID, State: mesos.TASK_RUNNING.Enum(), Source: mesos.SOURCE_EXECUTOR.Enum(), UUID: uuid}
	x = executorSubscribeWith(t, o, s.FrameworkID, "e1", executor.Call_Subscribe{
		UnacknowledgedTasks: []mesos.TaskInfo{t1}, UnacknowledgedUpdates: []executor.Call_Update{{Status: running}}})
	for i, want := range []executor.Event_Type{executor.Event_SUBSCRIBED, executor.Event_ACKNOWLEDGED} {
		select {
		case ev := <-x.events:
			if ev.Type != want {
				t.Fatalf("event %d of the stream: %v; want %v", i+1, ev.Type, want)
			}
			if want == executor.Event_ACKNOWLEDGED && !bytes.Equal(ev.Acknowledged.UUID, uuid) {
				t.Fatalf("ACKNOWLEDGED of %x; want the carried update's %x", ev.Acknowledged.UUID, uuid)
			}
		case <-time.After(wait):
			t.Fatalf("no event %d within %v; want %v", i+1, wait, want)
		}
	}
	if st := s.Update("t1"); *st.State != mesos.TASK_RUNNING || !bytes.Equal(st.UUID, uuid) {
		t.Fatalf("t1: %v; want the carried TASK_RUNNING", st.String())
	}
}

// Executor::updateTaskState and Slave::_statusUpdate (slave.cpp): once a task is terminal at the
// agent, a later update of it from the executor (a late non-terminal one, or a second terminal
// one) fails the state update and is dropped, though the executor gets its ACKNOWLEDGED. It never
// enters the task's stream, so the latest state the agent sends the master with every update of
// the stream stays the terminal one (Master::updateTask keeps the task terminal), and the
// framework never sees the late update.
func TestAnExecutorUpdateAfterATerminalOneIsDropped(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		ackRunning bool // the framework acknowledges the TASK_RUNNING before the executor goes on
		late       mesos.TaskState
	}{
		{"RUNNING after FINISHED", true, mesos.TASK_RUNNING},
		{"RUNNING after FINISHED, both behind an unacknowledged RUNNING", false, mesos.TASK_RUNNING},
		{"FAILED after FINISHED", true, mesos.TASK_FAILED},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t)
			s := subscribe(t, c.URL(), codec, paInfo())
			o := s.Offers()[0]
			s.Launch(o, task("t1", o, testExecutor("e1", "nosubscribe"), "run"))
			x := executorSubscribe(t, o, s.FrameworkID, "e1")
			x.next(executor.Event_SUBSCRIBED)
			x.next(executor.Event_LAUNCH)
			x.sentBefore("t1", mesos.TASK_RUNNING)
			running := s.Update("t1", mesos.TASK_RUNNING)
			head := running // the update the agent re-sends until it is acknowledged
			if tc.ackRunning {
				s.Ack(running)
			}
			x.sentBefore("t1", mesos.TASK_FINISHED)
			if tc.ackRunning {
				head = s.Update("t1", mesos.TASK_FINISHED)
			}
			x.sentBefore("t1", tc.late) // acknowledged to the executor all the same
			// Every re-send of the head tells the master the agent's latest state. Wait for one made
			// after the late update was sent: the answer to a reconciliation asked for now comes after
			// everything sent before, which is then dropped.
			reconcile(s, "probe", "no-such-agent-S9")
			s.Update("probe")
			for {
				if _, ok := s.AwaitFor(0, updateOf("t1")); !ok {
					break
				}
			}
			s.Await("a re-send of the unacknowledged "+head.GetState().String(), func(ev scheduler.Event) bool {
				return updateOf("t1")(ev) && bytes.Equal(ev.Update.Status.UUID, head.UUID)
			})
			tasks, _ := frameworkField(t, c, s.FrameworkID, "tasks").([]any)
			if len(tasks) != 1 || tasks[0].(map[string]any)["state"] != "TASK_FINISHED" {
				t.Fatalf("the master's t1 after a %v sent after its TASK_FINISHED: %v; want TASK_FINISHED", tc.late, tasks)
			}
			if !tc.ackRunning {
				s.Ack(running)
				head = s.Update("t1", mesos.TASK_FINISHED)
			}
			s.Ack(head)
			s.None("update of t1 after its acknowledged TASK_FINISHED", 500*time.Millisecond, updateOf("t1"))
		})
	}
}
