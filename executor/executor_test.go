package executor_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/integration/mesoslocal"
	"github.com/ejcloud/ejcloud/integration/mesostest"
	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/internal/gobuild"
	"github.com/ejcloud/ejcloud/taskdata"
	"github.com/ejcloud/ejcloud/taskend"
	"github.com/ejcloud/ejcloud/taskid"
)

// The binaries under test, built once by TestMain.
var stockExecutor, sdkExecutor string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "ejcloud-executor-test-")
	if err != nil {
		panic(err)
	}
	stockExecutor, sdkExecutor = filepath.Join(dir, "ejcloud-executor"), filepath.Join(dir, "sdk-executor")
	for bin, pkg := range map[string]string{stockExecutor: "./cmd/ejcloud-executor", sdkExecutor: "./examples/sdk-executor"} {
		if err := gobuild.Executor(bin, pkg); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// env is a cluster with one framework subscribed to it.
type env struct {
	t *testing.T
	c *mesoslocal.Cluster
	s *mesostest.Sched
}

func newEnv(t *testing.T, change ...func(*mesoslocal.Options)) *env {
	c := mesostest.NewCluster(t, change...)
	return &env{t: t, c: c, s: mesostest.Subscribe(t, c.URL(), "application/json", mesostest.PAInfo())}
}

func scriptJob(name, cmd string) config.Job {
	return config.Job{JobName: name, AppName: "app", JobType: config.Script, JobExecutionType: config.Transient,
		TimeZone: "UTC", ShardingTotalCount: 2, CPUCount: 0.1, MemoryMB: 16, ScriptCommandLine: cmd,
		Placement: config.Spread, JobShardingStrategyType: config.AvgAllocation, JobProperties: map[string]string{}}
}

func executorInfo(bin, id string, sampling int) *mesos.ExecutorInfo {
	return &mesos.ExecutorInfo{
		ExecutorID: mesos.ExecutorID{Value: id},
		Command:    &mesos.CommandInfo{Value: &bin, Shell: mesostest.Ptr(false), Arguments: []string{bin}},
		Resources:  mesostest.Scalars(0.1, 32),
		Data:       taskdata.ExecutorData{EventTraceSamplingCount: sampling}.Encode(),
	}
}

// shard builds the task of one shard of j for an executor.
func shard(o mesos.Offer, exec *mesos.ExecutorInfo, j config.Job, item int, param string) mesos.TaskInfo {
	id := taskid.New(taskid.Meta{JobName: j.JobName, Item: item}, taskid.Ready, o.AgentID.Value).String()
	p := taskdata.Payload{Job: j, ShardingContext: taskdata.ShardingContext{TaskID: id, JobName: j.JobName,
		ShardingTotalCount: j.ShardingTotalCount, JobParameter: j.JobParameter, ShardingItem: item, ShardingParameter: param}}
	return mesos.TaskInfo{Name: id, TaskID: mesos.TaskID{Value: id}, AgentID: o.AgentID, Executor: exec,
		Resources: mesostest.Scalars(0.1, 16), Data: p.Encode()}
}

func (e *env) offer() mesos.Offer { return e.s.Offers()[0] }

func statusData(t *testing.T, st mesos.TaskStatus) taskdata.Status {
	t.Helper()
	d, err := taskdata.DecodeStatus(st.Data)
	if err != nil {
		t.Fatalf("status data of %v: %v", st.String(), err)
	}
	return d
}

// sandboxDir finds an executor's sandbox.
func sandboxDir(t *testing.T, c *mesoslocal.Cluster, execID string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(c.WorkDir(), "slaves", "*", "frameworks", "*", "executors", execID, "runs", "latest"))
	if len(m) != 1 {
		t.Fatalf("sandbox of %s: %v", execID, m)
	}
	return m[0]
}

