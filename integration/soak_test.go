//go:build soak

package integration

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/integration/audit"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/state/statetest"
	"github.com/ejcloud/ejcloud/taskid"
)

// The soak's timing knobs. mesos-local marks a partitioned agent unreachable after
// agentPing × maxPings; the scheduler treats an unreachable task as lost after
// unreachableTimeout more, and relaunches it (SPEC §5.7).
const (
	agentPing          = time.Second
	maxPings           = 3
	unreachableTimeout = 10 * time.Second
	// The schedulers' --task-lease: an executor cut off from the master this long kills its
	// tasks, before the unreachable timeout (which starts only once the master gave up on the
	// agent) relaunches them, so that even a partition longer than both timeouts runs no shard
	// beside its relaunch. Such a run is killed 8 s after the partition began at the latest;
	// the relaunch comes 13 s after at the earliest (3 s + 10 s). Renewals come every second;
	// the leaderless gaps here (a takeover, ZooKeeper down for up to 5 s) stay under 7 s; only
	// the leader cut off from the Mesos master outlasts the lease, on purpose (see the fault).
	// (A run that ended during the partition ran, and its report is held behind it: the lease
	// cannot help that one, see attribute.)
	taskLease = 8 * time.Second
	// longRun is how long the long jobs' scripts run: longer than the lease and than the
	// longest partition.
	longRun = 25 * time.Second
	// The schedulers' --mesos-startup-timeout: short, so that standbys older than twice it are
	// common and the old-standby fault comes round often.
	startupLimit = 15 * time.Second
	instances    = 3 // schedulers kept running: a leader and two standbys
	backWithin   = 2 * time.Minute
	// ledgerWriteSlack is how long before a fault that costs the leader a slot may still have
	// been waiting to be written to the fire ledger: the new leader then records it as missed
	// while no instance led. The producer writes a slot within milliseconds of its time; two
	// seconds is far beyond that under the soak's load, and a slot skipped earlier than that
	// before the fault is a finding (a producer that sat on its writes).
	ledgerWriteSlack = 2 * time.Second
	// mesosHeartbeat is mesos-local's --heartbeat-interval. A scheduler gives up on an event
	// stream silent for five of them (scheduler/mesos.go): 5 s here, not Mesos's 75 s, so that
	// a scheduler cut off from the master notices within a fault.
	mesosHeartbeat = time.Second
	// ledgerReadEvery bounds the time between two reads of the fire ledgers: a ledger keeps
	// state.LedgerKeep entries, 640 s of a 10 s cron at the least, and the slot audit needs
	// every entry of the soak.
	ledgerReadEvery = time.Minute
)

// The fault menu: each kind once per deck, in a seeded order, so that a short soak meets them
// all.
const (
	faultExecutorKill   = "executor SIGKILL"
	faultLeaderKill     = "leader SIGKILL, restarted later"
	faultLeaderTerm     = "leader SIGTERM, restarted later"
	faultLeaderKillOld  = "leader SIGKILL, not restarted, a standby older than 2× the start-up limit takes over"
	faultAgentRestart   = "agent restart"
	faultPartitionShort = "agent partition shorter than mesos-local's unreachable timeout"
	faultPartitionLease = "agent partition longer than mesos-local's unreachable timeout, shorter than the task lease"
	faultPartitionMid   = "agent partition longer than the task lease, shorter than the scheduler's unreachable timeout"
	faultPartitionLong  = "agent partition longer than both unreachable timeouts"
	faultZooKeeper      = "ZooKeeper SIGKILL and restart"
	faultZooKeeperBlip  = "ZooKeeper SIGSTOP shorter than the session timeout"
	// A network partition between the leader and the Mesos master alone: the agents, the
	// executors and ZooKeeper stay reachable.
	faultSchedulerPartition = "leader cut off from the Mesos master"
	// With EJCLOUD_SOAK_ENSEMBLE: the ZooKeeper faults are these instead.
	faultMemberKill       = "ZooKeeper member SIGKILL and restart"
	faultMemberHangLeader = "ZooKeeper quorum leader SIGSTOP 20 s"
	faultMemberHang       = "ZooKeeper member the leader is connected to SIGSTOP 20 s"
)

var faultKinds = []string{faultExecutorKill, faultLeaderKill, faultLeaderTerm, faultLeaderKillOld, faultAgentRestart,
	faultPartitionShort, faultPartitionLease, faultPartitionMid, faultPartitionLong, faultZooKeeper, faultZooKeeperBlip,
	faultSchedulerPartition}

