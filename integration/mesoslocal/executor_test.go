package mesoslocal_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/encoding/codecs"
	"github.com/mesos/mesos-go/api/v1/lib/executor"
	"github.com/mesos/mesos-go/api/v1/lib/executor/calls"
	"github.com/mesos/mesos-go/api/v1/lib/executor/config"
	"github.com/mesos/mesos-go/api/v1/lib/httpcli"
	"github.com/mesos/mesos-go/api/v1/lib/httpcli/httpexec"
)

// The test executor: this test binary run by an agent with MESOSLOCAL_TEST_EXECUTOR=mode.
// Modes (comma-separated): "basic"; "env" (write the environment to env.txt first);
// "nosubscribe" (never subscribe); "ignoreshutdown" (ignore SHUTDOWN); "protobuf".
// What it does with a task is in the task's data:
//
//	finish  RUNNING then FINISHED
//	run     RUNNING, then KILLED when killed
//	pid     RUNNING with the process id as data, then runs until killed
//	exit3   RUNNING, then the process exits with status 3 once RUNNING is acknowledged
//	hold    RUNNING, then FINISHED when a MESSAGE "finish:<task id>" arrives
//	delay   RUNNING, then FINISHED 300 ms later
//	stray   starts a child in a process group of its own that ignores SIGTERM, then RUNNING
//	        with the child's pid as data; runs until killed
//	stray-setsid  the same with the child in a session of its own
//	stray-exit3   stray, then exits with status 3 when a MESSAGE "exit3" arrives (a test
//	        must see the child alive first, which an exit at once would race)
//
// MESSAGE "ping" is answered with MESSAGE "pong". Every event type received is appended to
// events.txt in the sandbox.
func runTestExecutor(mode string) int {
	if strings.Contains(mode, "env") {
		env := os.Environ()
		sort.Strings(env)
		os.WriteFile(filepath.Join(os.Getenv("MESOS_SANDBOX"), "env.txt"), []byte(strings.Join(env, "\n")), 0o644)
	}
	if strings.Contains(mode, "nosubscribe") {
		select {}
	}
	cfg, err := config.FromEnv()
	if err != nil {
		fmt.Fprintln(os.Stderr, "config:", err)
		return 2
	}
	codec := codecs.ByMediaType[codecs.MediaTypeJSON]
	if strings.Contains(mode, "protobuf") {
		codec = codecs.ByMediaType[codecs.MediaTypeProtobuf]
	}
	u := url.URL{Scheme: "http", Host: cfg.AgentEndpoint, Path: "/api/v1/executor"}
	cli := httpcli.New(httpcli.Endpoint(u.String()), httpcli.Codec(codec), httpcli.Do(httpcli.With(httpcli.Timeout(10*time.Second))))
	opts := executor.CallOptions{calls.Framework(cfg.FrameworkID), calls.Executor(cfg.ExecutorID)}
	x := &testExec{
		cfg: cfg, mode: mode,
		sender:     calls.SenderWith(httpexec.NewSender(cli.Send), opts...),
		subscriber: calls.SenderWith(httpexec.NewSender(cli.Send, httpcli.Close(true)), opts...),
		updates:    map[string]executor.Call_Update{}, unackedTasks: map[string]mesos.TaskInfo{},
		exitOnAck: map[string]bool{},
	}
	x.events, _ = os.OpenFile(filepath.Join(cfg.Sandbox, "events.txt"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	return x.run()
}

type testExec struct {
	cfg        config.Config
	mode       string
	sender     calls.Sender
	subscriber calls.Sender
	events     *os.File

	mu           sync.Mutex                      // guards the maps and quit
	updates      map[string]executor.Call_Update // unacknowledged, by uuid
	unackedTasks map[string]mesos.TaskInfo
	exitOnAck    map[string]bool // uuids whose ACKNOWLEDGED ends the process with status 3
	quit         bool
}

func (x *testExec) run() int {
	disconnected := time.Now()
	for {
		x.mu.Lock()
		var tasks []mesos.TaskInfo
		for _, t := range x.unackedTasks {
			tasks = append(tasks, t)
		}
		var updates []executor.Call_Update
		for _, u := range x.updates {
			updates = append(updates, u)
		}
		x.mu.Unlock()
		resp, err := x.subscriber.Send(context.Background(), calls.NonStreaming(calls.Subscribe(tasks, updates)))
		if err == nil {
			x.loop(resp)
			resp.Close()
			disconnected = time.Now()
		}
		x.mu.Lock()
		quit := x.quit
		x.mu.Unlock()
		if quit || !x.cfg.Checkpoint {
			return 0
		}
		if time.Since(disconnected) > x.cfg.RecoveryTimeout {
			return 1
		}
		time.Sleep(min(200*time.Millisecond, x.cfg.SubscriptionBackoffMax))
	}
}

func (x *testExec) loop(resp mesos.Response) {
	for {
		var ev executor.Event
		if err := resp.Decode(&ev); err != nil {
			return
		}
		fmt.Fprintln(x.events, ev.Type.String())
		switch ev.Type {
		case executor.Event_LAUNCH:
			x.launch(ev.Launch.Task)
		case executor.Event_KILL:
			x.send(ev.Kill.TaskID.Value, mesos.TASK_KILLED, nil)
		case executor.Event_ACKNOWLEDGED:
			id := string(ev.Acknowledged.UUID)
			x.mu.Lock()
			delete(x.updates, id)
			delete(x.unackedTasks, ev.Acknowledged.TaskID.Value)
			exit := x.exitOnAck[id]
			x.mu.Unlock()
			if exit {
				os.Exit(3)
			}
		case executor.Event_MESSAGE:
			data := string(ev.Message.Data)
			switch {
			case data == "ping":
				x.sender.Send(context.Background(), calls.NonStreaming(calls.Message([]byte("pong"))))
			case data == "exit3":
				os.Exit(3)
			case strings.HasPrefix(data, "finish:"):
				x.send(strings.TrimPrefix(data, "finish:"), mesos.TASK_FINISHED, nil)
			}
		case executor.Event_SHUTDOWN:
			if strings.Contains(x.mode, "ignoreshutdown") {
				continue
			}
			x.mu.Lock()
			x.quit = true
			x.mu.Unlock()
			return
		}
	}
}

func (x *testExec) launch(t mesos.TaskInfo) {
	id := t.TaskID.Value
	x.mu.Lock()
	x.unackedTasks[id] = t
	x.mu.Unlock()
	switch string(t.Data) {
	case "finish":
		x.send(id, mesos.TASK_RUNNING, nil)
		x.send(id, mesos.TASK_FINISHED, nil)
	case "delay":
		x.send(id, mesos.TASK_RUNNING, nil)
		go func() {
			time.Sleep(300 * time.Millisecond)
			x.send(id, mesos.TASK_FINISHED, nil)
		}()
	case "pid":
		x.send(id, mesos.TASK_RUNNING, []byte(strconv.Itoa(os.Getpid())))
	case "stray", "stray-setsid", "stray-exit3":
		// A child left behind in a process group (or a session) of its own, ignoring SIGTERM,
		// as a job's script that its executor does not clean up.
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), strayEnv+"=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: string(t.Data) != "stray-setsid", Setsid: string(t.Data) == "stray-setsid"}
		pid := "0"
		if err := cmd.Start(); err == nil {
			pid = strconv.Itoa(cmd.Process.Pid)
		}
		x.send(id, mesos.TASK_RUNNING, []byte(pid))
	case "exit3":
		uuid := x.send(id, mesos.TASK_RUNNING, nil)
		x.mu.Lock()
		x.exitOnAck[string(uuid)] = true
		x.mu.Unlock()
	default: // run, hold
		x.send(id, mesos.TASK_RUNNING, nil)
	}
}

// send sends an update and keeps it until the agent acknowledges it.
func (x *testExec) send(taskID string, state mesos.TaskState, data []byte) []byte {
	uuid := make([]byte, 16)
	rand.Read(uuid)
	st := mesos.TaskStatus{TaskID: mesos.TaskID{Value: taskID}, State: state.Enum(), Source: mesos.SOURCE_EXECUTOR.Enum(),
		ExecutorID: &mesos.ExecutorID{Value: x.cfg.ExecutorID}, UUID: uuid, Data: data,
		Timestamp: ptrTo(float64(time.Now().UnixNano()) / 1e9)}
	u := executor.Call_Update{Status: st}
	x.mu.Lock()
	x.updates[string(uuid)] = u
	x.mu.Unlock()
	resp, err := x.sender.Send(context.Background(), calls.NonStreaming(calls.Update(st)))
	if resp != nil {
		resp.Close()
	}
	_ = err // an update the agent did not take is re-sent in the next SUBSCRIBE
	return uuid
}
