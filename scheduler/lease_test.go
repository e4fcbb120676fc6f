package scheduler

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/mesos/mesos-go/api/v1/lib/scheduler"

	"github.com/ejcloud/ejcloud/taskid"
)

// The lease is renewed while the read of the running tasks is held up (the model settling a
// node in doubt waits for ZooKeeper, whatever the read's context): the executors read last go
// on getting LEASE, or a ZooKeeper member's hang would let their leases lapse, and their tasks
// be killed and run again. A failed read keeps them too.
func TestLeasesAreRenewedWhileTheReadOfTheRunningTasksIsHeldUp(t *testing.T) {
	t.Parallel()
	ld := testLeader(nil, nil)
	ld.cfg.TaskLease = 400 * time.Millisecond // a renewal every 50 ms
	ex := taskid.Executor{AppName: "app", AgentID: "S0"}
	reads := make(chan struct{}, 16)
	hold := make(chan struct{})
	read := func(ctx context.Context) ([]taskid.Executor, error) {
		reads <- struct{}{}
		switch len(reads) {
		case 1:
			return []taskid.Executor{ex}, nil
		case 2:
			return nil, errors.New("a failed read")
		}
		<-hold // the third read is held up until the test ends, whatever its context says
		return nil, errors.New("released")
	}
	ctx, cancel := context.WithCancel(context.Background())
	out := &acknowledger{calls: make(chan *scheduler.Call, 1024)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		ld.renewLeases(ctx, out, read)
	}()
	defer func() { cancel(); close(hold); <-done }()
	deadline := time.After(30 * time.Second)
	leases := 0
	for leases < 10 { // far more than the two reads that returned can account for
		select {
		case c := <-out.calls:
			if c.Type != scheduler.Call_MESSAGE || c.Message.ExecutorID.Value != ex.String() || string(c.Message.Data) != "LEASE 400ms" {
				t.Fatalf("call %v; want MESSAGE LEASE 400ms to %s", c, ex)
			}
			leases++
		case <-deadline:
			t.Fatalf("%d leases renewed in 30 s with the read held up; want 10", leases)
		}
	}
	if n := len(reads); n != 3 {
		t.Fatalf("%d reads; want 3 (one held up, not one a renewal)", n)
	}
}
