package scheduler

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"
)

// metrics are the instance's counters, exposed at GET /metrics in the Prometheus text format
// (SPEC §9). Every instance serves its own.
type metrics struct {
	mu            sync.Mutex // guards the maps and counters below
	launched      int
	declined      int
	updates       map[string]int // by task state
	unplaced      map[string]int // by reason
	leaderChanges int
	staleTasks    int            // running tasks silent for longer than --stale-task-threshold
	backoffs      int            // failover relaunches backed off
	stops         map[string]int // jobs stopped, by failure
}

func newMetrics() *metrics {
	return &metrics{updates: map[string]int{}, unplaced: map[string]int{}, stops: map[string]int{}}
}

func (m *metrics) add(f func(*metrics)) {
	m.mu.Lock()
	f(m)
	m.mu.Unlock()
}

func (s *instance) metricsHandler(w http.ResponseWriter, r *http.Request) {
	var b strings.Builder
	metric := func(name, kind, help string, samples map[string]float64) {
		fmt.Fprintf(&b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, kind)
		keys := make([]string, 0, len(samples))
		for k := range samples {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(&b, "%s%s %g\n", name, k, samples[k])
		}
	}
	leader, subscribed := s.status()
	m := s.metrics
	m.mu.Lock()
	updates := map[string]float64{}
	for st, n := range m.updates {
		updates[`{state="`+st+`"}`] = float64(n)
	}
	unplaced := map[string]float64{}
	for reason, n := range m.unplaced {
		unplaced[`{reason="`+reason+`"}`] = float64(n)
	}
	stops := map[string]float64{}
	for reason, n := range m.stops {
		stops[`{failure="`+labelValue(reason)+`"}`] = float64(n)
	}
	launched, declined, changes, backoffs, stale := m.launched, m.declined, m.leaderChanges, m.backoffs, m.staleTasks
	m.mu.Unlock()
	metric("ejcloud_leader", "gauge", "1 while this instance leads", map[string]float64{"": b2f(leader)})
	metric("ejcloud_mesos_subscribed", "gauge", "1 while the leader is subscribed to Mesos", map[string]float64{"": b2f(subscribed)})
	metric("ejcloud_leader_changes_total", "counter", "times this instance became leader", map[string]float64{"": float64(changes)})
	metric("ejcloud_tasks_launched_total", "counter", "tasks launched", map[string]float64{"": float64(launched)})
	metric("ejcloud_offers_declined_total", "counter", "offers declined", map[string]float64{"": float64(declined)})
	metric("ejcloud_status_updates_total", "counter", "status updates recorded, by state", updates)
	metric("ejcloud_unplaced_shards_total", "counter", "shards a cycle could not place, by reason", unplaced)
	metric("ejcloud_tasks_stale", "gauge", "running tasks whose agent has said nothing of them for longer than --stale-task-threshold",
		map[string]float64{"": float64(stale)})
	metric("ejcloud_failover_backoffs_total", "counter", "failover relaunches put off by the backoff", map[string]float64{"": float64(backoffs)})
	metric("ejcloud_jobs_stopped_total", "counter", "jobs this instance stopped for a failure that relaunching cannot heal, by failure", stops)
	s.mu.Lock()
	ld := s.ld
	s.mu.Unlock()
	if ld != nil {
		waiting := ld.relaunch.waiting("", time.Now())
		delay := map[string]float64{}
		for _, b := range waiting {
			k := `{job="` + labelValue(b.JobName) + `"}`
			delay[k] = max(delay[k], b.DelaySeconds)
		}
		metric("ejcloud_failover_backoff_shards", "gauge", "shards whose failover relaunch waits for its backoff", map[string]float64{"": float64(len(waiting))})
		metric("ejcloud_failover_backoff_seconds", "gauge", "longest current backoff of a job's waiting shards", delay)
	}
	metric("ejcloud_zk_round_trips_total", "counter", "ZooKeeper requests made", map[string]float64{"": float64(s.store.RoundTrips())})
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	// The queues are the leader's: read from its model, without a ZooKeeper request.
	if ld != nil {
		if ready, running, failover, err := ld.store.Depths(ctx); err == nil {
			metric("ejcloud_queue_depth", "gauge", "entries of the ready (pending runs), running and failover queues",
				map[string]float64{`{queue="ready"}`: float64(ready), `{queue="running"}`: float64(running), `{queue="failover"}`: float64(failover)})
		}
		if stopped, err := ld.store.StoppedJobs(ctx); err == nil {
			metric("ejcloud_jobs_stopped", "gauge", "jobs stopped for a failure that relaunching cannot heal, until an operator acts on them", map[string]float64{"": float64(len(stopped))})
		}
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprint(w, b.String())
}

func b2f(v bool) float64 {
	if v {
		return 1
	}
	return 0
}

// labelValue escapes a Prometheus label value.
func labelValue(v string) string {
	return strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(v)
}
