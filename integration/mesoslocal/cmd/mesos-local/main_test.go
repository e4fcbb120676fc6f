package main_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	expect "github.com/Netflix/go-expect"
	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/encoding/codecs"
	"github.com/mesos/mesos-go/api/v1/lib/httpcli"
	"github.com/mesos/mesos-go/api/v1/lib/httpcli/httpsched"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"

	"github.com/ejcloud/ejcloud/internal/await"
)

func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "mesos-local")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func TestHelpListsFlagsAndVariables(t *testing.T) {
	out, err := exec.Command(build(t), "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("--help: %v\n%s", err, out)
	}
	for _, want := range []string{"--addr", "--agents", "--agent-resources", "--work-dir", "EJCLOUD_AGENTS", "/local/agents/", "/local/frameworks/", "/local/master/failover", "--agent-reregister-timeout"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("--help does not mention %s:\n%s", want, out)
		}
	}
}

// SIGINT stops mesos-local cleanly, and every executor process it started dies with it.
func TestSigintKillsEveryExecutor(t *testing.T) {
	bin := build(t)
	work := t.TempDir()
	console, err := expect.NewConsole(expect.WithDefaultTimeout(30 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer console.Close()
	cmd := exec.Command(bin, "--addr", "127.0.0.1:0", "--agents", "2", "--work-dir", work, "--allocation-interval", "50ms")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = console.Tty(), console.Tty(), console.Tty()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := console.Expect(expect.RegexpPattern(`master http://127\.0\.0\.1:\d+ with 2 agents`))
	if err != nil {
		t.Fatalf("no ready line: %v", err)
	}
	url := regexp.MustCompile(`http://127\.0\.0\.1:\d+`).FindString(line)

	cli := httpcli.New(httpcli.Endpoint(url+"/api/v1/scheduler"), httpcli.Codec(codecs.ByMediaType[codecs.MediaTypeJSON]))
	caller := httpsched.NewCaller(cli)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	info := &mesos.FrameworkInfo{User: "test", Name: "sigint", FailoverTimeout: new(float64)}
	*info.FailoverTimeout = 3600
	resp, err := caller.Call(ctx, calls.Subscribe(info))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Close()
	var fwID string
	launched := 0
	for launched < 2 {
		var ev scheduler.Event
		if err := resp.Decode(&ev); err != nil {
			t.Fatal(err)
		}
		switch ev.Type {
		case scheduler.Event_SUBSCRIBED:
			fwID = ev.Subscribed.FrameworkID.Value
		case scheduler.Event_OFFERS:
			for _, o := range ev.Offers.Offers {
				id := "sleeper" + strconv.Itoa(launched)
				launched++
				cpus, mem := 0.1, 32.0
				tk := mesos.TaskInfo{Name: id, TaskID: mesos.TaskID{Value: id}, AgentID: o.AgentID,
					Command: &mesos.CommandInfo{Value: ptr(`echo $$ > pid; exec sleep 1000`)},
					Resources: []mesos.Resource{
						{Name: "cpus", Type: mesos.SCALAR.Enum(), Scalar: &mesos.Value_Scalar{Value: cpus}, Role: ptr("*")},
						{Name: "mem", Type: mesos.SCALAR.Enum(), Scalar: &mesos.Value_Scalar{Value: mem}, Role: ptr("*")},
					}}
				r, err := caller.Call(ctx, calls.Accept(calls.OfferOperations{calls.OpLaunch(tk)}.WithOffers(o.ID)).With(calls.Framework(fwID)))
				if err != nil {
					t.Fatal(err)
				}
				if r != nil { // a 202 has no response body
					r.Close()
				}
			}
		}
	}
	var pids []int
	await.True(t, 30*time.Second, "both sleepers started", func() bool {
		files, _ := filepath.Glob(filepath.Join(work, "slaves", "*", "frameworks", "*", "executors", "*", "runs", "latest", "pid"))
		pids = pids[:0]
		for _, f := range files {
			b, _ := os.ReadFile(f)
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
				pids = append(pids, pid)
			}
		}
		return len(pids) == 2
	})
	cmd.Process.Signal(syscall.SIGINT)
	if _, err := console.ExpectString("mesos-local: stopped"); err != nil {
		t.Fatalf("no clean stop: %v", err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("mesos-local exited with %v after SIGINT; want 0", err)
	}
	for _, pid := range pids {
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("executor process %d outlived mesos-local", pid)
		}
	}
}

func ptr[T any](v T) *T { return &v }
