package scheduler

import (
	"time"

	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"

	"github.com/ejcloud/ejcloud/state"
)

// testLeader is a leader on store whose Mesos calls go to caller, as if subscribed: no
// election (confirm is nil), a 1 s – 1 min relaunch backoff.
func testLeader(store *state.Store, caller calls.Caller) *leader {
	cfg := Config{FailoverBackoffMin: time.Second, FailoverBackoffMax: time.Minute}
	ld := newLeader(&instance{cfg: cfg, metrics: newMetrics()}, quietLog(), store)
	ld.sub = &subscription{caller: caller, frameworkID: "fw-test"}
	return ld
}
