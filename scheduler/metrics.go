package scheduler

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Reasons an offer is declined (ejcloud_offers_declined_total{reason}).
const (
	declineNoWork     = "no_work"           // nothing is eligible to launch
	declineUnreadable = "queues_unreadable" // the model could not be read: no guess is made
	declineUnused     = "unused"            // the cycle placed nothing on the offer's agent
	declineWriteAhead = "write_ahead_failed"
	// declineAcceptFailed: the ACCEPT of the agent's offers failed while the stream lived on (a
	// 5xx, a timeout): Mesos may not have taken it, and would keep the offers for the framework
	// until its subscription ends; it ignores the DECLINE of offers it did take.
	declineAcceptFailed = "accept_failed"
	// declineExecutorStopping: the agent runs an idle executor of ours whose ExecutorInfo is
	// unknown, told to stop (stopUnknown).
	declineExecutorStopping = "executor_stopping"
)

// metrics are the instance's Prometheus metrics (SPEC §9), on a registry of its own: tests run
// several instances in one process, and each instance, standbys too, serves its own at
// GET /metrics. The names are documented in README.md ("Metrics").
type metrics struct {
	reg *prometheus.Registry

	launched prometheus.Counter
	// launchesUnconfirmed: tasks whose ACCEPT Mesos refused, or whose answer was lost.
	launchesUnconfirmed prometheus.Counter
	offersAccepted      prometheus.Counter
	offersDeclined      *prometheus.CounterVec // by reason
	updates             *prometheus.CounterVec // by task state
	unplaced            *prometheus.CounterVec // by reason
	leaderChanges       prometheus.Counter
	backoffs            prometheus.Counter
	stops               *prometheus.CounterVec // by failure
	executorDeaths      *prometheus.CounterVec // by what the run's end record said (ends.go)
	zkLatency           *prometheus.HistogramVec
	scheduleLag         prometheus.Histogram
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		launched: prometheus.NewCounter(prometheus.CounterOpts{Name: "ejcloud_tasks_launched_total",
			Help: "tasks launched: their ACCEPT was taken by Mesos"}),
		launchesUnconfirmed: prometheus.NewCounter(prometheus.CounterOpts{Name: "ejcloud_tasks_launch_unconfirmed_total",
			Help: "tasks written ahead whose ACCEPT Mesos refused or did not answer (the stream ended): reconciliation settles them"}),
		offersAccepted: prometheus.NewCounter(prometheus.CounterOpts{Name: "ejcloud_offers_accepted_total",
			Help: "offers accepted to launch tasks"}),
		offersDeclined: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ejcloud_offers_declined_total",
			Help: "offers declined, by reason: no_work, unused (nothing placed on the agent), write_ahead_failed, queues_unreadable, accept_failed (their ACCEPT failed: declined in case Mesos did not take it), executor_stopping (an idle executor whose ExecutorInfo is unknown is told to stop there)"}, []string{"reason"}),
		updates: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ejcloud_status_updates_total",
			Help: "status updates recorded, by state: each once (not again when Mesos sends it again), a reconciliation's answer only when it ends a task, and the scheduler's own TASK_LOST for a task unreachable past --unreachable-timeout"}, []string{"state"}),
		unplaced: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ejcloud_unplaced_shards_total",
			Help: "shards a cycle could not place, by reason (a shard counts once per reason, in every cycle)"}, []string{"reason"}),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{Name: "ejcloud_leader_changes_total",
			Help: "times this instance became leader"}),
		backoffs: prometheus.NewCounter(prometheus.CounterOpts{Name: "ejcloud_failover_backoffs_total",
			Help: "failover relaunches put off by the backoff"}),
		executorDeaths: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ejcloud_executor_death_updates_total",
			Help: "tasks the agent failed for their executor's death, by what their run's end record said: finished and job_failed (the run had ended: recorded so, not failed over), not_ended (no record, or killed by a signal: failed over), unreadable (failed over)"}, []string{"outcome"}),
		stops: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ejcloud_jobs_stopped_total",
			Help: "jobs this instance stopped for a failure that relaunching cannot heal, by failure"}, []string{"failure"}),
		zkLatency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "ejcloud_zk_request_duration_seconds",
			Help:    "latency of ZooKeeper requests, by operation (create, get, exists, children, multi, multiRead, delete, sync)",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 12)}, []string{"op"}),
		scheduleLag: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "ejcloud_schedule_lag_seconds",
			Help:    "launch time minus cron fire time of the runs this leader's cron fired (not triggered runs, failover relaunches, or runs queued before it led); it includes a run's waits for its job's last run (Forbid), its dependencies and a disable",
			Buckets: []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900}}),
	}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.launched, m.launchesUnconfirmed, m.offersAccepted, m.offersDeclined, m.updates, m.unplaced, m.leaderChanges,
		m.backoffs, m.executorDeaths, m.stops, m.zkLatency, m.scheduleLag)
	return m
}