func TestScriptExitZeroFinishes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o := e.offer()
	tk := shard(o, executorInfo(stockExecutor, "app@-@"+o.AgentID.Value, 0), scriptJob("ok", "true"), 1, "")
	e.s.Launch(o, tk)
	running := e.s.Update(tk.TaskID.Value)
	ex := statusData(t, running).Execution
	if *running.State != mesos.TASK_RUNNING || ex == nil || ex.ShardingItem != 1 || ex.Hostname == "" || ex.IP == "" || ex.CompleteTime != nil {
		t.Fatalf("first update %v with data %s; want RUNNING with the execution's start", running.String(), running.Data)
	}
	e.s.Ack(running)
	fin := e.s.Update(tk.TaskID.Value)
	d := statusData(t, fin)
	if *fin.State != mesos.TASK_FINISHED || d.JobFailed || d.Execution == nil || !d.Execution.Success || d.Execution.CompleteTime == nil {
		t.Fatalf("%v data %s; want FINISHED with a successful execution", fin.String(), fin.Data)
	}
}

func TestScriptExitThreeFailsWithTheMarker(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o := e.offer()
	tk := shard(o, executorInfo(stockExecutor, "app@-@"+o.AgentID.Value, 0), scriptJob("bad", "exit 3"), 0, "")
	e.s.Launch(o, tk)
	st := e.s.Terminal(tk.TaskID.Value)
	d := statusData(t, st)
	if *st.State != mesos.TASK_FAILED || !strings.HasPrefix(st.GetMessage(), "job failed: ") || !strings.Contains(st.GetMessage(), "status 3") || !d.JobFailed {
		t.Fatalf("%v data %s; want FAILED, \"job failed: … status 3\", jobFailed", st.String(), st.Data)
	}
	if d.Execution == nil || d.Execution.Success || !strings.Contains(d.Execution.FailureCause, "status 3") {
		t.Fatalf("execution %+v; want a failed execution with its cause", d.Execution)
	}
}

func TestUnknownJobClassErrorsWhileAnotherTaskOfTheExecutorFinishes(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o := e.offer()
	exec := executorInfo(stockExecutor, "app@-@"+o.AgentID.Value, 0)
	simple := scriptJob("simple", "")
	simple.JobType, simple.JobClass = config.Simple, "com.example.Missing"
	bad := shard(o, exec, simple, 0, "")
	good := shard(o, exec, scriptJob("good", "sleep 0.3; true"), 0, "")
	e.s.Launch(o, bad, good)
	st := e.s.Terminal(bad.TaskID.Value)
	if *st.State != mesos.TASK_ERROR || !strings.Contains(st.GetMessage(), `unknown jobClass "com.example.Missing"`) {
		t.Fatalf("%v; want TASK_ERROR naming the jobClass", st.String())
	}
	if st := e.s.Terminal(good.TaskID.Value); *st.State != mesos.TASK_FINISHED {
		t.Fatalf("the other task of the executor: %v; want FINISHED", st.String())
	}
}

func TestBadPayloadIsAnErrorNotACrash(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o := e.offer()
	exec := executorInfo(stockExecutor, "app@-@"+o.AgentID.Value, 0)
	empty := shard(o, exec, scriptJob("x", "true"), 0, "")
	empty.TaskID.Value, empty.Data = "empty", nil
	junk := shard(o, exec, scriptJob("x", "true"), 0, "")
	junk.TaskID.Value, junk.Data = "junk", []byte("not json {")
	good := shard(o, exec, scriptJob("x", "true"), 1, "")
	e.s.Launch(o, empty, junk, good)
	for id, want := range map[string]string{"empty": "empty", "junk": "not the JSON payload"} {
		if st := e.s.Terminal(id); *st.State != mesos.TASK_ERROR || !strings.Contains(st.GetMessage(), want) {
			t.Fatalf("%s: %v; want TASK_ERROR mentioning %q", id, st.String(), want)
		}
	}
	if st := e.s.Terminal(good.TaskID.Value); *st.State != mesos.TASK_FINISHED {
		t.Fatalf("a valid task after bad ones: %v", st.String())
	}
}

