package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	mesosexec "github.com/mesos/mesos-go/api/v1/lib/executor"
	"github.com/mesos/mesos-go/api/v1/lib/httpcli"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/integration/mesostest"
	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/taskdata"
	"github.com/ejcloud/ejcloud/taskid"
)

// recordingAgent is an agent's executor API on loopback: it answers the nth SUBSCRIBE (from 1)
// with the events stream(n), then holds the stream open, and takes and records every UPDATE.
type recordingAgent struct {
	*httptest.Server
	subscribes atomic.Int32

	mu      sync.Mutex
	updates []mesos.TaskStatus
}

func newRecordingAgent(t *testing.T, stream func(n int) []string) *recordingAgent {
	a := &recordingAgent{}
	done := make(chan struct{})
	a.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var c mesosexec.Call
		if err := json.NewDecoder(r.Body).Decode(&c); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		switch c.Type {
		case mesosexec.Call_SUBSCRIBE:
			w.Header().Set("Content-Type", "application/json")
			for _, ev := range stream(int(a.subscribes.Add(1))) {
				writeEvent(w, ev)
			}
			select {
			case <-done:
			case <-r.Context().Done():
			}
		case mesosexec.Call_UPDATE:
			a.mu.Lock()
			a.updates = append(a.updates, c.GetUpdate().GetStatus())
			a.mu.Unlock()
			w.WriteHeader(http.StatusAccepted)
		default:
			w.WriteHeader(http.StatusAccepted)
		}
	}))
	t.Cleanup(func() {
		close(done)
		a.Close()
	})
	return a
}

func (a *recordingAgent) endpoint() string { return a.Listener.Addr().String() }

// updatesOf is every UPDATE of the task the agent took so far, in the order it took them.
func (a *recordingAgent) updatesOf(taskID string) []mesos.TaskStatus {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []mesos.TaskStatus
	for _, st := range a.updates {
		if st.TaskID.Value == taskID {
			out = append(out, st)
		}
	}
	return out
}

// started is an executor's Run, going on until the test ends.
type started struct {
	done chan struct{} // closed when Run has returned
	err  error         // what Run returned, or its panic
}

func start(t *testing.T, ex *Executor) *started {
	ctx, cancel := context.WithCancel(context.Background())
	s := &started{done: make(chan struct{})}
	go func() {
		defer close(s.done)
		// A panic of the event loop is reported as this test's failure, not the whole binary's.
		defer func() {
			if p := recover(); p != nil {
				s.err = fmt.Errorf("Run panicked: %v", p)
			}
		}()
		s.err = ex.Run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-s.done
	})
	return s
}

// awaitServing waits for cond, failing the test at once if the executor ends meanwhile.
func (s *started) awaitServing(t *testing.T, what string, cond func() bool) {
	t.Helper()
	await.True(t, 10*time.Second, what, func() bool {
		if cond() {
			return true
		}
		select {
		case <-s.done:
			t.Fatalf("%s: the executor ended: %v", what, s.err)
		default:
		}
		return false
	})
}

