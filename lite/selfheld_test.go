package lite_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/lite"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// logSeen is a logger, quiet as quietLogger, that keeps the messages logged at warning level
// and above, so that a test can wait for what an instance says (a lost lease, a config kept).
type logSeen struct {
	mu   sync.Mutex // guards msgs
	msgs []string
}

func (l *logSeen) Levels() []logrus.Level {
	return []logrus.Level{logrus.PanicLevel, logrus.FatalLevel, logrus.ErrorLevel, logrus.WarnLevel}
}

func (l *logSeen) Fire(e *logrus.Entry) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, e.Message)
	return nil
}

// count says how many messages containing text were logged.
func (l *logSeen) count(text string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.msgs {
		if strings.Contains(m, text) {
			n++
		}
	}
	return n
}

func (l *logSeen) logger() logrus.FieldLogger {
	lg := logrus.New()
	lg.SetLevel(logrus.WarnLevel)
	if os.Getenv("LITE_TEST_LOG") != "" {
		lg.SetLevel(logrus.DebugLevel)
	} else {
		lg.SetOutput(discard{})
	}
	lg.AddHook(l)
	return lg
}

// newInstance makes an instance as startWith does, with the options opt changes.
func newInstance(t *testing.T, servers []string, ns, id string, cfg lite.JobConfig, j any, opt func(*lite.Options)) *lite.Instance {
	t.Helper()
	ip, _, _ := strings.Cut(id, "@-@")
	o := lite.Options{Servers: servers, Namespace: ns, SessionTimeout: sessionTimeout, IP: ip, InstanceID: id, Logger: quietLogger()}
	if opt != nil {
		opt(&o)
	}
	in, err := lite.New(cfg, j, o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return in
}

// raise raises the resharding flag, as an instance coming or going does.
func raise(t *testing.T, tr *state.Tree, job string) {
	t.Helper()
	op := tr.Create(job+"/leader/sharding/necessary", nil, false)
	if exists(t, tr, job+"/leader/sharding/necessary") {
		op = tr.Set(job+"/leader/sharding/necessary", nil, -1)
	}
	set(t, tr, op)
}

// owner is the session that owns an ephemeral node, 0 when it is missing.
func owner(t *testing.T, tr *state.Tree, rel string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n, err := tr.Get(ctx, rel)
	if err != nil {
		t.Fatalf("read %s: %v", rel, err)
	}
	return n.Owner
}

// A leader whose resharding is cut short while it waits for another instance's run (the server
// stopped hearing from it: its runs and its work stop) and whose connection comes back within
// its session must not leave its own processing node behind: its claims would fail on it and
// wait for it to go, and nobody but that waiting leader ever deletes it; the others wait for
// the resharding it marks, and no item of the job would run anywhere again.
func TestALeaderCutOffWhileReshardingDoesNotWaitOnItsOwnProcessingNode(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	tr := inspect(t, env)
	p := statetest.NewProxy(t, env.Servers[0])
	const name = "selfheld"
	const a, b = "127.0.0.1@-@a", "127.0.0.1@-@b"
	const aSession = 9 * time.Second
	cfg := simpleJob(name, "* * * * * ?", 2)
	var holdB atomic.Bool
	releaseB := make(chan struct{})
	rec := &recorder{work: 50 * time.Millisecond, hold: func(inst string, item int, fire int64) <-chan struct{} {
		if inst == b && holdB.Load() {
			return releaseB
		}
		return nil
	}}
	var log logSeen
	var armed atomic.Bool
	claimed := make(chan struct{}) // closed when a, armed, sends a claim
	ia := newInstance(t, []string{p.Addr}, env.Namespace, a, cfg, rec, func(o *lite.Options) {
		o.SessionTimeout, o.Logger = aSession, log.logger()
	})
	lite.SetBeforeMulti(ia, func(op string) {
		if op == "claim" && armed.CompareAndSwap(true, false) {
			close(claimed)
		}
	})
	runInstance(t, ia)
	await.True(t, 5*time.Second, "a leads", func() bool { d, _ := data(t, tr, name+"/leader/election/instance"); return d == a })
	start(t, env.Servers, env.Namespace, b, cfg, rec)
	await.True(t, 10*time.Second, "b has item 0, a item 1", func() bool {
		got := assignment(t, tr, name, 2)
		return fmt.Sprint(got[a]) == "[1]" && fmt.Sprint(got[b]) == "[0]"
	})
	session := owner(t, tr, name+"/instances/"+a)
	held := time.Now()
	holdB.Store(true)
	var heldFire int64
	awaitRuns(t, rec, 5*time.Second, "b is held in a run of item 0", func(runs []run) bool {
		for _, x := range runs {
			if x.inst == b && x.item == 0 && x.start.After(held) && !x.done {
				heldFire = x.fire
				return true
			}
		}
		return false
	})
	raise(t, tr, name)
	// At its next fire a reshards: it marks processing and waits for b's run to end.
	await.True(t, 5*time.Second, "a marks processing and waits for b's run", func() bool {
		return owner(t, tr, name+"/leader/sharding/processing") == session
	})
	// No fire follows, so that a, back, goes through its catching up on the fire it was
	// resharding for (which claims item 1, owed for that fire) rather than through a fire, whose
	// own resharding would take processing over.
	setCron(t, tr, cfg, never)
	p.DropRequests()
	p.DropReplies()
	await.True(t, aSession, "a stops its work: the server has not heard from it", func() bool {
		return log.count("ZooKeeper session lost") > 0
	})
	armed.Store(true)
	p.Restore() // before the server expires a's session
	// b's run goes on while a, back, catches up: the resharding that b's end lets a make would
	// delete processing, whatever a's claim did.
	select {
	case <-claimed:
	case <-time.After(aSession):
		t.Fatal("a, back, did not claim item 1 for the fire it was resharding for")
	}
	holdB.Store(false)
	close(releaseB)
	awaitRuns(t, rec, 3*aSession, "a runs item 1, owed for the fire it was resharding for", func(runs []run) bool {
		for _, x := range runs {
			if x.inst == a && x.item == 1 && x.fire > heldFire && x.done {
				return true
			}
		}
		return false
	})
	setCron(t, tr, cfg, "* * * * * ?")
	released := time.Now().UnixMilli()
	awaitRuns(t, rec, 3*aSession, "both items run at later fires", aFireAfter(released, 2))
	if now := owner(t, tr, name+"/instances/"+a); now != session {
		t.Fatalf("a's instance node is owned by session %x, was %x: the session expired, and the test did not test a return within it", now, session)
	}
	p.Cut()
	p.Restore()
}