func TestShardingContextReachesTheScriptByteForByte(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o := e.offer()
	j := scriptJob("quoting", `save() { printf '%s' "$1" > "ctx-$EJCLOUD_SHARDING_ITEM.json"; printf '%s' "$EJCLOUD_JOB_PARAMETER" > param.txt; }; save`)
	j.JobParameter = "it's \"quoted\"  $HOME `id` \\ \n second line $(whoami) ;|&"
	tk := shard(o, executorInfo(stockExecutor, "app@-@"+o.AgentID.Value, 0), j, 1, "p=1 \"x\"")
	e.s.Launch(o, tk)
	if st := e.s.Terminal(tk.TaskID.Value); *st.State != mesos.TASK_FINISHED {
		t.Fatalf("%v", st.String())
	}
	p, _ := taskdata.DecodePayload(tk.Data)
	want, _ := json.Marshal(p.ShardingContext)
	dir := sandboxDir(t, e.c, "app@-@"+o.AgentID.Value)
	if got, _ := os.ReadFile(filepath.Join(dir, "ctx-1.json")); string(got) != string(want) {
		t.Fatalf("the script got\n%s\nwant\n%s", got, want)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "param.txt")); string(got) != j.JobParameter {
		t.Fatalf("EJCLOUD_JOB_PARAMETER = %q; want %q", got, j.JobParameter)
	}
}

func TestKillOfAScriptIgnoringSIGTERM(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o := e.offer()
	j := scriptJob("stubborn", `trap '' TERM; sleep 1000 & echo $! > child.pid; echo $$ > shell.pid; wait; wait`)
	tk := shard(o, executorInfo(stockExecutor, "app@-@"+o.AgentID.Value, 0), j, 0, "")
	const grace = time.Second
	tk.KillPolicy = &mesos.KillPolicy{GracePeriod: &mesos.DurationInfo{Nanoseconds: int64(grace)}}
	e.s.Launch(o, tk)
	e.s.Ack(e.s.Update(tk.TaskID.Value, mesos.TASK_RUNNING))
	pids := scriptPIDs(t, sandboxDir(t, e.c, "app@-@"+o.AgentID.Value))
	e.s.MustCall(calls.Kill(tk.TaskID.Value, o.AgentID.Value))
	ev, ok := e.s.AwaitFor(grace+time.Second, mesostest.UpdateOf(tk.TaskID.Value, mesos.TASK_KILLED))
	if !ok {
		t.Fatalf("no TASK_KILLED within the grace period + 1 s")
	}
	e.s.Ack(ev.Update.Status)
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("process %d survived the kill", pid)
		}
	}
}

// scriptPIDs waits for a script to write its shell's and its child's pids (shell.pid,
// child.pid) in its sandbox dir, and returns them.
func scriptPIDs(t *testing.T, dir string) []int {
	t.Helper()
	var pids []int
	await.True(t, mesostest.Wait, "script and child started", func() bool {
		pids = pids[:0]
		for _, f := range []string{"child.pid", "shell.pid"} {
			b, _ := os.ReadFile(filepath.Join(dir, f))
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				pids = append(pids, pid)
			}
		}
		return len(pids) == 2
	})
	return pids
}