// TestSoak is `make soak`: EJCLOUD_SOAK_JOBS (60: what two cores sustain) jobs × 5 shards firing every 10 s for
// EJCLOUD_SOAK_DURATION (10m), with a fault from the menu above every EJCLOUD_SOAK_FAULT_EVERY
// (15s), chosen by EJCLOUD_SOAK_SEED (printed; random by default). After each fault it
// measures how long the system takes to be back; at the end the fires stop, the REST queues
// must match the scripts really running within 30 s, the work in hand finishes, and every fire
// of every job is audited from the status updates and from what the scripts recorded.
func TestSoak(t *testing.T) {
	duration := envDuration(t, "EJCLOUD_SOAK_DURATION", 10*time.Minute)
	faultEvery := envDuration(t, "EJCLOUD_SOAK_FAULT_EVERY", 15*time.Second)
	seed := time.Now().UnixNano()
	if s := os.Getenv("EJCLOUD_SOAK_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatalf("EJCLOUD_SOAK_SEED: %v", err)
		}
	}
	jobs := 60
	if s := os.Getenv("EJCLOUD_SOAK_JOBS"); s != "" {
		var err error
		if jobs, err = strconv.Atoi(s); err != nil {
			t.Fatalf("EJCLOUD_SOAK_JOBS: %v", err)
		}
	}
	rng := rand.New(rand.NewSource(seed))
	const shards, apps = 5, 4
	t.Logf("soak: seed %d (EJCLOUD_SOAK_SEED=%d replays the fault sequence); %d jobs × %d shards every 10 s, %v, a fault every %v, %d cores",
		seed, seed, jobs, shards, duration, faultEvery, runtime.NumCPU())

	s := &soak{t: t, rng: rng, faults: map[string]*faultStat{}, kinds: faultKinds, session: 2 * time.Second, ledgers: map[string]map[ledgerKey]state.FireEntry{}}
	w := &world{zk: statetest.Env{Namespace: "ejcloud"}, dir: t.TempDir()}
	if os.Getenv("EJCLOUD_SOAK_ENSEMBLE") != "" {
		// Production's ZooKeeper: 3 members with Debian's timing, the session the README
		// recommends for it, and hung members in the menu.
		s.ensemble = statetest.StartEnsembleWith(t, 3, statetest.ProductionTiming)
		w.zk.Servers, s.session = s.ensemble.Servers(), 15*time.Second
		s.kinds = append(slices.DeleteFunc(slices.Clone(faultKinds), func(k string) bool { return k == faultZooKeeper || k == faultZooKeeperBlip }),
			faultMemberKill, faultMemberHangLeader, faultMemberHang)
	} else {
		s.zk = statetest.StartDedicated(t)
		w.zk.Servers = []string{s.zk.Addr}
	}
	w.mesos = startMesosWith(t, 4, "cpus:64;mem:65536;disk:1000;ports:[31000-32000]",
		"--agent-ping-timeout", agentPing.String(), "--max-agent-ping-timeouts", fmt.Sprint(maxPings),
		"--heartbeat-interval", mesosHeartbeat.String())
	s.w, s.tail = w, &updateTail{path: w.mesos.updates}
	t.Logf("soak: ZooKeeper %v, session timeout %v", w.zk.Servers, s.session)
	s.topUp()
	l := leaderOf(t, s.live()...)
	for a := 0; a < apps; a++ {
		l.must(t, 204, "POST", "/api/app", strings.Replace(w.appJSON(""), `"appName":"app"`, fmt.Sprintf(`"appName":"app%d"`, a), 1))
	}
	var audited []audit.Job
	var bodies []string
	for j := 0; j < jobs; j++ {
		name, expr := fmt.Sprintf("soak%03d", j), fmt.Sprintf("%d/10 * * * * ?", j%10)
		// A tenth of the jobs run longer than the task lease, so that partitions find runs
		// in flight: the lease must kill them before their relaunch (else the audit sees
		// two runs of a shard at once).
		body := "sleep 1"
		if j%10 == 9 {
			body = "sleep " + fmt.Sprint(int(longRun.Seconds()))
		}
		b, _ := json.Marshal(map[string]any{"jobName": name, "appName": fmt.Sprintf("app%d", j%apps), "jobType": "SCRIPT",
			"jobExecutionType": "TRANSIENT", "cron": expr, "timeZone": "UTC", "shardingTotalCount": shards,
			"cpuCount": 0.05, "memoryMB": 8, "failover": true,
			"scriptCommandLine": audit.RecordingScript(w.effects(), w.dir, body)})
		sent := time.Now()
		l.must(t, 204, "POST", "/api/job/register", string(b))
		// Since is after the registration answered: the leader schedules the job's cron
		// before it answers, from then on (no slot before counts as the job's). A slot
		// between the two is the job's if its ledger holds it (audit.Job.Registered).
		job := cronJob(t, name, shards, expr)
		job.Registered = sent
		audited = append(audited, job)
		bodies = append(bodies, string(b))
	}
	var names []string
	for _, j := range audited {
		names = append(names, j.Name)
	}

	started := time.Now()
	var deck []string
	for time.Since(started) < duration {
		for slept := time.Duration(0); slept < faultEvery; slept += ledgerReadEvery {
			time.Sleep(min(faultEvery-slept, ledgerReadEvery)) // the fault rhythm of the soak, not a wait for a condition
			s.readLedgers(names)
		}
		s.checkExits()
		s.topUp()
		if len(deck) == 0 {
			deck = append(deck, s.kinds...)
			rng.Shuffle(len(deck), func(i, k int) { deck[i], deck[k] = deck[k], deck[i] })
		}
		kind := deck[0]
		if kind == faultLeaderKillOld && s.oldestStandby() < 2*startupLimit {
			// No standby is old enough yet: the fault waits for a later turn.
			if len(deck) > 1 {
				deck = append(deck[1:], kind)
			}
			kind = deck[0]
			if kind == faultLeaderKillOld {
				continue
			}
		}
		deck = deck[1:]
		s.inject(kind)
		t.Logf("%v: %s", time.Since(started).Round(time.Second), s.faultLine())
		s.readLedgers(names)
	}
	ran := time.Since(started)
	s.checkExits()
	s.topUp()

	l = leaderOf(t, s.live()...)
	for i, b := range bodies {
		// The audited window ends here: the update decides and writes the job's slots up to
		// itself before it answers, and the runs they queued have finished once the work in
		// hand has drained (below), so every slot up to now has had its chance to run. (A
		// drain that does not finish is an error of its own, and the slots it left unrun are
		// lost fires too.)
		audited[i].Until = time.Now()
		stopFires(t, l, b)
	}
	queuesMatch := s.queuesMatchProcesses(30 * time.Second)
	drained := s.await(2*time.Minute, func() bool {
		l := s.leader()
		if l == nil {
			return false
		}
		for _, kind := range []string{"ready", "running", "failover"} {
			code, body := l.api(t, "GET", "/api/job/tasks/"+kind, "")
			if code != 200 || strings.TrimSpace(body) != "[]" {
				return false
			}
		}
		return true
	})
	s.checkExits()
	// The ledgers once more, now that every queued run has launched (the launch writes its
	// run id into its slot's entry).
	if !s.await(30*time.Second, func() bool { return s.readLedgers(names) }) {
		t.Errorf("the fire ledgers could not be read after the drain: the slot audit misses the latest launches")
	}
	for i := range audited {
		audited[i].Fires, audited[i].Leaderless = s.ledger(audited[i].Name), s.leaderless
	}
	rep := w.mesos.audit(t, audited...)
	recs, err := audit.ReadEffects(w.effects())
	if err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(w.effects()); err == nil {
		keep(t, "effects.log", b) // beside the recorded updates, for a post-mortem
	}
	ups, err := audit.ReadFile(w.mesos.updates)
	if err != nil {
		t.Fatal(err)
	}
	eff := audit.CheckEffects(audited, recs, ups)
	starts := 0
	for _, r := range recs {
		if r.Kind == "start" {
			starts++
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "soak report (seed %d): %v of load, %d jobs × %d shards every 10 s, %d cores\n", seed, ran.Round(time.Second), jobs, shards, runtime.NumCPU())
	fmt.Fprintf(&b, "  faults (count; recovery from the fault's end: median, max; not back within %v):\n", backWithin)
	for _, k := range s.kinds {
		fmt.Fprintf(&b, "    %-95s %s\n", k, s.faults[k])
	}
	fmt.Fprintf(&b, "  %s\n", strings.SplitN(rep.String(), "\n", 2)[0])
	fmt.Fprintf(&b, "  %s\n", strings.SplitN(eff.String(), "\n", 2)[0])
	fmt.Fprintf(&b, "  the scripts started %d times (killed runs included); the side-effect audit accounts for %d of them\n", starts, eff.StartsAccounted())
	fmt.Fprintf(&b, "  leaderless spans the soak caused (the only ones a slot may be skipped in): %d\n", len(s.leaderless))
	fmt.Fprintf(&b, "  unexpected scheduler exits: %d\n", len(s.exits))
	fmt.Fprintf(&b, "  after the last fault, the REST queues matched the running scripts within 30 s: %v; the work in hand drained: %v\n", queuesMatch, drained)
	expected, unexpected := s.attribute(ups, recs, rep.Problems, eff.Problems)
	fmt.Fprintf(&b, "  audit findings: %d at least once by design (a first run that ended with its report held behind a partition past both unreachable timeouts), %d others",
		len(expected), len(unexpected))
	t.Log(b.String())
	for _, p := range expected {
		t.Logf("at least once by design: %s", p)
	}
	for _, e := range s.exits {
		t.Errorf("unexpected scheduler exit: %s", e)
	}
	for _, p := range unexpected {
		t.Errorf("audit: %s", p)
	}
	for _, k := range s.kinds {
		if f := s.faults[k]; f != nil && f.notBack > 0 {
			t.Errorf("%s: %d times not back within %v", k, f.notBack, backWithin)
		}
		if f := s.faults[k]; s.injected >= len(s.kinds) && (f == nil || f.count == 0) {
			// A whole deck was dealt: a kind that never took effect (no executor to kill,
			// say) leaves a fault of the standard untested while the soak reads as passed.
			t.Errorf("%s: never injected in %d faults", k, s.injected)
		}
	}
	if !queuesMatch || !drained {
		t.Errorf("the REST queues did not match the running scripts, or the work in hand did not finish")
	}
	if n := eff.StartsAccounted(); n != starts {
		// Every start record must be a shard's run, a further run that ended, a run killed
		// part-way or a start under a reused task id: a start the audit did not place is a
		// run nobody judged.
		t.Errorf("the scripts started %d times and the side-effect audit accounts for %d (%d shard runs + %d reruns + %d killed part-way + %d under a reused task id)",
			starts, n, eff.ShardRuns, eff.Reruns, eff.Partial, eff.Reused)
	}
}

