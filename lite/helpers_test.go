package lite_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/executor/job"
	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/lite"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/state/statetest"
)

func TestMain(m *testing.M) { os.Exit(statetest.Main(m)) }

const sessionTimeout = 2 * time.Second

// run is one item run as the job recorded it.
type run struct {
	inst       string
	item       int
	fire       int64
	start, end time.Time
	done       bool
	verStart   int32 // leader/sharding's version at the start and the end of the run
	verEnd     int32
}

// recorder is a SIMPLE job that records its runs; work is how long each item takes.
type recorder struct {
	mu   sync.Mutex // guards runs
	runs []*run
	work time.Duration
	tree *state.Tree // reads leader/sharding's version around each run, when set
	job  string
	// hold, when set, may return a channel that the run waits for (or for its cancellation)
	// before its work: a test holds runs where it wants them.
	hold func(inst string, item int, fire int64) <-chan struct{}
}

func (r *recorder) shardingVersion() int32 {
	if r.tree == nil {
		return 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := r.tree.Get(ctx, r.job+"/leader/sharding")
	if err != nil {
		return -1
	}
	return n.Version
}

func (r *recorder) Execute(ctx context.Context, sc job.ShardingContext) error {
	parts := strings.Split(sc.TaskID, "@-@")
	fire, _ := strconv.ParseInt(parts[2], 10, 64)
	x := &run{inst: strings.Join(parts[3:], "@-@"), item: sc.ShardingItem, fire: fire, start: time.Now(), verStart: r.shardingVersion()}
	r.mu.Lock()
	r.runs = append(r.runs, x)
	r.mu.Unlock()
	if r.hold != nil {
		if c := r.hold(x.inst, x.item, x.fire); c != nil {
			select {
			case <-c:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	select {
	case <-time.After(r.work):
	case <-ctx.Done():
		return ctx.Err()
	}
	v := r.shardingVersion()
	r.mu.Lock()
	x.done, x.end, x.verEnd = true, time.Now(), v
	r.mu.Unlock()
	return nil
}

// lingerJob is a recorder whose cancelled runs take linger to wind down (a job that cleans up
// after its context ends, as jobs do).
type lingerJob struct {
	*recorder
	linger time.Duration
}

func (j *lingerJob) Execute(ctx context.Context, sc job.ShardingContext) error {
	err := j.recorder.Execute(ctx, sc)
	if ctx.Err() != nil {
		time.Sleep(j.linger)
	}
	return err
}

var _ job.SimpleJob = (*lingerJob)(nil)

func (r *recorder) snapshot() []run {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]run, len(r.runs))
	for i, x := range r.runs {
		out[i] = *x
	}
	return out
}

// doneByFire counts the finished runs of each item per fire.
func doneByFire(runs []run) map[int64]map[int]int {
	out := map[int64]map[int]int{}
	for _, x := range runs {
		if !x.done {
			continue
		}
		if out[x.fire] == nil {
			out[x.fire] = map[int]int{}
		}
		out[x.fire][x.item]++
	}
	return out
}

// aFireAfter is a condition for awaitRuns: some fire after the given one had all n items done.
func aFireAfter(after int64, n int) func([]run) bool {
	return func(runs []run) bool {
		for f, items := range doneByFire(runs) {
			if f > after && len(items) == n {
				return true
			}
		}
		return false
	}
}

// checkOncePerFire fails when an item finished twice for one fire, or when a fire in
// [from, to] does not have every item finished exactly once.
func checkOncePerFire(t *testing.T, runs []run, items int, from, to int64) {
	t.Helper()
	byFire := doneByFire(runs)
	var fires []int64
	for f := range byFire {
		fires = append(fires, f)
	}
	sort.Slice(fires, func(i, j int) bool { return fires[i] < fires[j] })
	checked := 0
	for _, f := range fires {
		for item, n := range byFire[f] {
			if n > 1 {
				t.Errorf("fire %s: item %d finished %d times", fmtFire(f), item, n)
			}
		}
		if f < from || f > to {
			continue
		}
		checked++
		for i := range items {
			if byFire[f][i] != 1 {
				t.Errorf("fire %s: item %d finished %d times; want once (%v)", fmtFire(f), i, byFire[f][i], byFire[f])
			}
		}
	}
	if checked == 0 {
		t.Errorf("no fire in [%s, %s] to check", fmtFire(from), fmtFire(to))
	}
}

func fmtFire(ms int64) string { return time.UnixMilli(ms).Format("15:04:05.000") }

// instance is a lite instance running in a goroutine with its own ZooKeeper session.
type instance struct {
	in     *lite.Instance
	cancel context.CancelFunc
	done   chan struct{} // closed when Run has returned
	err    error         // what Run returned
}

func (i *instance) stop(t *testing.T) {
	t.Helper()
	i.cancel()
	select {
	case <-i.done:
		if i.err != nil {
			t.Errorf("%s: Run: %v", i.in.ID(), i.err)
		}
	case <-time.After(10 * time.Second):
		t.Errorf("%s: Run did not return within 10s of its context's end", i.in.ID())
	}
}

func start(t *testing.T, servers []string, ns, id string, cfg lite.JobConfig, j any) *instance {
	t.Helper()
	return startWith(t, servers, ns, id, cfg, j, sessionTimeout, nil, nil)
}

// startWith is start with the instance's own session timeout and, if not nil, a hook called
// just before the instance sends a claim, a taking or a failover flag, and an observer of its
// ZooKeeper requests.
func startWith(t *testing.T, servers []string, ns, id string, cfg lite.JobConfig, j any, session time.Duration, hook func(op string), observe func(op string, d time.Duration)) *instance {
	t.Helper()
	ip, _, _ := strings.Cut(id, "@-@")
	in, err := lite.New(cfg, j, lite.Options{Servers: servers, Namespace: ns, SessionTimeout: session,
		IP: ip, InstanceID: id, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if observe != nil {
		lite.SetObserveOp(in, observe)
	}
	if hook != nil {
		lite.SetBeforeMulti(in, hook)
	}
	return runInstance(t, in)
}

// runInstance runs a prepared instance until the test ends; Run returning an error before that fails
// the test.
func runInstance(t *testing.T, in *lite.Instance) *instance {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	x := &instance{in: in, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(x.done)
		x.err = in.Run(ctx)
		if x.err != nil && ctx.Err() == nil {
			t.Errorf("%s: Run: %v", in.ID(), x.err)
		}
	}()
	t.Cleanup(func() { cancel(); <-x.done })
	return x
}

func quietLogger() logrus.FieldLogger {
	l := logrus.New()
	l.SetLevel(logrus.WarnLevel)
	if os.Getenv("LITE_TEST_LOG") != "" {
		l.SetLevel(logrus.DebugLevel)
	} else {
		l.SetOutput(discard{})
	}
	return l
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// inspect opens a session of the test's own on the namespace.
func inspect(t *testing.T, env statetest.Env) *state.Tree {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tr, err := state.Dial(ctx, state.Config{Servers: env.Servers, Namespace: env.Namespace, SessionTimeout: 5 * time.Second, Logger: quietLogger()})
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(tr.Close)
	return tr
}

// assignment reads sharding/{item}/instance of every item: instance → items.
func assignment(t *testing.T, tr *state.Tree, jobName string, items int) map[string][]int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out := map[string][]int{}
	for i := range items {
		n, err := tr.Get(ctx, fmt.Sprintf("%s/sharding/%d/instance", jobName, i))
		if err != nil {
			t.Fatalf("read the sharding: %v", err)
		}
		if n.Exists {
			out[string(n.Data)] = append(out[string(n.Data)], i)
		}
	}
	return out
}

func exists(t *testing.T, tr *state.Tree, rel string) bool {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := tr.Get(ctx, rel)
	if err != nil && !errors.Is(err, state.ErrNotFound) {
		t.Fatalf("read %s: %v", rel, err)
	}
	return n.Exists
}

func set(t *testing.T, tr *state.Tree, op state.Op) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tr.Do(ctx, op); err != nil {
		t.Fatalf("write: %v", err)
	}
}

// awaitRuns waits until cond holds over the recorded runs.
func awaitRuns(t *testing.T, r *recorder, d time.Duration, what string, cond func([]run) bool) {
	t.Helper()
	await.Explained(t, d, what, func() bool { return cond(r.snapshot()) }, func() string { return lastFires(r.snapshot(), 4) })
}

// lastFires describes the runs of the last n fires: per fire (its time, ms), each run as
// instance:item, with "…" for one not done.
func lastFires(runs []run, n int) string {
	byFire := map[int64][]string{}
	var fires []int64
	for _, x := range runs {
		if byFire[x.fire] == nil {
			fires = append(fires, x.fire)
		}
		s := fmt.Sprintf("%s:%d", x.inst, x.item)
		if !x.done {
			s += "…"
		}
		byFire[x.fire] = append(byFire[x.fire], s)
	}
	sort.Slice(fires, func(i, j int) bool { return fires[i] < fires[j] })
	if len(fires) > n {
		fires = fires[len(fires)-n:]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "the runs of the last %d fires:", len(fires))
	for _, f := range fires {
		fmt.Fprintf(&b, " %d [%s]", f, strings.Join(byFire[f], " "))
	}
	return b.String()
}

// neverCron fires only in 2099: the tests hand fires to the instances themselves (lite.Fire).
const neverCron = "0 0 0 1 1 ? 2099"

// shutDownMidRun starts a (which leads) and b with cfg, two items, fires both, and shuts b down
// through ZooKeeper (its instances/ node deleted, README "Operations") while b runs item 0: the
// run is held until b stops and takes 500 ms to wind down, so its running marker goes, with
// b's session, well after b's node. It returns the inspector, the recorder and the fire.
func shutDownMidRun(t *testing.T, env statetest.Env, cfg lite.JobConfig) (*state.Tree, *recorder, int64) {
	t.Helper()
	tr := inspect(t, env)
	name := cfg.JobName
	const a, b = "127.0.0.1@-@a", "127.0.0.1@-@b"
	rec := holding(func(inst string, _ int) bool { return inst == b })
	j := &lingerJob{recorder: rec, linger: 500 * time.Millisecond}
	ia := start(t, env.Servers, env.Namespace, a, cfg, j)
	await.True(t, 5*time.Second, "a leads", func() bool { d, _ := data(t, tr, name+"/leader/election/instance"); return d == a })
	ib := start(t, env.Servers, env.Namespace, b, cfg, j)
	await.True(t, 10*time.Second, "b has item 0, a item 1", func() bool {
		got := assignment(t, tr, name, 2)
		return fmt.Sprint(got[a]) == "[1]" && fmt.Sprint(got[b]) == "[0]"
	})
	fire := time.Now().UnixMilli()
	lite.Fire(ia.in, fire)
	lite.Fire(ib.in, fire)
	awaitRuns(t, rec, 5*time.Second, "a ran item 1, b runs item 0", func(runs []run) bool {
		return doneByFire(runs)[fire][1] == 1 && exists(t, tr, name+"/sharding/0/running")
	})
	set(t, tr, tr.Delete(name+"/instances/"+b, -1)) // the operator's shutdown
	select {
	case <-ib.done:
	case <-time.After(10 * time.Second):
		t.Fatal("b did not shut down")
	}
	return tr, rec, fire
}

// holding is a recorder whose runs of the items held says are held until their instance stops
// (their context ends); the others take 20 ms.
func holding(held func(inst string, item int) bool) *recorder {
	forever := make(chan struct{})
	return &recorder{work: 20 * time.Millisecond, hold: func(inst string, item int, _ int64) <-chan struct{} {
		if held(inst, item) {
			return forever
		}
		return nil
	}}
}