// A DAEMON job runs every second; with sampling N it reports BEGIN/COMPLETE for every N-th run.
func TestDaemonHeartbeatsAreSampled(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		sampling         int
		minRuns, maxRuns int // runs done when the second COMPLETE arrives
	}{{sampling: 0, minRuns: 2, maxRuns: 3}, {sampling: 2, minRuns: 4, maxRuns: 5}} {
		t.Run(fmt.Sprintf("sampling %d", tc.sampling), func(t *testing.T) {
			e := newEnv(t)
			o := e.offer()
			j := scriptJob("daemon", `echo run >> runs.txt; true`)
			j.JobExecutionType, j.Cron = config.Daemon, "*/1 * * * * ?"
			execID := "app@-@" + o.AgentID.Value
			tk := shard(o, executorInfo(stockExecutor, execID, tc.sampling), j, 0, "")
			e.s.Launch(o, tk)
			first := e.s.Update(tk.TaskID.Value)
			if *first.State != mesos.TASK_RUNNING || first.GetMessage() != "" {
				t.Fatalf("first update %v; want a plain RUNNING", first.String())
			}
			e.s.Ack(first)
			for pair := 0; pair < 2; pair++ {
				for _, want := range []string{"BEGIN", "COMPLETE"} {
					st := e.s.Update(tk.TaskID.Value)
					e.s.Ack(st)
					if *st.State != mesos.TASK_RUNNING || st.GetMessage() != want {
						t.Fatalf("update %v; want RUNNING %s", st.String(), want)
					}
					if d := statusData(t, st); d.Execution == nil || (want == "COMPLETE") != (d.Execution.CompleteTime != nil) {
						t.Fatalf("%s carries execution %+v", want, d.Execution)
					}
				}
			}
			runs := strings.Count(readFile(t, filepath.Join(sandboxDir(t, e.c, execID), "runs.txt")), "run")
			if runs < tc.minRuns || runs > tc.maxRuns {
				t.Fatalf("%d runs when the second sampled run completed; want %d-%d", runs, tc.minRuns, tc.maxRuns)
			}
			e.s.MustCall(calls.Kill(tk.TaskID.Value, o.AgentID.Value))
			if st := e.s.Terminal(tk.TaskID.Value); *st.State != mesos.TASK_KILLED {
				t.Fatalf("daemon after KILL: %v", st.String())
			}
		})
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// An update the agent never took (it was down) travels in the next SUBSCRIBE; after the
// restart every update reaches the scheduler exactly once.
func TestAgentRestartCarriesUnacknowledgedUpdates(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *mesoslocal.Options) {
		o.AgentPingTimeout = time.Hour
		o.ExecutorReregistrationTimeout = 5 * time.Second
	})
	o := e.offer()
	release := filepath.Join(t.TempDir(), "release")
	j := scriptJob("survivor", `while [ ! -e "$EJCLOUD_JOB_PARAMETER" ]; do sleep 0.05; done; true`)
	j.JobParameter = release
	execID := "app@-@" + o.AgentID.Value
	tk := shard(o, executorInfo(stockExecutor, execID, 0), j, 0, "")
	e.s.Launch(o, tk)
	e.s.Ack(e.s.Update(tk.TaskID.Value, mesos.TASK_RUNNING))
	if err := e.c.KillAgent(o.AgentID.Value); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(release, nil, 0o644) // the shard ends while the agent is down
	stderr := filepath.Join(sandboxDir(t, e.c, execID), "stderr")
	await.True(t, mesostest.Wait, "executor failed to deliver FINISHED", func() bool {
		return strings.Contains(readFile(t, stderr), "state=TASK_FINISHED")
	})
	if err := e.c.RestartAgent(o.AgentID.Value); err != nil {
		t.Fatal(err)
	}
	fin := e.s.Update(tk.TaskID.Value)
	if *fin.State != mesos.TASK_FINISHED {
		t.Fatalf("after the restart: %v; want FINISHED", fin.String())
	}
	e.s.Ack(fin)
	if !strings.Contains(readFile(t, stderr), "subscribing with unacknowledged updates") {
		t.Fatal("the executor did not re-subscribe with its unacknowledged update")
	}
	e.s.None("a second delivery of any update", 1500*time.Millisecond, mesostest.UpdateOf(tk.TaskID.Value))
}