type soak struct {
	t              *testing.T
	w              *world
	zk             *statetest.Server   // the one server, or nil with an ensemble
	ensemble       *statetest.Ensemble // with EJCLOUD_SOAK_ENSEMBLE
	session        time.Duration       // the schedulers' --zk-session-timeout
	kinds          []string            // the fault menu
	rng            *rand.Rand
	ss             []*instance
	exits          []string
	faults         map[string]*faultStat
	last           string // the last fault, for the log
	injected       int    // faults asked for: each deck holds every kind once
	tail           *updateTail
	executorKills  []executorKill
	longPartitions []longPartition
	// leaderless are the spans in which a fault may have left the scheduler without a leader:
	// from ledgerWriteSlack before the fault began to when the soak saw the system back.
	leaderless []audit.Span
	ledgers    map[string]map[ledgerKey]state.FireEntry // every fire-ledger entry read, per job, in its latest version
}

// ledgerKey names a fire-ledger entry: its (first) slot, and whether it was a trigger.
type ledgerKey struct {
	slot      int64 // Unix nanoseconds
	triggered bool
}

// leaderFaults are the faults that may cost the scheduler its leader. A leader cut off from the
// Mesos master is not one: it keeps its ZooKeeper session and leads on, and its producer goes
// on writing every slot's fire into ZooKeeper, where the runs wait for the re-subscription's
// offers. A slot it skips then is a lost fire, not one excused by a leaderless span.
var leaderFaults = map[string]bool{faultLeaderKill: true, faultLeaderTerm: true, faultLeaderKillOld: true, faultZooKeeper: true,
	faultMemberKill: true, faultMemberHangLeader: true, faultMemberHang: true}

