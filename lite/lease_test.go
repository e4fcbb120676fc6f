package lite_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/executor/job"
	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// leaseJob records when each run starts and when a held run sees its context end.
type leaseJob struct {
	mu       sync.Mutex // guards the fields below
	starts   map[string]time.Time
	held     map[string]bool // the runs that wait for their cancellation
	stopped  map[string]time.Time
	holdItem int // the item whose runs wait for their cancellation, -1 for none
	holdInst string
}

func (j *leaseJob) key(inst string, item int, fire int64) string {
	return fmt.Sprintf("%s/%d/%d", inst, item, fire)
}

func (j *leaseJob) Execute(ctx context.Context, sc job.ShardingContext) error {
	parts := strings.Split(sc.TaskID, "@-@")
	inst := strings.Join(parts[3:], "@-@")
	var fire int64
	fmt.Sscan(parts[2], &fire)
	k := j.key(inst, sc.ShardingItem, fire)
	j.mu.Lock()
	j.starts[k] = time.Now()
	hold := inst == j.holdInst && sc.ShardingItem == j.holdItem
	if hold {
		j.held[k] = true
	}
	j.mu.Unlock()
	if !hold {
		select {
		case <-time.After(50 * time.Millisecond):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	<-ctx.Done()
	j.mu.Lock()
	j.stopped[k] = time.Now()
	j.mu.Unlock()
	return ctx.Err()
}

// ranSince reports whether a run whose key starts with prefix started after since.
func (j *leaseJob) ranSince(prefix string, since time.Time) bool {
	j.mu.Lock()
	defer j.mu.Unlock()
	for k, at := range j.starts {
		if strings.HasPrefix(k, prefix) && at.After(since) {
			return true
		}
	}
	return false
}

// earliest returns the earliest time in m of a key with the prefix.
func (j *leaseJob) earliest(m map[string]time.Time, prefix string) (time.Time, bool) {
	j.mu.Lock()
	defer j.mu.Unlock()
	var first time.Time
	for k, at := range m {
		if strings.HasPrefix(k, prefix) && (first.IsZero() || at.Before(first)) {
			first = at
		}
	}
	return first, !first.IsZero()
}

// startPair starts instance a of a two-item job through the proxy, with session timeout
// aSession, and b on bServers, and waits until a leads and holds item 1, b item 0.
func startPair(t *testing.T, env statetest.Env, tr *state.Tree, p *statetest.Proxy, bServers []string, name, a, b string, aSession time.Duration) *leaseJob {
	t.Helper()
	cfg := simpleJob(name, "* * * * * ?", 2)
	j := &leaseJob{starts: map[string]time.Time{}, held: map[string]bool{}, stopped: map[string]time.Time{}, holdItem: -1}
	startWith(t, []string{p.Addr}, env.Namespace, a, cfg, j, aSession, nil, nil)
	await.True(t, 5*time.Second, "a leads", func() bool { d, _ := data(t, tr, name+"/leader/election/instance"); return d == a })
	start(t, bServers, env.Namespace, b, cfg, j)
	await.True(t, 10*time.Second, "b has item 0, a item 1", func() bool {
		got := assignment(t, tr, name, 2)
		return fmt.Sprint(got[a]) == "[1]" && fmt.Sprint(got[b]) == "[0]"
	})
	return j
}

// heldRun holds inst's runs of item until they are cancelled, and returns the key of one
// that is held now, with the item's running marker in place. Only a held run: a run that
// started before the hold is a 50 ms run that never records a cancellation.
func (j *leaseJob) heldRun(t *testing.T, tr *state.Tree, name, inst string, item int) string {
	t.Helper()
	j.mu.Lock()
	j.holdInst, j.holdItem = inst, item
	j.mu.Unlock()
	prefix := fmt.Sprintf("%s/%d/", inst, item)
	var key string
	await.True(t, 5*time.Second, fmt.Sprintf("%s runs item %d until cancelled", inst, item), func() bool {
		j.mu.Lock()
		defer j.mu.Unlock()
		for k := range j.held {
			if strings.HasPrefix(k, prefix) {
				if _, done := j.stopped[k]; !done && exists(t, tr, fmt.Sprintf("%s/sharding/%d/running", name, item)) {
					key = k
					return true
				}
			}
		}
		return false
	})
	return key
}

// An instance cut off silently (the network drops everything, so its client notices only
// when its reads time out) stops its runs before the server can expire its session, so that
// the survivor that takes its items over never runs one at the same time: the run is
// cancelled two thirds of a session timeout after the server last heard from the instance,
// not a session timeout after the client noticed.
func TestSilentlyPartitionedInstanceStopsItsRunsBeforeItsItemsAreTakenOver(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	tr := inspect(t, env)
	p := statetest.NewProxy(t, env.Servers[0])
	const name = "lease"
	const a, b = "127.0.0.1@-@a", "127.0.0.1@-@b"
	const aSession = 3 * time.Second
	j := startPair(t, env, tr, p, env.Servers, name, a, b, aSession)
	key := j.heldRun(t, tr, name, a, 1)
	p.DropRequests()
	p.DropReplies()
	cut := time.Now()
	var taken time.Time
	// b takes item 1 over, for the interrupted fire or, when the resharding that follows a's
	// expiry comes first, for b's own latest fire.
	await.True(t, 3*aSession, "b runs item 1", func() bool {
		var ok bool
		taken, ok = j.earliest(j.starts, b+"/1/")
		return ok
	})
	var stopped time.Time
	await.True(t, 3*aSession, "a's run of item 1 is cancelled", func() bool {
		var ok bool
		stopped, ok = j.earliest(j.stopped, key)
		return ok
	})
	t.Logf("a cut off at %s; its run cancelled %v later; b took item 1 over %v later",
		cut.Format("15:04:05.000"), stopped.Sub(cut).Round(time.Millisecond), taken.Sub(cut).Round(time.Millisecond))
	if !stopped.Before(taken) {
		t.Errorf("a's run of item 1 was cancelled %v after b started it: both ran it at once", stopped.Sub(taken).Round(time.Millisecond))
	}
	if d := stopped.Sub(cut); d > aSession*2/3+500*time.Millisecond {
		t.Errorf("a's run was cancelled %v after the cut; want within two thirds of its session timeout (%v)", d, aSession*2/3)
	}
	p.Cut()
	p.Restore()
}

// An instance whose runs were stopped because the server stopped hearing from it, and whose
// connection comes back before its session expires, carries on with the same session: the
// running markers of the stopped runs (ephemeral, the session's) must go with the runs, or the
// resharding its return asks for waits on them for as long as the process lives, and no item
// of the job runs anywhere.
func TestAnInstanceBackBeforeItsSessionExpiresLeavesNoStaleRunningMarker(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	tr := inspect(t, env)
	p := statetest.NewProxy(t, env.Servers[0])
	const name = "stall"
	const a, b = "127.0.0.1@-@a", "127.0.0.1@-@b"
	const aSession = 9 * time.Second
	j := startPair(t, env, tr, p, env.Servers, name, a, b, aSession)
	owner := func() int64 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		n, err := tr.Get(ctx, name+"/instances/"+a)
		if err != nil || !n.Exists {
			return 0
		}
		return n.Owner
	}
	session := owner()
	key := j.heldRun(t, tr, name, a, 1)
	p.DropRequests()
	p.DropReplies()
	await.True(t, aSession, "a's run of item 1 is cancelled", func() bool { _, ok := j.earliest(j.stopped, key); return ok })
	p.Restore() // before the server expires a's session (two thirds of it have passed)
	j.mu.Lock()
	j.holdItem = -1
	j.mu.Unlock()
	back := time.Now()
	await.True(t, 3*aSession, "both items run again, a's session having lived on", func() bool {
		return j.ranSince(a+"/", back) && j.ranSince(b+"/", back) && !exists(t, tr, name+"/leader/sharding/processing")
	})
	if now := owner(); now != session {
		t.Fatalf("a's instance node is owned by session %x, was %x: the session expired, and the test did not test a return within it", now, session)
	}
	p.Cut()
	p.Restore()
}

// An item an instance took over from a dead one, and whose run it stopped because the server
// had not heard from it (its session living on), is run again and given back when the
// connection returns: nobody else would run it while its failover node names a live
// instance, not even the owner the next resharding gives it to.
func TestAnItemTakenOverIsRunAgainWhenTheTakersSessionLivesOn(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	tr := inspect(t, env)
	pa := statetest.NewProxy(t, env.Servers[0])
	pb := statetest.NewProxy(t, env.Servers[0])
	const name = "retake"
	const a, b = "127.0.0.1@-@a", "127.0.0.1@-@b"
	const aSession = 9 * time.Second
	cfg := simpleJob(name, "* * * * * ?", 2)
	j := startPair(t, env, tr, pa, []string{pb.Addr}, name, a, b, aSession)
	// b's run of item 0 is interrupted by its death, so that a, taking the item over, runs it
	// for that fire; no fire follows, so that only failover runs item 0.
	j.heldRun(t, tr, name, b, 0)
	setCron(t, tr, cfg, never)
	j.mu.Lock()
	j.holdInst = a // b's held run waits for its cancellation still
	j.mu.Unlock()
	pb.Cut()
	await.True(t, 3*sessionTimeout, "b's session expires", func() bool { return !exists(t, tr, name+"/instances/"+b) })
	key := j.heldRun(t, tr, name, a, 0)
	if f, _ := data(t, tr, name+"/sharding/0/failover"); f != a {
		t.Fatalf("item 0's failover node names %q; want a, which took it over", f)
	}
	pa.DropRequests()
	pa.DropReplies()
	await.True(t, aSession, "a's run of item 0 is cancelled", func() bool { _, ok := j.earliest(j.stopped, key); return ok })
	pa.Restore() // before the server expires a's session
	j.mu.Lock()
	j.holdItem = -1
	j.mu.Unlock()
	back := time.Now()
	await.True(t, 3*aSession, "a runs item 0 again and gives it back", func() bool {
		_, taken := data(t, tr, name+"/sharding/0/failover")
		return !taken && j.ranSince(a+"/0/", back)
	})
	setCron(t, tr, cfg, "* * * * * ?")
	startWith(t, env.Servers, env.Namespace, b, cfg, j, sessionTimeout, nil, nil)
	returned := time.Now()
	await.True(t, 20*time.Second, "b is back and both items run", func() bool {
		return (j.ranSince(a+"/0/", returned) || j.ranSince(b+"/0/", returned)) &&
			(j.ranSince(a+"/1/", returned) || j.ranSince(b+"/1/", returned))
	})
}