// running launches a SCRIPT job's shard 0 on the first offer's agent and waits until it runs:
// the offer, the executor's id and the task.
func (e *env) running(name, cmd string) (mesos.Offer, string, mesos.TaskInfo) {
	o := e.offer()
	execID := "app@-@" + o.AgentID.Value
	tk := shard(o, executorInfo(stockExecutor, execID, 0), scriptJob(name, cmd), 0, "")
	e.s.Launch(o, tk)
	e.s.Ack(e.s.Update(tk.TaskID.Value, mesos.TASK_RUNNING))
	return o, execID, tk
}

func TestStopMessageKillsTasksAndEndsTheExecutor(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o, execID, tk := e.running("long", "sleep 1000; true")
	e.s.MustCall(calls.Message(o.AgentID.Value, execID, []byte("STOP")))
	if st := e.s.Terminal(tk.TaskID.Value); *st.State != mesos.TASK_KILLED {
		t.Fatalf("%v; want KILLED", st.String())
	}
	f := e.s.Await("FAILURE of the stopped executor", mesostest.IsType(scheduler.Event_FAILURE)).Failure
	if f.GetExecutorID().GetValue() != execID || f.GetStatus() != 0 {
		t.Fatalf("FAILURE %v; want the executor's clean exit (status 0)", f.String())
	}
}

func TestSDKJobsRunInTheExampleExecutor(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o := e.offer()
	execID := "sdk@-@" + o.AgentID.Value
	exec := executorInfo(sdkExecutor, execID, 0)
	simple := scriptJob("hello", "")
	simple.JobType, simple.JobClass, simple.JobParameter, simple.ScriptCommandLine = config.Simple, "example.hello", "greetings", ""
	stream := scriptJob("flow", "")
	stream.JobType, stream.JobClass, stream.JobParameter, stream.StreamingProcess, stream.ScriptCommandLine = config.Dataflow, "example.countdown", "7", true, ""
	once := stream
	once.JobName, once.StreamingProcess = "flow-once", false
	tasks := []mesos.TaskInfo{shard(o, exec, simple, 1, ""), shard(o, exec, simple, 0, "fail"), shard(o, exec, stream, 0, ""), shard(o, exec, once, 1, "")}
	e.s.Launch(o, tasks...)
	want := []mesos.TaskState{mesos.TASK_FINISHED, mesos.TASK_FAILED, mesos.TASK_FINISHED, mesos.TASK_FINISHED}
	for i, tk := range tasks {
		if st := e.s.Terminal(tk.TaskID.Value); *st.State != want[i] || (want[i] == mesos.TASK_FAILED) != statusData(t, st).JobFailed {
			t.Fatalf("task %d: %v; want %v", i, st.String(), want[i])
		}
	}
	dir := sandboxDir(t, e.c, execID)
	if got := readFile(t, filepath.Join(dir, "hello-1.txt")); got != "hello from shard 1 of 2 (greetings)\n" {
		t.Fatalf("SIMPLE job wrote %q", got)
	}
	if got := strings.Fields(readFile(t, filepath.Join(dir, "countdown-0.txt"))); strings.Join(got, ",") != "7,6,5,4,3,2,1" {
		t.Fatalf("streaming DATAFLOW processed %v; want 7 down to 1", got)
	}
	if got := strings.Fields(readFile(t, filepath.Join(dir, "countdown-1.txt"))); strings.Join(got, ",") != "7,6,5" {
		t.Fatalf("non-streaming DATAFLOW processed %v; want one batch", got)
	}
}

// alive reports whether a process exists and is not a zombie waiting to be reaped.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// The state follows the parenthesised command name: "pid (comm) S ...".
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func TestShutdownKillsTasksAndEndsTheExecutorCleanly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *mesoslocal.Options) { o.ExecutorShutdownGracePeriod = 5 * time.Second })
	o, execID, tk := e.running("long", "sleep 1000; true")
	e.s.MustCall(calls.Shutdown(execID, o.AgentID.Value))
	if st := e.s.Terminal(tk.TaskID.Value); *st.State != mesos.TASK_KILLED || *st.Source != mesos.SOURCE_EXECUTOR {
		t.Fatalf("%v; want KILLED from the executor, within the agent's grace period", st.String())
	}
	if f := e.s.Await("FAILURE", mesostest.IsType(scheduler.Event_FAILURE)).Failure; f.GetStatus() != 0 {
		t.Fatalf("FAILURE %v; want a clean exit (status 0), not the agent's SIGKILL", f.String())
	}
}