// launchEvent is the agent's LAUNCH of task.
func launchEvent(t *testing.T, task mesos.TaskInfo) string {
	t.Helper()
	b, err := json.Marshal(mesosexec.Event{Type: mesosexec.Event_LAUNCH, Launch: &mesosexec.Event_Launch{Task: task}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// junkTask is a task whose data is no payload: the executor answers it with TASK_ERROR at
// once, starting nothing.
var junkTask = mesos.TaskInfo{Name: "junk", TaskID: mesos.TaskID{Value: "junk"}, Data: []byte("not json")}

// scriptPayload is the valid payload of shard item of a SCRIPT job running cmd, and its
// shardingContext.taskId.
func scriptPayload(jobName, cmd string, item int) (string, []byte) {
	j := config.Job{JobName: jobName, AppName: "app", JobType: config.Script, JobExecutionType: config.Transient,
		TimeZone: "UTC", ShardingTotalCount: 2, CPUCount: 0.1, MemoryMB: 16, ScriptCommandLine: cmd,
		Placement: config.Spread, JobShardingStrategyType: config.AvgAllocation, JobProperties: map[string]string{}}
	id := taskid.New(taskid.Meta{JobName: jobName, Item: item}, taskid.Ready, "a").String()
	p := taskdata.Payload{Job: j, ShardingContext: taskdata.ShardingContext{TaskID: id, JobName: jobName,
		ShardingTotalCount: j.ShardingTotalCount, ShardingItem: item}}
	return id, p.Encode()
}

// The executor calls its agent directly even where the environment names an HTTP proxy: Mesos
// agents are reached without one (libprocess has no proxy support), and a proxy would be given
// every call with the executor's bearer token. mesos-go's transport proxies by
// http.ProxyFromEnvironment, which never proxies a loopback host, the only kind a test may
// use; so the test hands the executor's transport a proxy for every host first, as
// ProxyFromEnvironment is for an agent at any other address when HTTP_PROXY is set, and the
// executor must still reach the agent itself, for its SUBSCRIBE and for its UPDATEs.
func TestTheExecutorCallsTheAgentDirectlyNotThroughAProxy(t *testing.T) {
	t.Parallel()
	var proxied atomic.Int32
	var tokens sync.Map // Authorization headers that reached the proxy
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		proxied.Add(1)
		tokens.Store(r.Header.Get("Authorization"), true)
		w.WriteHeader(http.StatusBadGateway)
	}))
	t.Cleanup(proxy.Close)
	proxyURL, err := url.Parse(proxy.URL)
	if err != nil {
		t.Fatal(err)
	}
	agent := newRecordingAgent(t, func(int) []string { return []string{subscribedEvent, launchEvent(t, junkTask)} })
	cfg := agentConfig(t, agent.endpoint(), false, map[string]string{"MESOS_EXECUTOR_AUTHENTICATION_TOKEN": "s3cret"})
	viaProxy := httpcli.Transport(func(tr *http.Transport) { tr.Proxy = http.ProxyURL(proxyURL) })
	s := start(t, newExecutor(cfg, mesostest.QuietLogger(), viaProxy))
	explain := func() string {
		var seen []string
		tokens.Range(func(k, _ any) bool { seen = append(seen, fmt.Sprintf("%q", k)); return true })
		return fmt.Sprintf("%d calls went to the proxy, with Authorization %s", proxied.Load(), strings.Join(seen, ", "))
	}
	s.awaitServing(t, "the agent takes the executor's SUBSCRIBE and UPDATE", func() bool {
		if proxied.Load() != 0 {
			t.Fatal(explain())
		}
		return agent.subscribes.Load() > 0 && len(agent.updatesOf(junkTask.TaskID.Value)) > 0
	})
	if proxied.Load() != 0 {
		t.Fatal(explain())
	}
}

// An event that lacks its member (the JSON of a broken or newer agent) is not acted on, and
// the executor goes on serving the stream: it takes the next LAUNCH, and re-subscribes only
// for an ERROR, which is the agent's ERROR with or without a message. A SUBSCRIBED without
// its member still subscribes, so the updates of the stream are delivered.
func TestAMalformedEventIsSkipped(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, event string
		subscribes  int32 // SUBSCRIBEs by the time the next LAUNCH is answered
	}{
		{"SUBSCRIBED", `{"type":"SUBSCRIBED"}`, 1},
		{"LAUNCH", `{"type":"LAUNCH"}`, 1},
		{"LAUNCH of a task without task_id", `{"type":"LAUNCH","launch":{"task":{"name":"no id","task_id":{"value":""},"agent_id":{"value":"a"}}}}`, 1},
		{"LAUNCH_GROUP", `{"type":"LAUNCH_GROUP"}`, 1},
		{"LAUNCH_GROUP of a task without task_id", `{"type":"LAUNCH_GROUP","launch_group":{"task_group":{"tasks":[{"name":"no id","task_id":{"value":""},"agent_id":{"value":"a"}}]}}}`, 1},
		{"KILL", `{"type":"KILL"}`, 1},
		{"ACKNOWLEDGED", `{"type":"ACKNOWLEDGED"}`, 1},
		{"MESSAGE", `{"type":"MESSAGE"}`, 1},
		{"ERROR", `{"type":"ERROR"}`, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			agent := newRecordingAgent(t, func(n int) []string {
				switch {
				case n > 1:
					return []string{subscribedEvent, launchEvent(t, junkTask)}
				case tc.name == "SUBSCRIBED":
					return []string{tc.event, launchEvent(t, junkTask)}
				}
				return []string{subscribedEvent, tc.event, launchEvent(t, junkTask)}
			})
			ex := New(agentConfig(t, agent.endpoint(), false, nil), mesostest.QuietLogger())
			s := start(t, ex)
			s.awaitServing(t, "the LAUNCH after the malformed event is answered", func() bool {
				return len(agent.updatesOf(junkTask.TaskID.Value)) > 0
			})
			if n := agent.subscribes.Load(); n != tc.subscribes {
				t.Fatalf("%d SUBSCRIBEs; want %d", n, tc.subscribes)
			}
			// The executor takes a LAUNCH's task before anything else; only the valid one is held.
			ex.mu.Lock()
			tasks := slices.Sorted(func(yield func(string) bool) {
				for id := range ex.unackedTasks {
					if !yield(id) {
						return
					}
				}
			})
			ex.mu.Unlock()
			if !slices.Equal(tasks, []string{junkTask.TaskID.Value}) {
				t.Fatalf("tasks taken %q; want only %q", tasks, junkTask.TaskID.Value)
			}
		})
	}
}

