package scheduler

import (
	"context"
	"errors"
	"sync"

	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
	"github.com/sirupsen/logrus"
)

// ackWorkers is how many ACKNOWLEDGE calls an acknowledger has in flight at once.
const ackWorkers = 4

// acknowledger sends a subscription's ACKNOWLEDGE calls off the event loop. Sent from the loop,
// each update would hold it for a round trip to the master: at most 1/RTT updates a second,
// and a busy master (or one across a network) makes the loop read its stream ever later.
// An acknowledgement is sent only once its update is recorded (the loop hands it over after
// the multi), and their order does not matter: an agent sends a task's next update only once
// the one before is acknowledged, so a task has at most one in flight. Those not sent when the
// subscription ends are dropped: Mesos sends their updates again, and they are recorded once.
// The lease's MESSAGEs (lease.go) go the same way: best effort, and the next renewal follows.
type acknowledger struct {
	calls chan *scheduler.Call
	wg    sync.WaitGroup
}

// startAcknowledger runs ackWorkers senders on sub until ctx ends.
func startAcknowledger(ctx context.Context, sub *subscription, log logrus.FieldLogger) *acknowledger {
	a := &acknowledger{calls: make(chan *scheduler.Call, 1024)}
	for range ackWorkers {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			for {
				select {
				case c := <-a.calls:
					// Those of an ended stream are given up quietly: the next subscription's
					// reconciliation and Mesos's resends make up for them.
					if err := sub.call(ctx, c); err != nil && ctx.Err() == nil && !errors.Is(err, errStreamEnded) {
						log.WithError(err).WithField("call", c.Type.String()).Warn("Mesos call failed")
					}
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	return a
}

// send hands c to the senders; it waits only while 1024 are queued, or until ctx ends.
func (a *acknowledger) send(ctx context.Context, c *scheduler.Call) {
	select {
	case a.calls <- c:
	case <-ctx.Done():
	}
}

// wait returns once every sender has stopped (after the context given to startAcknowledger
// ended).
func (a *acknowledger) wait() { a.wg.Wait() }