// A task whose kill policy outlasts the agent's shutdown grace is SIGKILLed by the executor
// in time to report it: its end is the executor's TASK_KILLED, not the agent's, and the
// executor exits before the agent kills it.
func TestShutdownCutsAKillGraceLongerThanTheAgents(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(o *mesoslocal.Options) { o.ExecutorShutdownGracePeriod = 4 * time.Second })
	o := e.offer()
	execID := "app@-@" + o.AgentID.Value
	tk := shard(o, executorInfo(stockExecutor, execID, 0), scriptJob("stubborn", `trap '' TERM; sleep 1000 & echo $! > child.pid; echo $$ > shell.pid; wait; wait`), 0, "")
	tk.KillPolicy = &mesos.KillPolicy{GracePeriod: &mesos.DurationInfo{Nanoseconds: int64(time.Minute)}}
	e.s.Launch(o, tk)
	e.s.Ack(e.s.Update(tk.TaskID.Value, mesos.TASK_RUNNING))
	pids := scriptPIDs(t, sandboxDir(t, e.c, execID))
	e.s.MustCall(calls.Shutdown(execID, o.AgentID.Value))
	if st := e.s.Terminal(tk.TaskID.Value); *st.State != mesos.TASK_KILLED || *st.Source != mesos.SOURCE_EXECUTOR {
		t.Fatalf("%v; want KILLED from the executor, within the agent's grace period", st.String())
	}
	if f := e.s.Await("FAILURE", mesostest.IsType(scheduler.Event_FAILURE)).Failure; f.GetStatus() != 0 {
		t.Fatalf("FAILURE %v; want a clean exit (status 0), not the agent's SIGKILL", f.String())
	}
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("process %d survived the shutdown", pid)
		}
	}
}

// A scheduler with --task-lease renews its lease on the executor's tasks with MESSAGE LEASE.
// While renewals come, a long script runs on; once the agent is cut off from the master they
// stop coming, and within the lease the script and its children are dead, before the
// scheduler could relaunch the shard; the agent delivers TASK_FAILED "fenced" once it is back.
func TestALapsedLeaseFencesTheTasks(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o, execID, tk := e.running("leased", `sleep 1000 & echo $! > child.pid; echo $$ > shell.pid; wait; true`)
	pids := scriptPIDs(t, sandboxDir(t, e.c, execID))
	const lease = time.Second
	renew := func() { e.s.MustCall(calls.Message(o.AgentID.Value, execID, []byte("LEASE "+lease.String()))) }
	for range 12 { // three leases' worth of renewals: the task must live through them
		renew()
		if ev, ok := e.s.AwaitFor(lease/4, mesostest.UpdateOf(tk.TaskID.Value)); ok {
			t.Fatalf("%v while the lease was being renewed", ev.Update.Status.String())
		}
	}
	if err := e.c.PartitionAgent(o.AgentID.Value); err != nil {
		t.Fatal(err)
	}
	partitioned := time.Now()
	renew() // dropped, as the master drops messages to an agent it cannot reach
	await.True(t, lease+mesostest.Wait, "the script and its child killed while the agent is cut off", func() bool {
		for _, pid := range pids {
			if alive(pid) {
				return false
			}
		}
		return true
	})
	if d := time.Since(partitioned); d < lease/2 {
		t.Fatalf("fenced %v after the partition began: a renewal was not honoured", d)
	}
	if err := e.c.HealAgent(o.AgentID.Value); err != nil {
		t.Fatal(err)
	}
	failed := mesostest.UpdateOf(tk.TaskID.Value, mesos.TASK_FAILED)
	st := e.s.Await("the executor's TASK_FAILED", func(ev scheduler.Event) bool {
		return failed(ev) && ev.Update.Status.GetSource() == mesos.SOURCE_EXECUTOR
	}).Update.Status
	if !strings.HasPrefix(st.GetMessage(), "fenced: ") || statusData(t, st).JobFailed {
		t.Fatalf("%v data %s; want FAILED \"fenced: …\" without the job-failure marker (to be failed over)", st.String(), st.Data)
	}
}