// readLedgers reads every job's fire ledger from the leader, keeping each entry's latest
// version, and reports whether it read them all. Without a leader, or on an error, it stops:
// the next read catches up (ledgerReadEvery).
func (s *soak) readLedgers(jobs []string) bool {
	l := s.leader()
	if l == nil {
		return false
	}
	for _, job := range jobs {
		fires, err := readLedger(l.addr, job)
		if err != nil {
			s.t.Logf("fire ledger: %v", err)
			return false
		}
		m := s.ledgers[job]
		if m == nil {
			m = map[ledgerKey]state.FireEntry{}
			s.ledgers[job] = m
		}
		for _, e := range fires {
			m[ledgerKey{e.Slot.UnixNano(), e.Triggered}] = e
		}
	}
	return true
}

// ledger is every entry of job's fire ledger the soak read.
func (s *soak) ledger(job string) []state.FireEntry {
	var out []state.FireEntry
	for _, e := range s.ledgers[job] {
		out = append(out, e)
	}
	return out
}

// readLedger asks the scheduler at addr for job's fire ledger, all of it. Unlike api it fails
// with an error, not the test: the leader may be gone by the time it answers.
func readLedger(addr, job string) ([]state.FireEntry, error) {
	u := fmt.Sprintf("http://%s/api/job/%s/fires?limit=%d", addr, url.PathEscape(job), state.LedgerKeep)
	req, err := http.NewRequest(http.MethodGet, u, nil)
	if err != nil {
		return nil, fmt.Errorf("read the fire ledger of %s: %w", job, err)
	}
	user, pass, _ := strings.Cut(creds, ":")
	req.SetBasicAuth(user, pass)
	resp, err := noRedirect.Do(req)
	if err != nil {
		return nil, fmt.Errorf("read the fire ledger of %s: %w", job, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("read the fire ledger of %s: %s", job, resp.Status)
	}
	var out struct {
		Fires []state.FireEntry `json:"fires"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("read the fire ledger of %s: %w", job, err)
	}
	return out.Fires, nil
}

// executorKill is an executor SIGKILLed by the soak.
type executorKill struct {
	agent string
	at    time.Time
}

// longPartition is an agent cut off for longer than both unreachable timeouts.
type longPartition struct {
	agent    string
	from, to time.Time
}

type instance struct {
	*scheduler
	born    time.Time
	stopped bool // by the soak
}

type faultStat struct {
	count    int
	recovery []time.Duration
	notBack  int
}

func (f *faultStat) String() string {
	if f == nil {
		return "0"
	}
	r := append([]time.Duration(nil), f.recovery...)
	sort.Slice(r, func(i, k int) bool { return r[i] < r[k] })
	if len(r) == 0 {
		return fmt.Sprintf("%d; -, -; %d", f.count, f.notBack)
	}
	return fmt.Sprintf("%d; %v, %v; %d", f.count, r[len(r)/2].Round(time.Millisecond), r[len(r)-1].Round(time.Millisecond), f.notBack)
}

func (s *soak) faultLine() string {
	var parts []string
	for _, k := range s.kinds {
		if f := s.faults[k]; f != nil {
			parts = append(parts, fmt.Sprintf("%s %d", k, f.count))
		}
	}
	return s.last + "; so far: " + strings.Join(parts, ", ")
}

func (s *soak) live() []*scheduler {
	var out []*scheduler
	for _, i := range s.ss {
		out = append(out, i.scheduler)
	}
	return out
}

func (s *soak) leader() *scheduler {
	for _, i := range s.ss {
		if !exited(i.proc) && i.leads() {
			return i.scheduler
		}
	}
	return nil
}

// topUp starts schedulers until instances run.
func (s *soak) topUp() {
	for len(s.ss) < instances {
		s.ss = append(s.ss, &instance{scheduler: startScheduler(s.t, s.w.zk, s.w.mesos, "--unreachable-timeout", unreachableTimeout.String(),
			"--task-lease", taskLease.String(), "--mesos-startup-timeout", startupLimit.String(), "--zk-session-timeout", s.session.String()), born: time.Now()})
	}
}

// checkExits drops the schedulers that exited without the soak stopping them, each a finding.
func (s *soak) checkExits() {
	kept := s.ss[:0]
	for _, i := range s.ss {
		if !i.stopped && exited(i.proc) {
			i.stop(syscall.SIGKILL) // reaps it
			s.exits = append(s.exits, fmt.Sprintf("pid %d, up %v: %s", i.cmd.Process.Pid, time.Since(i.born).Round(time.Second), lastLines(i.log.String(), 6)))
			s.t.Logf("unexpected scheduler exit: %s", s.exits[len(s.exits)-1])
			continue
		}
		if !i.stopped {
			kept = append(kept, i)
		}
	}
	s.ss = kept
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

func (s *soak) oldestStandby() time.Duration {
	var oldest time.Duration
	for _, i := range s.ss {
		if !i.leads() && time.Since(i.born) > oldest {
			oldest = time.Since(i.born)
		}
	}
	return oldest
}

// inject applies one fault, waits until the system is back, and counts both.
func (s *soak) inject(kind string) {
	f := s.faults[kind]
	if f == nil {
		f = &faultStat{}
		s.faults[kind] = f
	}
	s.injected++
	began := time.Now() // when the fault began
	var end time.Time   // when the fault ended
	back := func() bool { return true }
	agentBack := func(agent string) func() bool { return func() bool { return s.tail.runningAfter(agent, end) } }
	leaderBack := func() bool { return s.leader() != nil && s.tail.runningAfter("", end) }
	detail := ""
	// keepLeader is the leader the fault must leave leading (keepWhy says why), if any.
	var keepLeader *instance
	var keepWhy string
	var resubscribed time.Duration // faultSchedulerPartition: from the heal to the framework connected again
	switch kind {
	case faultExecutorKill:
		pids := s.w.mesos.executorPIDs("")
		if len(pids) == 0 {
			s.last = kind + ": no executor to kill"
			return
		}
		pid := pids[s.rng.Intn(len(pids))]
		agent := agentOfPID(s.w.mesos, pid)
		syscall.Kill(pid, syscall.SIGKILL)
		s.executorKills = append(s.executorKills, executorKill{agent: agent, at: time.Now()})
		end, back = time.Now(), agentBack(agent)
		detail = fmt.Sprintf("executor %d on %s", pid, agent)
	case faultLeaderKill, faultLeaderTerm, faultLeaderKillOld:
		l := s.leaderInstance()
		sig := syscall.SIGKILL
		if kind == faultLeaderTerm {
			sig = syscall.SIGTERM
		}
		l.stopped = true
		l.stop(sig)
		s.checkExits() // drops it from the fleet
		end, back = time.Now(), leaderBack
		detail = fmt.Sprintf("pid %d, up %v", l.cmd.Process.Pid, time.Since(l.born).Round(time.Second))
	case faultAgentRestart:
		agent := s.busiestAgent()
		s.w.mesos.fault(s.t, agent, "restart")
		end, back = time.Now(), agentBack(agent)
		detail = agent
	case faultPartitionShort, faultPartitionLease, faultPartitionMid, faultPartitionLong:
		// 1 s; 5.5 s (the master gave up on the agent at 3 s, the executors' lease holds to 8 s);
		// 10.5 s (the lease killed the tasks at 8 s, the relaunch comes at 13 s); 18 s. None on a
		// boundary, where the outcome would be a race.
		unreachable := agentPing * maxPings
		d := map[string]time.Duration{faultPartitionShort: unreachable / 3, faultPartitionLease: (unreachable + taskLease) / 2,
			faultPartitionMid:  (taskLease + unreachable + unreachableTimeout) / 2,
			faultPartitionLong: unreachable + unreachableTimeout + 5*time.Second}[kind]
		agent := s.w.mesos.agents[s.rng.Intn(len(s.w.mesos.agents))]
		from := time.Now()
		s.w.mesos.fault(s.t, agent, "partition")
		time.Sleep(d) // the length of the partition is the fault
		s.w.mesos.fault(s.t, agent, "heal")
		end, back = time.Now(), agentBack(agent)
		if kind == faultPartitionLong {
			s.longPartitions = append(s.longPartitions, longPartition{agent: agent, from: from, to: end})
		}
		detail = fmt.Sprintf("%s for %v", agent, d)
	case faultZooKeeper:
		s.zk.Stop()
		d := time.Duration(2+s.rng.Intn(4)) * time.Second
		time.Sleep(d) // the length of the outage is the fault
		if err := s.zk.Start(); err != nil {
			s.t.Fatalf("restart ZooKeeper: %v", err)
		}
		end, back = time.Now(), leaderBack
		detail = fmt.Sprintf("down %v", d)
	case faultZooKeeperBlip:
		// Half the session timeout, under the two thirds after which the client gives up on
		// the connection: no session is lost, so no leader may be (a slot skipped as missed
		// while no instance led is then a lost fire; this is no leaderless span).
		l := s.leaderInstance()
		s.zk.Pause()
		d := s.session / 2
		time.Sleep(d) // the length of the hang is the fault
		s.zk.Resume()
		end, back = time.Now(), leaderBack
		detail = fmt.Sprintf("hung %v", d)
		keepLeader, keepWhy = l, "its session should have outlived the hang"
	case faultSchedulerPartition:
		// The leader's watchdog gives up on its silent stream five heartbeat intervals after the
		// last event, 4–5 s into the partition, and mesos-local sees the close; the leader's
		// SUBSCRIBE again gets no answer before the heal. The lease renewals are MESSAGE calls
		// the partition holds too: the executors' leases lapse 7–8 s into it (the last renewal
		// came up to a renewal period before), and they kill their tasks, as they would in
		// production. So 1.5 s past the lease: past the watchdog and the lease, away from both
		// boundaries (a heal between the two would race the first renewal after it against the
		// lease), and far inside the failover timeout (a week), so that Mesos keeps the
		// framework and its tasks. The detail says when the master saw the stream closed, when
		// the leader stopped saying it is ready (/readyz), and when it was subscribed again.
		l := s.leaderInstance()
		var cluster struct {
			FrameworkID string `json:"frameworkId"`
		}
		if err := json.Unmarshal([]byte(l.must(s.t, 200, "GET", "/api/operate/cluster", "")), &cluster); err != nil || cluster.FrameworkID == "" {
			s.t.Fatalf("the leader's /api/operate/cluster names no framework: %v", err)
		}
		fw := cluster.FrameworkID
		d := taskLease + 1500*time.Millisecond
		from := time.Now()
		s.w.mesos.frameworkFault(s.t, fw, "partition")
		var closed, unready time.Duration
		for time.Since(from) < d { // the length of the partition is the fault
			if closed == 0 && !s.w.mesos.connected(s.t, fw) {
				closed = time.Since(from)
			}
			if unready == 0 && !l.leads() {
				unready = time.Since(from)
			}
			time.Sleep(100 * time.Millisecond)
		}
		s.w.mesos.frameworkFault(s.t, fw, "heal")
		end = time.Now()
		back = func() bool {
			if closed > 0 && resubscribed == 0 && s.w.mesos.connected(s.t, fw) {
				resubscribed = time.Since(end)
			}
			return leaderBack()
		}
		detail = fmt.Sprintf("framework %s for %v; ", fw, d)
		if closed > 0 {
			detail += fmt.Sprintf("the leader closed its stream %v into it, ", closed.Round(100*time.Millisecond))
		} else {
			detail += "the leader kept its stream open, "
		}
		if unready > 0 {
			detail += fmt.Sprintf("was not ready %v into it", unready.Round(100*time.Millisecond))
		} else {
			detail += "was ready throughout"
		}
		keepLeader, keepWhy = l, "cut off from Mesos only, it keeps its ZooKeeper session (this is no leaderless span)"
	case faultMemberKill:
		i := s.rng.Intn(3)
		s.ensemble.Member(i).Stop()
		d := time.Duration(2+s.rng.Intn(4)) * time.Second
		time.Sleep(d) // the length of the outage is the fault
		if err := s.ensemble.Member(i).Start(); err != nil {
			s.t.Fatalf("restart ZooKeeper member %d: %v", i, err)
		}
		end, back = time.Now(), leaderBack
		detail = fmt.Sprintf("member %d down %v", i, d)
	case faultMemberHangLeader, faultMemberHang:
		i := s.ensemble.Leader()
		if kind == faultMemberHang {
			if sid, err := statetest.LeaderSession(s.ensemble.Servers(), s.w.zk.Namespace); err == nil {
				i = s.ensemble.Serving(sid)
			}
		}
		if i < 0 { // between elections or connections: freeze the first member
			i = 0
		}
		s.ensemble.Member(i).Pause()
		time.Sleep(20 * time.Second) // the length of the hang is the fault
		s.ensemble.Member(i).Resume()
		end, back = time.Now(), leaderBack
		detail = fmt.Sprintf("member %d", i)
	}
	f.count++
	if s.await(backWithin, func() bool { s.checkExits(); s.topUpIfNoLeaderCandidate(); return back() }) {
		f.recovery = append(f.recovery, time.Since(end))
		detail += fmt.Sprintf(", back after %v", time.Since(end).Round(time.Millisecond))
	} else {
		f.notBack++
		detail += fmt.Sprintf(", NOT back within %v", backWithin)
	}
	if keepLeader != nil && s.leaderInstance() != keepLeader {
		s.t.Errorf("%s: the leader changed; %s", kind, keepWhy)
		detail += ", THE LEADER CHANGED"
	}
	if leaderFaults[kind] {
		// Back means a leader that launched since the fault ended: its producer took the
		// jobs over before that, so every slot it found missed lies in this span.
		s.leaderless = append(s.leaderless, audit.Span{From: began.Add(-ledgerWriteSlack), To: time.Now()})
	}
	switch kind {
	case faultLeaderKill, faultLeaderTerm:
		s.topUp() // the killed instance's replacement, once the standby has taken over
	case faultLeaderKillOld: // replaced only before the next fault
		if l := s.leaderInstance(); l != nil {
			detail += fmt.Sprintf("; the new leader was up %v", time.Since(l.born).Round(time.Second))
		}
	case faultSchedulerPartition:
		if resubscribed > 0 {
			detail += fmt.Sprintf("; the leader subscribed again %v after the heal", resubscribed.Round(time.Millisecond))
		}
	}
	s.last = kind + " (" + detail + ")"
}

// topUpIfNoLeaderCandidate restarts schedulers when every one has exited, so that the soak
// goes on (the exits are findings).
func (s *soak) topUpIfNoLeaderCandidate() {
	if len(s.ss) == 0 {
		s.topUp()
	}
}

func (s *soak) leaderInstance() *instance {
	l := leaderOf(s.t, s.live()...)
	for _, i := range s.ss {
		if i.scheduler == l {
			return i
		}
	}
	return nil
}

// busiestAgent is the agent with the most running tasks: the restart then finds executors
// with updates in flight.
func (s *soak) busiestAgent() string {
	n := map[string]int{}
	for _, f := range s.w.mesos.state(s.t).Frameworks {
		for _, task := range f.Tasks {
			if task.State == "TASK_RUNNING" {
				n[task.SlaveID]++
			}
		}
	}
	best := s.w.mesos.agents[0]
	for _, a := range s.w.mesos.agents {
		if n[a] > n[best] {
			best = a
		}
	}
	return best
}

func agentOfPID(m *mesos, pid int) string {
	dir, _ := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid))
	if _, rest, ok := strings.Cut(dir, "/slaves/"); ok {
		a, _, _ := strings.Cut(rest, "/")
		return a
	}
	return ""
}

// await polls cond until it holds or d has passed, and says which.
func (s *soak) await(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); ; time.Sleep(50 * time.Millisecond) {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
	}
}

// queuesMatchProcesses waits up to d for the leader's running queue to name exactly the tasks
// whose scripts run (processes with EJCLOUD_TASK_ID in their environment), and logs the
// difference if it never does.
func (s *soak) queuesMatchProcesses(d time.Duration) bool {
	var queued, running map[string]bool
	ok := s.await(d, func() bool {
		l := s.leader()
		if l == nil {
			return false
		}
		code, body := l.api(s.t, "GET", "/api/job/tasks/running", "")
		if code != 200 {
			return false
		}
		var entries []struct {
			ID string `json:"id"`
		}
		if json.Unmarshal([]byte(body), &entries) != nil {
			return false
		}
		queued = map[string]bool{}
		for _, e := range entries {
			queued[e.ID] = true
		}
		running = scriptTasks()
		return fmt.Sprint(sortedSet(queued)) == fmt.Sprint(sortedSet(running))
	})
	if !ok {
		s.t.Logf("after %v the running queue names %d tasks, the scripts running %d: queued only %v; running only %v",
			d, len(queued), len(running), minus(queued, running), minus(running, queued))
	}
	return ok
}

// scriptTasks is the task ids of the job scripts running on this machine.
func scriptTasks() map[string]bool {
	out := map[string]bool{}
	envs, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, e := range envs {
		b, err := os.ReadFile(e)
		if err != nil {
			continue
		}
		for _, kv := range bytes.Split(b, []byte{0}) {
			if v, ok := bytes.CutPrefix(kv, []byte("EJCLOUD_TASK_ID=")); ok && strings.HasPrefix(string(v), "soak") {
				out[string(v)] = true
			}
		}
	}
	return out
}

func sortedSet(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func minus(a, b map[string]bool) []string {
	var out []string
	for k := range a {
		if !b[k] {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

var (
	earlier  = regexp.MustCompile(`after (\S+) had run`)
	neverRan = regexp.MustCompile(`^(\S+): round \d+ \((\d\d:\d\d:\d\d\.\d{3})\) shard (\d+): never ran$`)
)

// attribute splits the audits' findings into those at-least-once by design, each with its
// cause, and the others. The finding must name the shard's first run, and that run must be:
//   - one that ran to its end (the script recorded it) while its report had not reached the
//     scheduler when its agent was cut off for longer than both unreachable timeouts: the
//     master reported it unreachable, and the scheduler relaunched the shard after
//     --unreachable-timeout (SPEC §5.7). A run still running then is no such finding: the task
//     lease kills it before the relaunch (the audit sees a run killed part-way), and one that
//     went on beside its relaunch is an overlap, never by design.
//
// A first run whose executor the soak SIGKILLed after the script recorded its end is no such
// finding: its supervisor recorded the run's end in the sandbox, and the leader reads that
// record before it fails the task over (package taskend).
func (s *soak) attribute(updates []audit.Update, records []audit.Record, problems ...[]string) (expected, unexpected []string) {
	unreachable := map[string][]time.Time{}
	first, failed := map[string]time.Time{}, map[string]time.Time{}
	for _, u := range updates {
		if at, ok := first[u.TaskID]; !ok || u.At.Before(at) {
			first[u.TaskID] = u.At
		}
		switch {
		case u.State == "TASK_UNREACHABLE":
			unreachable[u.TaskID] = append(unreachable[u.TaskID], u.At)
		case (u.State == "TASK_FAILED" || u.State == "TASK_GONE" || u.State == "TASK_LOST") && !u.JobFailed:
			failed[u.TaskID] = u.At
		}
	}
	ended := map[string]time.Time{}
	for _, r := range records {
		if r.Kind == "end" {
			ended[r.TaskID] = r.At
		}
	}
	heldBehindPartition := func(task, agent string) bool {
		end, ok := ended[task]
		for _, w := range s.longPartitions {
			for _, at := range unreachable[task] {
				if ok && w.agent == agent && !at.Before(w.from) && !at.After(w.to) && !end.After(w.to) {
					return true
				}
			}
		}
		return false
	}
	// endedBeforeItsExecutorDied finds, for a round's shard the status updates say never ran,
	// a task of it that ran to its end (the script recorded it) and that the agent then failed
	// (TASK_FAILED, TASK_GONE: its executor was SIGKILLed, or did not re-register after an
	// agent restart): the leader recorded it from the run's end record, which no status update
	// shows. A shard that really never ran is still the side-effect audit's finding.
	endedBeforeItsExecutorDied := func(job, at, item string) (string, bool) {
		for task, failedAt := range failed {
			id, err := taskid.Parse(task)
			if err != nil || id.JobName != job || strconv.Itoa(id.Item) != item {
				continue
			}
			end, ok := ended[task]
			if !ok || end.After(failedAt) {
				continue
			}
			// The round's start (the audit's clock time, UTC) is its first task's first update.
			clock, err := time.Parse("15:04:05.000", at)
			f := first[task].UTC()
			if err != nil {
				continue
			}
			start := time.Date(f.Year(), f.Month(), f.Day(), clock.Hour(), clock.Minute(), clock.Second(), clock.Nanosecond(), time.UTC)
			if d := f.Sub(start); d >= -2*time.Second && d <= 2*time.Second {
				return task + s.killedAfterEnd(task, id.AgentID, ended), true
			}
		}
		return "", false
	}
	for _, ps := range problems {
		for _, p := range ps {
			if n := neverRan.FindStringSubmatch(p); n != nil {
				if task, ok := endedBeforeItsExecutorDied(n[1], n[2], n[3]); ok {
					expected = append(expected, "ran once (its script recorded its end; the side-effect audit counts it), then its executor died before the agent took the TASK_FINISHED: the agent's failure is all the status updates show, and the leader recorded the run from its end record ("+task+"): "+p)
					continue
				}
			}
			e := earlier.FindStringSubmatch(p)
			if e == nil {
				unexpected = append(unexpected, p)
				continue
			}
			first, err := taskid.Parse(e[1])
			switch {
			case err != nil:
				unexpected = append(unexpected, p)
			case heldBehindPartition(e[1], first.AgentID):
				expected = append(expected, "ran to its end, its report held behind a partition past both unreachable timeouts until after the relaunch: "+p)
			default:
				unexpected = append(unexpected, p+s.killedAfterEnd(e[1], first.AgentID, ended))
			}
		}
	}
	return expected, unexpected
}

// killedAfterEnd says, for a post-mortem, whether the soak SIGKILLed the executor of task on
// agent within a second after the task's script recorded its end.
func (s *soak) killedAfterEnd(task, agent string, ended map[string]time.Time) string {
	end, ok := ended[task]
	if !ok {
		return ""
	}
	for _, k := range s.executorKills {
		if gap := k.at.Sub(end); k.agent == agent && gap >= 0 && gap <= time.Second {
			return fmt.Sprintf(" (the soak SIGKILLed its executor %v after the script recorded its end)", gap.Round(time.Microsecond))
		}
	}
	return ""
}

// updateTail reads the status updates mesos-local appends to its --record-updates file, from
// where it last stopped.
type updateTail struct {
	path    string
	off     int64
	running map[string]time.Time // the latest TASK_RUNNING per agent, and "" for any
}

// runningAfter says a task started running on the agent ("": on any) after at.
func (u *updateTail) runningAfter(agent string, at time.Time) bool {
	u.read()
	return u.running[agent].After(at)
}

func (u *updateTail) read() {
	if u.running == nil {
		u.running = map[string]time.Time{}
	}
	f, err := os.Open(u.path)
	if err != nil {
		return
	}
	defer f.Close()
	if _, err := f.Seek(u.off, 0); err != nil {
		return
	}
	r := bufio.NewReaderSize(f, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return // a line still being written is read next time, whole
		}
		u.off += int64(len(line))
		var up audit.Update
		if json.Unmarshal(line, &up) != nil || up.State != "TASK_RUNNING" {
			continue
		}
		id, err := taskid.Parse(up.TaskID)
		if err != nil {
			continue
		}
		for _, k := range []string{id.AgentID, ""} {
			if up.At.After(u.running[k]) {
				u.running[k] = up.At
			}
		}
	}
}

func envDuration(t *testing.T, name string, def time.Duration) time.Duration {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return d
}
