package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// A launch's write-ahead carries the fire ledgers of its jobs, and a few hundred of them
// outgrow ZooKeeper's request limit (jute.maxbuffer, 1 MB), which a bound on tasks does not
// see. Such a multi was sent, ZooKeeper closed the connection, and it was sent again at every
// cycle: nothing launched any more (the soak at 400 jobs, after a ZooKeeper restart had let
// every job queue a run). It goes in halves instead, and every job launches in one cycle.
// The ends of those runs rewrite the ledgers too: their group commits stay under the limit.
func TestWritesLargerThanOneZooKeeperRequestAreSplit(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const jobs = 400
	base, names := burstJobs(t, ctx, jobs, 1)
	start := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC)
	ledgers := 0
	for _, name := range names {
		var fires state.Fires
		for i := range state.LedgerKeep {
			fires.Entries = append(fires.Entries, state.FireEntry{Slot: start.Add(time.Duration(i) * time.Minute), Count: 1, Outcome: state.OutcomeFired})
		}
		fires.Cron, fires.Zone, fires.Last, fires.Accumulate = "0 * * * * ?", "UTC", fires.Entries[len(fires.Entries)-1].Slot, true
		if _, err := base.RecordFires(ctx, name, fires); err != nil {
			t.Fatal(err)
		}
		l, _, err := base.FireLedger(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(l)
		ledgers += len(b)
	}
	if ledgers <= 1<<20 {
		t.Fatalf("the jobs' ledgers hold %d bytes; the test needs more than one request takes", ledgers)
	}
	store := benchModel(t, ctx, base)
	fake := &burstMesos{wake: make(chan struct{}, 1), want: jobs}
	ld := testLeader(store, fake)

	ld.cycle(ctx, burstOffers(0))
	if n := fake.launched.Load(); n != jobs {
		t.Fatalf("one cycle launched %d tasks; want all %d", n, jobs)
	}
	if r, err := base.Running(ctx); err != nil || len(r) != jobs {
		t.Fatalf("ZooKeeper holds %d running tasks (%v); want %d", len(r), err, jobs)
	}

	var ends []mesos.TaskStatus
	for _, ts := range fake.pending {
		ends = append(ends, mesos.TaskStatus{TaskID: ts.TaskID, State: mesos.TASK_FINISHED.Enum(), AgentID: &ts.AgentID,
			Source: mesos.SOURCE_EXECUTOR.Enum(), UUID: []byte("u-" + ts.TaskID.Value)})
	}
	before := store.Multis()
	ld.updates(ctx, ends)
	if n := fake.acked.Load(); n != jobs {
		t.Fatalf("%d of %d updates acknowledged", n, jobs)
	}
	// 400 one-by-one multis would mean the groups were refused.
	if multis := store.Multis() - before; multis > 8 {
		t.Errorf("the ends of %d runs took %d multis; want a few groups", jobs, multis)
	}
	if r, err := base.Running(ctx); err != nil || len(r) != 0 {
		t.Fatalf("ZooKeeper holds %d running tasks (%v) after every run ended; want none", len(r), err)
	}
}

// SPEC §3.2 allows 10,000 shards. At ZooKeeper's default jute.maxbuffer one write holds about
// 3,500 task nodes, and a READY run launches all its shards in one (§5.4): where the servers
// are set higher, --zk-jute-maxbuffer lets the leader launch a run of 10,000 shards in one
// cycle and record their ends.
func TestARunOfTenThousandShardsWhereJuteMaxBufferIsRaised(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const jute = 4 << 20
	srv := statetest.StartDedicated(t, fmt.Sprintf("jute.maxbuffer=%d", jute))
	base, err := state.Connect(ctx, state.Config{Servers: []string{srv.Addr}, Namespace: "big", Logger: quietLog(), JuteMaxBuffer: jute})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(base.Close)
	app := config.DefaultApp()
	app.AppName, app.AppURL, app.BootstrapScript = "app", "/opt/app", "./run"
	if err := base.CreateApp(ctx, app); err != nil {
		t.Fatal(err)
	}
	j := config.Job{JobName: "big", AppName: "app", JobType: config.Script, JobExecutionType: config.Transient,
		TimeZone: "UTC", ShardingTotalCount: config.MaxShards, CPUCount: 0.01, MemoryMB: 1, ScriptCommandLine: "true",
		Placement: config.Binpack, JobShardingStrategyType: config.AvgAllocation, JobProperties: map[string]string{}}
	if err := base.CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	store := benchModel(t, ctx, base)
	if err := store.AddReady(ctx, "big", false); err != nil {
		t.Fatal(err)
	}
	fake := &burstMesos{wake: make(chan struct{}, 1), want: config.MaxShards}
	ld := testLeader(store, fake)

	ld.cycle(ctx, burstOffers(0))
	if n := fake.launched.Load(); n != config.MaxShards {
		t.Fatalf("one cycle launched %d tasks; want all %d", n, config.MaxShards)
	}
	if r, err := base.RunningOf(ctx, "big"); err != nil || len(r) != config.MaxShards {
		t.Fatalf("ZooKeeper holds %d running tasks (%v); want %d", len(r), err, config.MaxShards)
	}
	var ends []mesos.TaskStatus
	for _, ts := range fake.pending {
		ends = append(ends, mesos.TaskStatus{TaskID: ts.TaskID, State: mesos.TASK_FINISHED.Enum(), AgentID: &ts.AgentID,
			Source: mesos.SOURCE_EXECUTOR.Enum(), UUID: []byte("u-" + ts.TaskID.Value)})
	}
	ld.updates(ctx, ends)
	if n := fake.acked.Load(); n != config.MaxShards {
		t.Fatalf("%d of %d updates acknowledged", n, config.MaxShards)
	}
	if r, err := base.RunningOf(ctx, "big"); err != nil || len(r) != 0 {
		t.Fatalf("ZooKeeper holds %d running tasks (%v) after every shard ended; want none", len(r), err)
	}
}