// "LEASE 0s" ends fencing: a task outlives many of the old leases without a renewal.
func TestLeaseZeroEndsFencing(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o, execID, tk := e.running("unleased", "sleep 2; true")
	e.s.MustCall(calls.Message(o.AgentID.Value, execID, []byte("LEASE 300ms")))
	e.s.MustCall(calls.Message(o.AgentID.Value, execID, []byte("LEASE 0s")))
	if st := e.s.Terminal(tk.TaskID.Value); *st.State != mesos.TASK_FINISHED {
		t.Fatalf("%v; want FINISHED: the lease was ended before it lapsed", st.String())
	}
}

// A run's end record lives only until the agent has the task's final update (the agent's
// ACKNOWLEDGED): from then on the agent answers for the update, and a sandbox does not fill
// with one file per run.
func TestARunsEndRecordIsRemovedOnceTheAgentHasItsFinalUpdate(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o := e.offer()
	execID := "app@-@" + o.AgentID.Value
	exec := executorInfo(stockExecutor, execID, 0)
	ok, bad := shard(o, exec, scriptJob("ends", "true"), 0, ""), shard(o, exec, scriptJob("ends", "exit 3"), 1, "")
	e.s.Launch(o, ok, bad)
	for _, tk := range []mesos.TaskInfo{ok, bad} {
		e.s.Terminal(tk.TaskID.Value)
	}
	dir := filepath.Join(sandboxDir(t, e.c, execID), taskend.Dir)
	await.True(t, 10*time.Second, "no record left", func() bool {
		m, err := filepath.Glob(filepath.Join(dir, "*"))
		return err == nil && len(m) == 0
	})
	if _, err := os.Stat(dir); err != nil {
		t.Fatalf("the records' folder: %v", err)
	}
}

// The record is the supervisor's, not the executor's: a script that ends while its executor
// cannot act (frozen, then SIGKILLed) leaves it, and the agent reports the executor's death.
func TestARunsEndIsRecordedWhenItsExecutorCannotReportIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	o := e.offer()
	execID := "app@-@" + o.AgentID.Value
	tk := shard(o, executorInfo(stockExecutor, execID, 0),
		scriptJob("frozen", `exe=$(cut -d' ' -f4 /proc/$PPID/stat); echo $exe > exe.tmp; mv exe.tmp exe.pid; kill -STOP $exe; true`), 0, "")
	e.s.Launch(o, tk)
	e.s.Ack(e.s.Update(tk.TaskID.Value, mesos.TASK_RUNNING))
	dir := sandboxDir(t, e.c, execID)
	path := taskend.Path(dir, tk.TaskID.Value)
	await.True(t, 10*time.Second, "the end recorded", func() bool {
		_, err := os.Stat(path)
		return err == nil
	})
	b, _ := os.ReadFile(filepath.Join(dir, "exe.pid"))
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("the executor's pid: %q", b)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	st := e.s.Terminal(tk.TaskID.Value)
	if st.GetState() != mesos.TASK_FAILED || st.GetReason() != mesos.REASON_EXECUTOR_TERMINATED {
		t.Fatalf("%v; want the agent's TASK_FAILED for the executor's death", st.String())
	}
	if b, err := os.ReadFile(path); err != nil || strings.TrimSpace(string(b)) != "exited 0" {
		t.Fatalf("end record after the executor's death: %q, %v; want exited 0", b, err)
	}
}
