package integration

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// BenchmarkSchedulerMemory measures the resident memory of a leading ejcloud-scheduler binary
// with 0, 10,000 and 100,000 TRANSIENT jobs registered (trigger-only, so nothing runs): its
// peak while loading them (VmHWM) and its size once it has loaded them (VmRSS).
//
//	go test ./integration -run '^$' -bench SchedulerMemory -benchtime 1x
func BenchmarkSchedulerMemory(b *testing.B) {
	for _, n := range []int{0, 10_000, 100_000} {
		b.Run(fmt.Sprintf("jobs=%d", n), func(b *testing.B) {
			for b.Loop() {
				zk := statetest.StartZooKeeper(b)
				registerJobs(b, zk, n)
				m := startMesos(b, 1)
				s := startScheduler(b, zk, m)
				// Its console is being drained (start); watch what it printed.
				await.True(b, 10*time.Minute, "the scheduler loaded its jobs", func() bool { return strings.Contains(s.log.String(), "jobs loaded") })
				hwm, rss := procMemory(b, s.cmd.Process.Pid)
				b.ReportMetric(hwm/1024, "peak-MB")
				b.ReportMetric(rss/1024, "rss-MB")
			}
		})
	}
}

// registerJobs writes n jobs of one app straight into ZooKeeper, many at a time.
func registerJobs(b *testing.B, zk statetest.Env, n int) {
	b.Helper()
	ctx := context.Background()
	store, err := state.Connect(ctx, state.Config{Servers: zk.Servers, Namespace: zk.Namespace})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	app := config.DefaultApp()
	app.AppName, app.AppURL, app.BootstrapScript = "app", "/nonexistent", "./x"
	if err := store.CreateApp(ctx, app); err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for w := 0; w < 32; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 32 {
				j := config.Job{JobName: fmt.Sprintf("job%06d", i), AppName: "app", JobType: config.Script,
					JobExecutionType: config.Transient, TimeZone: "UTC", ShardingTotalCount: 10, CPUCount: 0.1, MemoryMB: 64,
					ScriptCommandLine: "echo hello", Placement: config.Spread, JobShardingStrategyType: config.AvgAllocation,
					JobProperties: map[string]string{}}
				if err := store.CreateJob(ctx, j); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

// procMemory reads VmHWM and VmRSS (kB) of a process.
func procMemory(b *testing.B, pid int) (hwm, rss float64) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
		switch k {
		case "VmHWM":
			hwm = f
		case "VmRSS":
			rss = f
		}
	}
	return hwm, rss
}