// observeZK is state.Config.ObserveOp.
func (m *metrics) observeZK(op string, d time.Duration) {
	m.zkLatency.WithLabelValues(op).Observe(d.Seconds())
}

func (s *instance) metricsHandler() http.Handler {
	s.metrics.reg.MustRegister(instanceCollector{s})
	if s.trace != nil {
		s.metrics.reg.MustRegister(traceCollector{s.trace})
	}
	// ContinueOnError: a scrape shows what could be gathered rather than nothing.
	return promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// instanceCollector reads, at each scrape, what the instance knows at that moment: its role,
// and, while it leads, the queues, backoffs, stale tasks and stopped jobs of its model. It makes no
// ZooKeeper request: the leader's model answers.
type instanceCollector struct{ s *instance }

var (
	leaderDesc         = prometheus.NewDesc("ejcloud_leader", "1 while this instance leads", nil, nil)
	subscribedDesc     = prometheus.NewDesc("ejcloud_mesos_subscribed", "1 while the leader is subscribed to Mesos", nil, nil)
	roundTripsDesc     = prometheus.NewDesc("ejcloud_zk_round_trips_total", "ZooKeeper requests made", nil, nil)
	zkConnectedDesc    = prometheus.NewDesc("ejcloud_zk_connected", "1 while this instance's ZooKeeper session is usable (connected)", nil, nil)
	zkExpiriesDesc     = prometheus.NewDesc("ejcloud_zk_session_expirations_total", "times this instance's ZooKeeper session expired", nil, nil)
	queueDepthDesc     = prometheus.NewDesc("ejcloud_queue_depth", "entries of the ready (pending runs), running and failover queues, from the leader's model", []string{"queue"}, nil)
	jobsStoppedDesc    = prometheus.NewDesc("ejcloud_jobs_stopped", "jobs stopped for a failure that relaunching cannot heal, until an operator acts on them", nil, nil)
	backoffShardsDesc  = prometheus.NewDesc("ejcloud_failover_backoff_shards", "shards whose failover relaunch waits for its backoff", nil, nil)
	backoffSecondsDesc = prometheus.NewDesc("ejcloud_failover_backoff_seconds", "longest current backoff of a job's waiting shards", []string{"job"}, nil)
	staleTasksDesc     = prometheus.NewDesc("ejcloud_tasks_stale", "running tasks whose agent has said nothing of them for longer than --stale-task-threshold", nil, nil)
)

func (c instanceCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{leaderDesc, subscribedDesc, roundTripsDesc, zkConnectedDesc, zkExpiriesDesc, queueDepthDesc, jobsStoppedDesc, backoffShardsDesc, backoffSecondsDesc, staleTasksDesc} {
		ch <- d
	}
}

func (c instanceCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	leader, subscribed := s.status()
	ch <- prometheus.MustNewConstMetric(leaderDesc, prometheus.GaugeValue, b2f(leader))
	ch <- prometheus.MustNewConstMetric(subscribedDesc, prometheus.GaugeValue, b2f(subscribed))
	ch <- prometheus.MustNewConstMetric(roundTripsDesc, prometheus.CounterValue, float64(s.store.RoundTrips()))
	connected, expiries := s.store.SessionState()
	ch <- prometheus.MustNewConstMetric(zkConnectedDesc, prometheus.GaugeValue, b2f(connected))
	ch <- prometheus.MustNewConstMetric(zkExpiriesDesc, prometheus.CounterValue, float64(expiries))
	s.mu.Lock()
	ld := s.ld
	s.mu.Unlock()
	if ld == nil {
		return
	}
	waiting := ld.relaunch.waiting("", time.Now())
	delay := map[string]float64{}
	for _, b := range waiting {
		delay[b.JobName] = max(delay[b.JobName], b.DelaySeconds)
	}
	ch <- prometheus.MustNewConstMetric(backoffShardsDesc, prometheus.GaugeValue, float64(len(waiting)))
	// The leader's own count: a gauge kept by the instance showed an earlier term's on a standby.
	ch <- prometheus.MustNewConstMetric(staleTasksDesc, prometheus.GaugeValue, float64(ld.staleCount.Load()))
	for job, d := range delay {
		ch <- prometheus.MustNewConstMetric(backoffSecondsDesc, prometheus.GaugeValue, d, job)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if ready, running, failover, err := ld.store.Depths(ctx); err == nil {
		ch <- prometheus.MustNewConstMetric(queueDepthDesc, prometheus.GaugeValue, float64(ready), "ready")
		ch <- prometheus.MustNewConstMetric(queueDepthDesc, prometheus.GaugeValue, float64(running), "running")
		ch <- prometheus.MustNewConstMetric(queueDepthDesc, prometheus.GaugeValue, float64(failover), "failover")
	} else {
		ch <- prometheus.NewInvalidMetric(queueDepthDesc, err)
	}
	if stopped, err := ld.store.StoppedJobs(ctx); err == nil {
		ch <- prometheus.MustNewConstMetric(jobsStoppedDesc, prometheus.GaugeValue, float64(len(stopped)))
	} else {
		ch <- prometheus.NewInvalidMetric(jobsStoppedDesc, err)
	}
}

func b2f(v bool) float64 {
	if v {
		return 1
	}
	return 0
}

// fireTimes are the cron times of the runs waiting in the ready queue, per job, oldest first,
// so that a launch can measure its schedule lag. ZooKeeper keeps only a count per job (2.1.5's
// layout), so they live in the leader's memory: the runs an earlier leader's cron queued, a
// trigger through the API or a tool queued, and failover relaunches have none, and their
// launches are not in the histogram.
type fireTimes struct {
	mu   sync.Mutex // guards seq and jobs: the producer adds, the offer cycle takes
	seq  uint64
	jobs map[string][]fireTime
}

type fireTime struct {
	at  time.Time
	seq uint64 // when it was recorded, to tell it from a snapshot of the queues (settle)
}

// fired records the cron times of runs the producer has just written to the ready queue.
func (f *fireTimes) fired(job string, at []time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.jobs == nil {
		f.jobs = map[string][]fireTime{}
	}
	for _, a := range at {
		f.seq++
		f.jobs[job] = append(f.jobs[job], fireTime{at: a, seq: f.seq})
	}
}

// mark is taken before the queues are read for settle.
func (f *fireTimes) mark() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.seq
}

// settle fits the times recorded up to mark to the ready counts read after it (a job absent
// counts 0): a run whose fire is recorded was written before the read, so the read counts it.
// Times beyond the count stand for fires that merged into a pending run (without misfire the
// count stays 1), whose lag is the oldest fire's, or for runs removed with their job or by a
// disable. Later times are for writes the read may not have seen, and are kept.
func (f *fireTimes) settle(mark uint64, ready map[string]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for job, ts := range f.jobs {
		pre := 0
		for pre < len(ts) && ts[pre].seq <= mark {
			pre++
		}
		if keep := min(pre, ready[job]); keep < pre {
			ts = append(ts[:keep], ts[pre:]...)
		}
		if len(ts) == 0 {
			delete(f.jobs, job)
		} else {
			f.jobs[job] = ts
		}
	}
}

// launched takes the oldest recorded fire time of a job whose run is being launched.
func (f *fireTimes) launched(job string) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ts := f.jobs[job]
	if len(ts) == 0 {
		return time.Time{}, false
	}
	if len(ts) == 1 {
		delete(f.jobs, job)
	} else {
		f.jobs[job] = ts[1:]
	}
	return ts[0].at, true
}
