package scheduler

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/scheduler/binpack"
)

// scrape GETs an instance's /metrics and parses it as Prometheus's text format: a scrape that
// does not parse fails the test.
func scrape(t *testing.T, addr string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := noRedirect.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("GET /metrics: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("GET /metrics: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("/metrics does not parse: %v", err)
	}
	return fams
}

// sample is the value of a family's series with the given label pairs (name, value, …): a
// counter's or gauge's value, a histogram's count. ok is false when there is no such series.
func sample(fams map[string]*dto.MetricFamily, name string, labels ...string) (v float64, ok bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if have[labels[i]] != labels[i+1] {
				continue next
			}
		}
		switch {
		case m.Counter != nil:
			return m.Counter.GetValue(), true
		case m.Gauge != nil:
			return m.Gauge.GetValue(), true
		case m.Histogram != nil:
			return float64(m.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

func value(fams map[string]*dto.MetricFamily, name string, labels ...string) float64 {
	v, _ := sample(fams, name, labels...)
	return v
}

// A known workload, and the value of every metric family after it: a cron fire (2 shards),
// a triggered run held running, a triggered run whose job fails, and a triggered job too big
// for the agent. The standby serves its own metrics.
func TestMetricsAfterAKnownWorkload(t *testing.T) {
	t.Parallel()
	s := newSystem(t, 1)
	addr := s.sched.cfg.HTTPAddr

	// Cron: one fire, a few seconds from now (the year field makes it the only one). The leader
	// schedules a job from the moment it sees it: under load (other test binaries on the same
	// two cores) registration and its watch took more than 4 s, and the only slot passed unseen.
	at := time.Now().UTC().Add(8 * time.Second)
	cron := s.scriptJob("cron", 2, fmt.Sprintf("%d %d %d %d %d ? %d", at.Second(), at.Minute(), at.Hour(), at.Day(), int(at.Month()), at.Year()))
	s.register(cron)
	await.True(t, 40*time.Second, "the cron run finished", func() bool {
		return value(scrape(t, addr), "ejcloud_status_updates_total", "state", "TASK_FINISHED") == 2
	})
	// The run was launched after its fire time, and not long after: one observation.
	fams := scrape(t, addr)
	if n := value(fams, "ejcloud_schedule_lag_seconds"); n != 1 {
		t.Fatalf("schedule lag observations: %v; want 1 (the cron run)", n)
	}
	if lag := fams["ejcloud_schedule_lag_seconds"].GetMetric()[0].GetHistogram().GetSampleSum(); lag <= 0 || lag > 30 {
		t.Fatalf("schedule lag %v s; want within (0, 30]", lag)
	}

	// Triggered, held running: the running queue's depth is the model's.
	s.register(s.holdJob("held", 1, ""))
	s.trigger("held")
	await.True(t, 30*time.Second, "held runs", func() bool {
		f := scrape(t, addr)
		return value(f, "ejcloud_queue_depth", "queue", "running") == 1 && value(f, "ejcloud_status_updates_total", "state", "TASK_RUNNING") == 3
	})
	s.release("held")
	// Triggered, its job fails: TASK_FAILED, and no relaunch (not an infrastructure failure).
	s.register(s.holdJob("failing", 1, "1"))
	s.release("failing")
	s.trigger("failing")
	await.True(t, 30*time.Second, "held finished and failing failed", func() bool {
		f := scrape(t, addr)
		return value(f, "ejcloud_status_updates_total", "state", "TASK_FINISHED") == 3 &&
			value(f, "ejcloud_status_updates_total", "state", "TASK_FAILED") == 1 && value(f, "ejcloud_queue_depth", "queue", "running") == 0
	})
	// Too big for the agent: it waits in the ready queue, unplaced for want of CPU.
	huge := s.scriptJob("huge", 1, "")
	huge.CPUCount = 1000
	s.register(huge)
	s.trigger("huge")
	await.True(t, 30*time.Second, "huge unplaced", func() bool {
		f := scrape(t, addr)
		return value(f, "ejcloud_queue_depth", "queue", "ready") == 1 &&
			value(f, "ejcloud_offers_declined_total", "reason", declineUnused) > 0 && sumOf(f, "ejcloud_unplaced_shards_total") > 0
	})

	fams = scrape(t, addr)
	exact := []struct {
		name   string
		labels []string
		want   float64
	}{
		{"ejcloud_leader", nil, 1},
		{"ejcloud_mesos_subscribed", nil, 1},
		{"ejcloud_leader_changes_total", nil, 1},
		{"ejcloud_tasks_launched_total", nil, 4},
		{"ejcloud_offers_accepted_total", nil, 3}, // one offer per agent in each launching cycle
		{"ejcloud_status_updates_total", []string{"state", "TASK_RUNNING"}, 4},
		{"ejcloud_status_updates_total", []string{"state", "TASK_FINISHED"}, 3},
		{"ejcloud_status_updates_total", []string{"state", "TASK_FAILED"}, 1},
		{"ejcloud_queue_depth", []string{"queue", "ready"}, 1},
		{"ejcloud_queue_depth", []string{"queue", "running"}, 0},
		{"ejcloud_queue_depth", []string{"queue", "failover"}, 0},
		{"ejcloud_schedule_lag_seconds", nil, 1}, // triggered runs have no fire time
		{"ejcloud_tasks_stale", nil, 0},
		{"ejcloud_jobs_stopped", nil, 0},
		{"ejcloud_failover_backoff_shards", nil, 0},
		{"ejcloud_failover_backoffs_total", nil, 0},
		{"ejcloud_tasks_launch_unconfirmed_total", nil, 0},
		{"ejcloud_zk_connected", nil, 1},
		{"ejcloud_zk_session_expirations_total", nil, 0},
	}
	for _, e := range exact {
		if v, ok := sample(fams, e.name, e.labels...); !ok || v != e.want {
			t.Errorf("%s%v = %v (present %v); want %v", e.name, e.labels, v, ok, e.want)
		}
	}
	if got := fams["ejcloud_status_updates_total"].GetMetric(); len(got) != 3 {
		t.Errorf("status updates by state: %v; want RUNNING, FINISHED and FAILED only", got)
	}
	if v := value(fams, "ejcloud_unplaced_shards_total", "reason", binpack.ReasonCPU); v == 0 {
		t.Errorf("no shard unplaced for want of cpu: %v", fams["ejcloud_unplaced_shards_total"].GetMetric())
	}
	if v := value(fams, "ejcloud_offers_declined_total", "reason", declineNoWork); v == 0 {
		t.Errorf("no offer declined for want of work: %v", fams["ejcloud_offers_declined_total"].GetMetric())
	}
	for _, op := range []string{"multi", "get", "children"} {
		if v := value(fams, "ejcloud_zk_request_duration_seconds", "op", op); v == 0 {
			t.Errorf("no ZooKeeper %s request timed: %v", op, fams["ejcloud_zk_request_duration_seconds"].GetMetric())
		}
	}
	if value(fams, "ejcloud_zk_round_trips_total") == 0 {
		t.Error("no ZooKeeper round trip counted")
	}
	for _, name := range []string{"go_goroutines", "go_memstats_heap_alloc_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes"} {
		if _, ok := sample(fams, name); !ok {
			t.Errorf("no %s (Go runtime and process collectors)", name)
		}
	}

	// A standby serves its own: not leading, never led, no leader's queues.
	cfg := testConfig(t, s.env)
	cfg.MesosURL = s.mesos.URL()
	standby := start(t, cfg)
	await.True(t, 10*time.Second, "the standby serves", func() bool {
		resp, _ := get(t, standby.cfg.HTTPAddr, "/healthz")
		return resp != nil && resp.StatusCode == 200
	})
	fams = scrape(t, standby.cfg.HTTPAddr)
	for name, want := range map[string]float64{"ejcloud_leader": 0, "ejcloud_leader_changes_total": 0, "ejcloud_tasks_launched_total": 0} {
		if v, ok := sample(fams, name); !ok || v != want {
			t.Errorf("standby %s = %v (present %v); want %v", name, v, ok, want)
		}
	}
	if _, ok := fams["ejcloud_queue_depth"]; ok {
		t.Error("the standby reports queue depths; only the leader has the model")
	}
	if _, ok := sample(fams, "go_goroutines"); !ok {
		t.Error("the standby has no Go runtime metrics")
	}
}

func sumOf(fams map[string]*dto.MetricFamily, name string) float64 {
	var n float64
	for _, m := range fams[name].GetMetric() {
		n += m.GetCounter().GetValue()
	}
	return n
}
