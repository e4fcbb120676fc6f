package producer

import (
	"context"
	"fmt"
	"io"
	"os"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/state/statetest"
)

func TestMain(m *testing.M) { os.Exit(statetest.Main(m)) }

// zkLeader is one leader's producer over its own ZooKeeper session, with a fake clock.
type zkLeader struct {
	p     *Producer
	clock *fakeClock
	store *state.Store
	stop  func() // the leader dies: its producer and its session end
}

func connect(t *testing.T, env statetest.Env) *state.Store {
	t.Helper()
	log := logrus.New()
	log.SetOutput(io.Discard)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := state.Connect(ctx, state.Config{Servers: env.Servers, Namespace: env.Namespace, SessionTimeout: 2 * time.Second, Logger: log})
	if err != nil {
		t.Fatalf("connect to ZooKeeper: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

// newZKLeader returns a leader at now; its producer runs only once run is called, so that a
// test can hold its timer back (a producer running late).
func newZKLeader(t *testing.T, env statetest.Env, now time.Time) (*zkLeader, func()) {
	t.Helper()
	log := logrus.New()
	log.SetOutput(io.Discard)
	l := &zkLeader{clock: &fakeClock{now: now}, store: connect(t, env)}
	l.p = New(l.store, l.clock, log, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	started := false
	var once sync.Once
	l.stop = func() {
		once.Do(func() {
			cancel()
			if started {
				<-done
			}
			l.store.Close()
		})
	}
	t.Cleanup(l.stop)
	run := func() {
		started = true
		go func() { done <- l.p.Run(ctx) }()
	}
	return l, run
}

func zkJob(t *testing.T, s *state.Store, cronExpr string, policy string) config.Job {
	t.Helper()
	ctx := context.Background()
	app := config.DefaultApp()
	app.AppName, app.AppURL, app.BootstrapScript = "app", "file:///opt/app.tar.gz", "bin/start.sh"
	if err := s.CreateApp(ctx, app); err != nil {
		t.Fatal(err)
	}
	j := job("j", cronExpr, "UTC", policy != config.Skip)
	j.MisfirePolicy, j.ShardingTotalCount, j.CPUCount, j.MemoryMB, j.ScriptCommandLine = policy, 1, 0.1, 32, "true"
	j.Placement, j.JobShardingStrategyType, j.JobProperties = config.Spread, config.AvgAllocation, map[string]string{}
	if err := s.CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	return j
}

// changeCron updates the job's cron in ZooKeeper, as PUT /api/job/update does, and tells the
// leader's producer, as the leader's JobChanged does.
func changeCron(t *testing.T, l *zkLeader, j config.Job, cronExpr string) config.Job {
	t.Helper()
	j.Cron = cronExpr
	if _, err := l.store.UpdateJob(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	if err := l.p.Put(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	return j
}

// ledger renders the job's ledger in ZooKeeper ("outcome@seconds after t0[xcount]"), with its
// cron, last slot and change, and the job's ready count.
func ledger(t *testing.T, s *state.Store) (slots []string, l state.Ledger, ready int) {
	t.Helper()
	ctx := context.Background()
	l, _, err := s.FireLedger(ctx, "j")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range l.Fires {
		x := e.Outcome + "@" + e.Slot.Sub(t0).String()
		if e.Count != 1 {
			x += fmt.Sprintf("x%d", e.Count)
		}
		slots = append(slots, x)
	}
	r, err := s.ReadyOf(ctx, "j")
	if err != nil {
		t.Fatal(err)
	}
	return slots, l, r.Count
}

// explain, deferred before a wait, says what was seen when the wait failed the test.
func explain(t *testing.T, detail func() string) {
	if t.Failed() {
		t.Log(detail())
	}
}

func awaitLedger(t *testing.T, s *state.Store, what string, want []string, ready int) state.Ledger {
	t.Helper()
	var (
		got []string
		l   state.Ledger
		n   int
	)
	defer explain(t, func() string { return fmt.Sprintf("ledger %v, %d runs queued; want %v, %d", got, n, want, ready) })
	await.True(t, 10*time.Second, what, func() bool {
		got, l, n = ledger(t, s)
		return reflect.DeepEqual(got, want) && n == ready
	})
	return l
}

// Issue 19, over ZooKeeper: the cron changes, then the leader dies before the new cron's first
// slot; the next leader takes over later. The ledger took the change at once (its last slot
// still the old cron's real one), so the new leader resumes from the change with the new cron
// and decides, by fireAll, each of its slots it missed; none of the old cron's after the change.
// Before the fix the ledger kept the old cron until the new one fired: the new leader started
// from its own start and those slots were lost without a record.
func TestCronChangeThenTakeoverBeforeTheNewCronFiresOverZooKeeper(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	a, runA := newZKLeader(t, env, t0)
	j := zkJob(t, a.store, "*/10 * * * * ?", config.FireAll)
	runA()
	if err := a.p.Put(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	await.True(t, 5*time.Second, "producer waiting", func() bool { return a.clock.waiting() > 0 })
	a.clock.advance(10 * time.Second)
	awaitLedger(t, a.store, "the old cron's slot at 10 s", []string{"fired@10s"}, 1)

	await.True(t, 5*time.Second, "producer waiting", func() bool { return a.clock.waiting() > 0 })
	a.clock.advance(3 * time.Second) // 13 s
	j = changeCron(t, a, j, "*/2 * * * * ?")
	var l state.Ledger
	explained := func() string {
		return fmt.Sprintf("ledger cron %q last %v from %v: a leader taking over now starts afresh and loses the new cron's slots", l.Cron, l.Last, l.From)
	}
	func() {
		defer explain(t, explained)
		await.True(t, 10*time.Second, "the ledger takes the new cron from the change", func() bool {
			_, l, _ = ledger(t, a.store)
			return l.Cron == j.Cron && l.From.Equal(t0.Add(13*time.Second))
		})
	}()
	a.stop() // the leader dies at 13 s, before the new cron's first slot (14 s)

	b, runB := newZKLeader(t, env, t0.Add(21*time.Second))
	runB()
	j, err := b.store.Job(context.Background(), "j")
	if err != nil {
		t.Fatal(err)
	}
	if err := b.p.Put(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	l = awaitLedger(t, b.store, "the new cron's slots since the change, each fired once (fireAll)",
		[]string{"fired@10s", "fired@14s", "fired@16s", "fired@18s", "fired@20s"}, 5)
	if !l.Last.Equal(t0.Add(20*time.Second)) || l.Cron != j.Cron {
		t.Errorf("ledger last %v cron %q; want 20 s, the new cron", l.Last, l.Cron)
	}
	// On time from here.
	await.True(t, 5*time.Second, "producer waiting", func() bool { return b.clock.waiting() > 0 })
	b.clock.advance(time.Second)
	awaitLedger(t, b.store, "the slot at 22 s", []string{"fired@10s", "fired@14s", "fired@16s", "fired@18s", "fired@20s", "fired@22s"}, 6)
}

// Issue 19, over ZooKeeper: an old-cron slot is due but not yet decided when the change lands
// (the producer's timer running late); it is decided then, by the old cron, and recorded, and a
// later takeover resumes from the change with the new cron. Before the fix it was lost without
// a record.
func TestCronChangeDecidesTheDueOldSlotOverZooKeeper(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	a, runA := newZKLeader(t, env, t0)
	j := zkJob(t, a.store, "*/10 * * * * ?", config.FireOnce)
	if err := a.p.Put(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	// The timer is late for 10 s and 20 s when the change lands at 20.4 s.
	a.clock.advance(20400 * time.Millisecond)
	j = changeCron(t, a, j, "*/2 * * * * ?")
	runA()
	// 20 s is the slot on time; 10 s, jumped over, merges into its run (fireOnce).
	l := awaitLedger(t, a.store, "the old cron's due slots decided", []string{"merged@10s", "fired@20s"}, 1)
	if l.Cron != j.Cron || !l.Last.Equal(t0.Add(20*time.Second)) || !l.From.Equal(t0.Add(20400*time.Millisecond)) {
		t.Fatalf("ledger cron %q last %v from %v; want the new cron from 20.4 s, last 20 s", l.Cron, l.Last, l.From)
	}
	a.stop()

	// A takeover at 25 s: the new cron's 22 s and 24 s were missed, one catch-up run.
	b, runB := newZKLeader(t, env, t0.Add(25*time.Second))
	runB()
	if err := b.p.Put(context.Background(), j); err != nil {
		t.Fatal(err)
	}
	awaitLedger(t, b.store, "the new cron's missed slots caught up once", []string{"merged@10s", "fired@20s", "merged@22s", "fired@24s"}, 2)
}

// Issue 19, over ZooKeeper: a change of cron made through Change is written with the config,
// after the old cron's due slots, by the update itself: here the leader's writer never runs
// and the leader dies the moment the update returns. The next leader finds the new config
// beside a ledger that says when it took effect, and resumes from there. Before, the ledger
// learnt of the change from the writer, after the config was written: a leader dying in
// between left the new config beside a ledger of the old cron, and the next one started
// afresh, losing the slots in between without a record.
func TestCronChangeIsWrittenWithTheConfigOverZooKeeper(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	ctx := context.Background()
	a, _ := newZKLeader(t, env, t0) // its producer never runs
	j := zkJob(t, a.store, "*/10 * * * * ?", config.FireOnce)
	if err := a.p.Put(ctx, j); err != nil {
		t.Fatal(err)
	}
	a.clock.advance(20400 * time.Millisecond) // the old cron's 10 s and 20 s are due
	j.Cron = "*/2 * * * * ?"
	err := a.p.Change(ctx, j, func(from time.Time) error {
		_, err := a.store.UpdateJobFrom(ctx, j, from)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	a.stop()
	b, runB := newZKLeader(t, env, t0.Add(25*time.Second))
	slots, l, _ := ledger(t, b.store)
	if !reflect.DeepEqual(slots, []string{"merged@10s", "fired@20s"}) || l.Cron != j.Cron || !l.From.Equal(t0.Add(20400*time.Millisecond)) {
		t.Fatalf("ledger %v cron %q from %v; want the old cron's slots decided, then the new cron from 20.4 s", slots, l.Cron, l.From)
	}
	runB()
	if j, err = b.store.Job(ctx, "j"); err != nil || j.Cron != "*/2 * * * * ?" {
		t.Fatalf("the stored job: cron %q, %v; want the new cron", j.Cron, err)
	}
	if err := b.p.Put(ctx, j); err != nil {
		t.Fatal(err)
	}
	awaitLedger(t, b.store, "the new cron's missed slots caught up once", []string{"merged@10s", "fired@20s", "merged@22s", "fired@24s"}, 2)
}
