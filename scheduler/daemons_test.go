package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/taskid"
)

// At subscribe, a DAEMON job with nothing running is queued to run, unless its shards wait
// for a relaunch: the relaunch runs them, and a ready entry beside it would only stay queued.
func TestADaemonIsQueuedAtSubscribeOnlyWhenNothingOfItRunsOrWaits(t *testing.T) {
	for _, tc := range []struct {
		name      string
		failedOne bool // shard 0 waits in the failover queue
		wantReady int
	}{
		{"nothing runs or waits", false, 1},
		{"a shard waits for its relaunch", true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			base, jobs := burstJobs(t, ctx, 1, 2, func(j *config.Job) {
				j.JobExecutionType, j.Cron = config.Daemon, "0 0 0 1 1 ? 2099"
			})
			if tc.failedOne {
				if _, err := base.AddFailover(ctx, taskid.New(taskid.Meta{JobName: jobs[0], Item: 0}, taskid.Ready, "S0")); err != nil {
					t.Fatal(err)
				}
			}
			ld := testLeader(benchModel(t, ctx, base), &ackRecorder{})
			ld.ensureDaemons(ctx)
			if r, err := base.ReadyOf(ctx, jobs[0]); err != nil || r.Count != tc.wantReady {
				t.Fatalf("ready %+v (%v); want a count of %d", r, err, tc.wantReady)
			}
		})
	}
}
