package scheduler

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/api"
	"github.com/ejcloud/ejcloud/state"
)

// A trigger that cannot queue its run is refused and queues nothing: a disabled job or app
// (409: a fire of a disabled job does nothing, and the run would otherwise start the moment
// the job is enabled), and a full ready queue (503, SPEC §4).
func TestATriggerThatCannotQueueIsRefused(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		prepare func(ctx context.Context, base *state.Store, jobs []string) error
		want    error
	}{
		{"job disabled", func(ctx context.Context, base *state.Store, jobs []string) error {
			return base.DisableJob(ctx, jobs[1])
		}, api.ErrConflictingState},
		{"app disabled", func(ctx context.Context, base *state.Store, _ []string) error {
			return base.DisableApp(ctx, "app")
		}, api.ErrConflictingState},
		{"ready queue full", func(ctx context.Context, base *state.Store, jobs []string) error {
			return base.AddReady(ctx, jobs[0], true) // the queue holds one entry
		}, state.ErrQueueFull},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			base, jobs := burstJobsLimited(t, ctx, 1, 2, 1)
			if err := tc.prepare(ctx, base, jobs); err != nil {
				t.Fatal(err)
			}
			ld := testLeader(benchModel(t, ctx, base), &ackRecorder{})
			ld.inst.ld = ld
			err := ld.inst.Trigger(ctx, jobs[1])
			if !errors.Is(err, tc.want) {
				t.Fatalf("trigger: %v; want %v", err, tc.want)
			}
			if r, err := base.ReadyOf(ctx, jobs[1]); err != nil || r.Count != 0 {
				t.Errorf("ready entry %+v (%v); want none", r, err)
			}
			if l, _, err := base.FireLedger(ctx, jobs[1]); err != nil || len(l.Fires) != 0 {
				t.Errorf("ledger entries %+v (%v); want none", l.Fires, err)
			}
		})
	}
}
