package mesoslocal_test

import (
	"bytes"
	"errors"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/ejcloud/ejcloud/integration/mesoslocal"
	"github.com/ejcloud/ejcloud/integration/mesostest"
	"github.com/ejcloud/ejcloud/internal/await"
)

// A scheduler cut off from the master (Cluster.PartitionFramework): its stream silent, its
// calls unanswered, the master none the wiser until the scheduler closes the stream.

func anyEvent(scheduler.Event) bool { return true }

// drain takes every event the framework has been sent so far. Only on a manual clock: nothing
// new is sent while it stands still, so a pause in the stream is its end.
func drain(s *sched) {
	for {
		if _, ok := s.AwaitFor(100*time.Millisecond, anyEvent); !ok {
			return
		}
	}
}

// timedOut says err is a client giving up on a request that got no answer.
func timedOut(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// callWith posts a JSON call with client and returns the status code, or the client's error.
func callWith(client *http.Client, url, streamID string, call *scheduler.Call, t *testing.T) (int, error) {
	req, _ := http.NewRequest(http.MethodPost, url+"/api/v1/scheduler", bytes.NewReader(jsonCall(t, call)))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	if streamID != "" {
		req.Header.Set("Mesos-Stream-Id", streamID)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

// debugLoggedCluster is a cluster whose debug log a test can wait on.
func debugLoggedCluster(t *testing.T) (*mesoslocal.Cluster, *logtest.Hook) {
	l := mesostest.QuietLogger()
	l.SetLevel(logrus.DebugLevel)
	hook := logtest.NewLocal(l)
	return newCluster(t, func(o *mesoslocal.Options) { o.Logger = l }), hook
}

// awaitGivenUp waits until the master has let go of n calls their clients gave up while held
// by a partition. Before a heal: a SUBSCRIBE it still held would go through then, as one that
// arrives late does, and replace the stream.
func awaitGivenUp(t *testing.T, hook *logtest.Hook, n int) {
	t.Helper()
	await.True(t, wait, "the master lets go of the calls given up", func() bool {
		gone := 0
		for _, e := range hook.AllEntries() {
			if e.Message == "call of a framework cut off from the master given up by its client" {
				gone++
			}
		}
		return gone == n
	})
}

// impatient gives up on a request after half a second: ample for the master, which answers
// every call of a connected framework at once.
var impatient = &http.Client{Timeout: 500 * time.Millisecond}

// While the partition lasts, the framework's stream carries nothing, heartbeats included, and
// stays open; the master, which knows of no partition, keeps the framework connected and goes
// on sending. Healed before the scheduler gave up on the stream, the stream delivers what was
// held, in order.
func TestAPartitionedFrameworksStreamIsSilentUntilTheHeal(t *testing.T) {
	t.Parallel()
	c, clock := failoverCluster(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	drain(s)
	if err := c.PartitionFramework(s.FrameworkID); err != nil {
		t.Fatal(err)
	}
	clock.Advance(3 * time.Second) // three heartbeat intervals and allocations
	s.None("event while the framework is cut off from the master", 500*time.Millisecond, anyEvent)
	select {
	case <-s.Closed():
		t.Fatal("the partition closed the stream")
	default:
	}
	if frameworkField(t, c, s.FrameworkID, "connected") != true {
		t.Fatal("the master saw the partition; it can only see a close")
	}
	if err := c.HealFramework(s.FrameworkID); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		s.Await("held HEARTBEAT "+itoa(i+1)+" after the heal", isType(scheduler.Event_HEARTBEAT))
	}
}

// A call of a framework cut off from the master gets no answer while the partition lasts, a
// re-SUBSCRIBE with its id neither; one still waiting at the heal goes through then, and new
// calls are answered as usual.
func TestCallsOfAPartitionedFrameworkAreBlackHoled(t *testing.T) {
	t.Parallel()
	c, hook := debugLoggedCluster(t)
	resp, frames := rawSubscribe(t, c, paInfo())
	sid := resp.Header.Get("Mesos-Stream-Id")
	fwID := readEvent(t, frames, "application/json").Subscribed.FrameworkID.Value
	revive := calls.Revive().With(calls.Framework(fwID))
	if err := c.PartitionFramework(fwID); err != nil {
		t.Fatal(err)
	}
	held := make(chan int, 1)
	go func() {
		code, err := callWith(&http.Client{Timeout: wait}, c.URL(), sid, revive, t)
		if err != nil {
			code = -1
		}
		held <- code
	}()
	if code, err := callWith(impatient, c.URL(), sid, revive, t); !timedOut(err) {
		t.Fatalf("REVIVE while cut off: %d %v; want no answer", code, err)
	}
	sub := calls.Subscribe(withID(paInfo(), fwID)).With(calls.SubscribeTo(fwID))
	if code, err := callWith(impatient, c.URL(), "", sub, t); !timedOut(err) {
		t.Fatalf("SUBSCRIBE with the id while cut off: %d %v; want no answer", code, err)
	}
	select {
	case code := <-held:
		t.Fatalf("a call answered %d while its framework was cut off", code)
	default:
	}
	awaitGivenUp(t, hook, 2)
	if err := c.HealFramework(fwID); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-held:
		if code != http.StatusAccepted {
			t.Fatalf("the call held through the heal: %d; want 202", code)
		}
	case <-time.After(wait):
		t.Fatal("the call held through the heal got no answer")
	}
	if code, err := callWith(impatient, c.URL(), sid, revive, t); err != nil || code != http.StatusAccepted {
		t.Fatalf("REVIVE after the heal: %d %v; want 202", code, err)
	}
}

// The scheduler's watchdog closing the silent stream is what the master sees: not the
// partition, however long (the failover timeout does not start), but the close, which
// disconnects the framework as any closed subscription does (MESOS.md §2.4): offers gone, the
// failover timeout running, the tasks untouched until it runs out.
func TestClosingAPartitionedStreamDisconnectsTheFramework(t *testing.T) {
	t.Parallel()
	c, clock := failoverCluster(t)
	info := paInfo()
	info.FailoverTimeout = ptrTo(10.0)
	s := subscribe(t, c.URL(), codec, info)
	pid, st := runPID(t, s, "t1", "e1")
	s.Ack(st)
	clock.Advance(time.Second) // an allocation: the rest of the agent is offered
	s.Offers()
	drain(s)
	if err := c.PartitionFramework(s.FrameworkID); err != nil {
		t.Fatal(err)
	}
	clock.Advance(20 * time.Second) // twice the failover timeout
	s.None("event while the framework is cut off from the master", 500*time.Millisecond, anyEvent)
	if frameworkField(t, c, s.FrameworkID, "connected") != true || processGone(pid) {
		t.Fatal("the master acted on the partition itself")
	}
	if offers, _ := frameworkField(t, c, s.FrameworkID, "offers").([]any); len(offers) == 0 {
		t.Fatal("no offer outstanding before the scheduler closed the stream")
	}

	s.Close() // the scheduler's watchdog
	await.True(t, wait, "the master sees the framework disconnected", func() bool {
		return frameworkField(t, c, s.FrameworkID, "connected") == false
	})
	if offers, _ := frameworkField(t, c, s.FrameworkID, "offers").([]any); len(offers) != 0 {
		t.Fatalf("offers %v outstanding for a disconnected framework", offers)
	}
	clock.Advance(9 * time.Second)
	if processGone(pid) {
		t.Fatal("the executor was shut down before the failover timeout ran out")
	}
	clock.Advance(time.Second + 500*time.Millisecond) // the rest of it, then the shutdown grace period
	await.True(t, wait, "the executor shut down once the failover timeout ran out", func() bool { return processGone(pid) })
}

// Healed, the scheduler re-subscribes with its FrameworkID (its attempt during the partition
// got no answer) and finds its framework as it left it: the task that ran through the partition
// is still running, and the update of one that failed meanwhile, lost with the silent stream,
// comes again with its uuid.
func TestAHealedFrameworkResubscribesWithItsTasks(t *testing.T) {
	t.Parallel()
	c, hook := debugLoggedCluster(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	pid1, st := runPID(t, s, "t1", "e1")
	s.Ack(st)
	agent := st.AgentID.Value
	pid2, st := runPID(t, s, "t2", "e2")
	s.Ack(st)
	if err := c.PartitionFramework(s.FrameworkID); err != nil {
		t.Fatal(err)
	}
	syscall.Kill(pid2, syscall.SIGKILL)
	await.True(t, wait, "the master has t2 failed, its update sent into the silent stream", func() bool {
		tasks, _ := frameworkField(t, c, s.FrameworkID, "tasks").([]any)
		for _, tk := range tasks {
			if m := tk.(map[string]any); m["id"] == "t2" {
				return m["state"] == "TASK_FAILED"
			}
		}
		return false
	})
	s.Close() // the scheduler's watchdog
	await.True(t, wait, "the master sees the framework disconnected", func() bool {
		return frameworkField(t, c, s.FrameworkID, "connected") == false
	})
	sub := calls.Subscribe(withID(paInfo(), s.FrameworkID)).With(calls.SubscribeTo(s.FrameworkID))
	if code, err := callWith(impatient, c.URL(), "", sub, t); !timedOut(err) {
		t.Fatalf("SUBSCRIBE with the id while cut off: %d %v; want no answer", code, err)
	}
	awaitGivenUp(t, hook, 1)

	if err := c.HealFramework(s.FrameworkID); err != nil {
		t.Fatal(err)
	}
	again, _ := resubscribe(t, c, s, paInfo())
	failed := again.Update("t2")
	if *failed.State != mesos.TASK_FAILED || len(failed.UUID) != 16 {
		t.Fatalf("t2 after re-subscribing: %v; want its TASK_FAILED again, with its uuid", failed.String())
	}
	again.Ack(failed)
	reconcile(again, "t1", agent)
	if got := again.Update("t1"); *got.State != mesos.TASK_RUNNING {
		t.Fatalf("t1 after re-subscribing: %v; want TASK_RUNNING", got.String())
	}
	if processGone(pid1) {
		t.Fatal("the partition cost t1 its executor")
	}
}

// POST /local/frameworks/{id}/{partition|heal}, with the answers of the agents' fault routes.
func TestFrameworkFaultEndpoints(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	id := s.FrameworkID
	wantPosts(t, c, []postCase{
		{"/local/frameworks/" + id + "/partition", 204},
		{"/local/frameworks/" + id + "/partition", 409}, // already partitioned
		{"/local/frameworks/" + id + "/heal", 204},
		{"/local/frameworks/" + id + "/heal", 204}, // not partitioned: nothing to do
		{"/local/frameworks/" + id + "/explode", 404},
		{"/local/frameworks/nope-0000/partition", 409},
		{"/local/frameworks/nope-0000/heal", 409},
	})
	s.MustCall(calls.Revive()) // healed: answered
}