// The Mesos task id and the payload's shardingContext.taskId are one id: the run's end record
// is written under the one and removed under the other. A task with two is refused with
// TASK_ERROR naming both, and nothing of it runs; a valid task launched after it runs to its
// end, by which time a script of the refused one would have left its mark too.
func TestATaskWhoseIDIsNotItsPayloadsIsRefused(t *testing.T) {
	t.Parallel()
	cmd := `touch "ran-$EJCLOUD_SHARDING_ITEM"; true`
	scID, data := scriptPayload("ids", cmd, 0)
	refused := mesos.TaskInfo{Name: "refused", TaskID: mesos.TaskID{Value: "not-the-payloads"}, Data: data}
	goodID, goodData := scriptPayload("ids", cmd, 1)
	good := mesos.TaskInfo{Name: "good", TaskID: mesos.TaskID{Value: goodID}, Data: goodData}
	agent := newRecordingAgent(t, func(int) []string {
		return []string{subscribedEvent, launchEvent(t, refused), launchEvent(t, good)}
	})
	cfg := agentConfig(t, agent.endpoint(), false, nil)
	s := start(t, New(cfg, mesostest.QuietLogger()))
	s.awaitServing(t, "the valid task finishes", func() bool {
		u := agent.updatesOf(goodID)
		return len(u) > 0 && terminal(u[len(u)-1].GetState())
	})
	if u := agent.updatesOf(goodID); u[len(u)-1].GetState() != mesos.TASK_FINISHED {
		t.Fatalf("the valid task: %v; want TASK_FINISHED", u[len(u)-1].String())
	}
	u := agent.updatesOf(refused.TaskID.Value)
	if len(u) != 1 || u[0].GetState() != mesos.TASK_ERROR ||
		!strings.Contains(u[0].GetMessage(), refused.TaskID.Value) || !strings.Contains(u[0].GetMessage(), scID) {
		var got []string
		for _, st := range u {
			got = append(got, fmt.Sprintf("%v %q", st.GetState(), st.GetMessage()))
		}
		t.Fatalf("updates of the task with two ids: %v; want one TASK_ERROR naming %q and %q", got, refused.TaskID.Value, scID)
	}
	if _, err := os.Stat(filepath.Join(cfg.Sandbox, "ran-0")); err == nil {
		t.Fatal("the refused task's script ran")
	}
}

// Each wait before re-subscribing is random in [0, MESOS_SUBSCRIPTION_BACKOFF_MAX], as in
// Mesos's executor library, and never above a second (see resubscribeWait).
func TestResubscribeWaitIsRandomWithinTheMaximum(t *testing.T) {
	t.Parallel()
	const draws = 2000
	for _, tc := range []struct{ max, bound time.Duration }{
		{0, 0},
		{time.Nanosecond, time.Nanosecond},
		{10 * time.Millisecond, 10 * time.Millisecond},
		{99 * time.Millisecond, 99 * time.Millisecond},
		{time.Second, time.Second},
		{2 * time.Second, time.Second},
		{15 * time.Minute, time.Second},
	} {
		t.Run(tc.max.String(), func(t *testing.T) {
			var low, high bool // a draw in each half of [0, bound]: the wait is not a constant
			for range draws {
				w := resubscribeWait(tc.max)
				if w < 0 || w > tc.bound {
					t.Fatalf("resubscribeWait(%v) = %v; want within [0, %v]", tc.max, w, tc.bound)
				}
				low, high = low || w <= tc.bound/2, high || w >= tc.bound/2
			}
			if !low || !high {
				t.Fatalf("%d draws of resubscribeWait(%v) all in one half of [0, %v]", draws, tc.max, tc.bound)
			}
		})
	}
}
