package lite_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/executor/job"
	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/lite"
	"github.com/ejcloud/ejcloud/state/statetest"
)

const never = "0 0 0 1 1 ? 2099" // only triggers run the job

// Trigger (API and TRIGGER flag), disabled items, disabled servers and the shutdown flag.
func TestTriggerDisabledItemsDisabledServerAndShutdown(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	tr := inspect(t, env)
	cfg := simpleJob("ops", never, 4)
	rec := &recorder{}
	a := start(t, env.Servers, env.Namespace, "127.0.0.1@-@a", cfg, rec)
	await.True(t, 5*time.Second, "a leads", func() bool { return exists(t, tr, "ops/leader/election/instance") })
	b := start(t, env.Servers, env.Namespace, "127.0.0.2@-@b", cfg, rec)
	await.True(t, 5*time.Second, "b registered", func() bool { return exists(t, tr, "ops/instances/127.0.0.2@-@b") })

	a.in.Trigger()
	b.in.Trigger()
	awaitRuns(t, rec, 10*time.Second, "every item runs once after the triggers", func(runs []run) bool {
		n := 0
		for _, items := range doneByFire(runs) {
			n += len(items)
		}
		return n == 4
	})
	want := map[string][]int{"127.0.0.2@-@b": {0, 1}, "127.0.0.1@-@a": {2, 3}}
	if got := assignment(t, tr, "ops", 4); !reflect.DeepEqual(got, want) {
		t.Fatalf("sharding = %v; want %v", got, want)
	}

	// A disabled item does not run; the TRIGGER flag runs the instance's other items and is
	// cleared.
	set(t, tr, tr.Create("ops/sharding/2/disabled", nil, false))
	before := len(rec.snapshot())
	set(t, tr, tr.Set("ops/instances/127.0.0.1@-@a", []byte("TRIGGER"), -1))
	awaitRuns(t, rec, 5*time.Second, "a runs item 3 on the TRIGGER flag", func(runs []run) bool {
		return len(runs) == before+1 && runs[before].done
	})
	if x := rec.snapshot()[before]; x.item != 3 {
		t.Errorf("the TRIGGER flag ran item %d; want 3", x.item)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if n, err := tr.Get(ctx, "ops/instances/127.0.0.1@-@a"); err != nil || len(n.Data) != 0 {
		t.Errorf("the TRIGGER flag: %q, %v; want it cleared", n.Data, err)
	}
	var record struct{ Fire int64 }
	if n, err := tr.Get(ctx, "ops/sharding/2"); err != nil || json.Unmarshal(n.Data, &record) != nil {
		t.Errorf("item 2's record: %q, %v", n.Data, err)
	} else if record.Fire == rec.snapshot()[before].fire {
		t.Errorf("disabled item 2 was claimed for the triggered fire")
	}

	// A disabled server gets no items at the next sharding.
	set(t, tr, tr.Set("ops/servers/127.0.0.2", []byte("DISABLED"), -1))
	await.True(t, 5*time.Second, "a disabled server's instance loses its items", func() bool {
		return reflect.DeepEqual(assignment(t, tr, "ops", 4), map[string][]int{"127.0.0.1@-@a": {0, 1, 2, 3}})
	})

	// Deleting an instance's node shuts it down; the leadership moves.
	set(t, tr, tr.Delete("ops/instances/127.0.0.1@-@a", -1))
	select {
	case <-a.done:
		if a.err != nil {
			t.Errorf("a: Run after the shutdown flag: %v", a.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a did not shut down within 5s of its instance node's deletion")
	}
	await.True(t, 5*time.Second, "b leads", func() bool {
		n, err := tr.Get(ctx, "ops/leader/election/instance")
		return err == nil && string(n.Data) == "127.0.0.2@-@b"
	})
	b.stop(t)
}

// With misfire, a fire that comes during a run runs after it; without, it is skipped, and runs
// start at their own fire time.
func TestMisfire(t *testing.T) {
	for _, misfire := range []bool{true, false} {
		t.Run(fmt.Sprint("misfire=", misfire), func(t *testing.T) {
			env := statetest.StartZooKeeper(t)
			cfg := simpleJob("slow", "* * * * * ?", 1)
			cfg.Misfire = misfire
			rec := &recorder{work: 1500 * time.Millisecond}
			a := start(t, env.Servers, env.Namespace, "127.0.0.1@-@a", cfg, rec)
			awaitRuns(t, rec, 10*time.Second, "three runs", func(runs []run) bool {
				return len(runs) >= 3 && runs[2].done
			})
			a.stop(t)
			runs := rec.snapshot()[:3]
			for i := 1; i < len(runs); i++ {
				prev, x := runs[i-1], runs[i]
				if x.fire <= prev.fire {
					t.Errorf("run %d is for fire %s, not after %s", i, fmtFire(x.fire), fmtFire(prev.fire))
				}
				late := x.start.Sub(time.UnixMilli(x.fire))
				if misfire && !time.UnixMilli(x.fire).Before(prev.end) {
					t.Errorf("misfire: run %d is for fire %s, which came after the previous run (ended %s); want the fire that came during it",
						i, fmtFire(x.fire), prev.end.Format("15:04:05.000"))
				}
				if !misfire && (late > 500*time.Millisecond || x.fire-prev.fire < 2000) {
					t.Errorf("no misfire: run %d for fire %s started %v late, %d ms after the previous fire", i, fmtFire(x.fire), late, x.fire-prev.fire)
				}
			}
		})
	}
}

// With misfire, an item another instance has taken over (failover) and still runs when its
// owner's next fire comes runs for that fire once the taker gives it back: "items still running
// elsewhere run once they end". The taker runs it only for the fire its instance did not finish
// (and its own last fire, the same here), so the owner's fire would otherwise be lost for it.
//
// q leads and owns item 0, p item 1, k item 2. k stops in the middle of fire 1; p takes item 2
// over, and its claim is held until q, the run of its item 0 let go, has resharded (q gets
// items 0 and 2). p's run of item 2 is held while q fires again: q runs item 0 for fire 2 at
// once and item 2 for fire 2 once p has given it back, each item once per fire.
func TestWithMisfireAnItemTakenOverRunsForTheOwnersFireOnceReleased(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	tr := inspect(t, env)
	const name = "misfiretaken"
	const k, p, q = "127.0.0.1@-@k", "127.0.0.1@-@p", "127.0.0.1@-@q"
	cfg := simpleJob(name, neverCron, 3)
	cfg.Misfire = true
	forever := make(chan struct{})
	qGate, pGate := make(chan struct{}), make(chan struct{})
	var f1 atomic.Int64
	rec := &recorder{work: 20 * time.Millisecond, hold: func(inst string, item int, fire int64) <-chan struct{} {
		switch {
		case inst == k:
			return forever // until k stops
		case inst == q && item == 0 && fire == f1.Load():
			return qGate
		case inst == p && item == 2:
			return pGate
		}
		return nil
	}}
	var armed atomic.Bool
	claimHeld, claimGo := make(chan struct{}), make(chan struct{})
	var goOnce sync.Once
	letClaimGo := func() { goOnce.Do(func() { close(claimGo) }) }
	iq := start(t, env.Servers, env.Namespace, q, cfg, rec)
	await.True(t, 5*time.Second, "q leads", func() bool { d, _ := data(t, tr, name+"/leader/election/instance"); return d == q })
	ip := startHooked(t, env.Servers, env.Namespace, p, cfg, rec, func(op string) {
		if op == "claim" && armed.CompareAndSwap(true, false) {
			close(claimHeld)
			<-claimGo
		}
	})
	t.Cleanup(letClaimGo) // before p stops (cleanups run last first)
	ik := start(t, env.Servers, env.Namespace, k, cfg, rec)
	await.True(t, 10*time.Second, "q:[0] p:[1] k:[2]", func() bool {
		got := assignment(t, tr, name, 3)
		return fmt.Sprint(got[q]) == "[0]" && fmt.Sprint(got[p]) == "[1]" && fmt.Sprint(got[k]) == "[2]"
	})
	fire1 := time.Now().UnixMilli()
	f1.Store(fire1)
	for _, x := range []*instance{iq, ip, ik} {
		lite.Fire(x.in, fire1)
	}
	awaitRuns(t, rec, 5*time.Second, "p ran item 1; q and k run items 0 and 2", func(runs []run) bool {
		return doneByFire(runs)[fire1][1] == 1 && exists(t, tr, name+"/sharding/0/running") && exists(t, tr, name+"/sharding/2/running")
	})
	armed.Store(true)
	ik.stop(t) // item 2's run for fire 1 is interrupted; p, idle, takes it over (q is busy)
	select {
	case <-claimHeld:
	case <-time.After(4 * sessionTimeout):
		t.Fatal("p did not take item 2 over")
	}
	if fo, _ := data(t, tr, name+"/sharding/2/failover"); fo != p {
		t.Fatalf("item 2's failover node names %q; want p", fo)
	}
	close(qGate) // q ends its run of item 0; it leads, and reshards before p's claim goes out
	await.True(t, 10*time.Second, "q has items 0 and 2", func() bool {
		return fmt.Sprint(assignment(t, tr, name, 3)[q]) == "[0 2]"
	})
	letClaimGo()
	awaitRuns(t, rec, 10*time.Second, "p runs item 2 for fire 1 (taken over)", func(runs []run) bool {
		for _, x := range runs {
			if x.inst == p && x.item == 2 && x.fire == fire1 && !x.done {
				return true
			}
		}
		return false
	})
	fire2 := fire1 + 1000
	lite.Fire(iq.in, fire2) // q's next fire comes while p runs item 2
	awaitRuns(t, rec, 5*time.Second, "q ran item 0 for fire 2, not waiting for item 2", func(runs []run) bool {
		return doneByFire(runs)[fire2][0] == 1
	})
	if n := doneByFire(rec.snapshot())[fire2][2]; n != 0 {
		t.Fatalf("item 2 finished %d times for fire 2 while p still ran it for fire 1", n)
	}
	close(pGate)
	awaitRuns(t, rec, 5*time.Second, "item 2 ran for fire 1", func(runs []run) bool { return doneByFire(runs)[fire1][2] == 1 })
	awaitRuns(t, rec, 3*sessionTimeout, "item 2 ran for q's fire 2 once p gave it back", func(runs []run) bool {
		return doneByFire(runs)[fire2][2] == 1
	})
	runs := rec.snapshot()
	var p1End, q2Start time.Time
	for _, x := range runs {
		switch {
		case x.item == 2 && x.fire == fire1 && x.done:
			p1End = x.end
		case x.item == 2 && x.fire == fire2:
			q2Start = x.start
			if x.inst != q {
				t.Errorf("item 2 ran for fire 2 on %s; want q, its owner", x.inst)
			}
		}
	}
	if q2Start.Before(p1End) {
		t.Errorf("item 2's run for fire 2 started at %s, before its run for fire 1 ended at %s", q2Start.Format("15:04:05.000"), p1End.Format("15:04:05.000"))
	}
	for f, items := range doneByFire(runs) {
		for item, n := range items {
			if n > 1 {
				t.Errorf("fire %s: item %d finished %d times", fmtFire(f), item, n)
			}
		}
	}
}

// batches is a streaming DATAFLOW job: each item fetches three batches, then nothing.
type batches struct {
	mu        sync.Mutex // guards fetched and processed
	fetched   map[int]int
	processed map[int][]any
}

func (b *batches) Fetch(ctx context.Context, sc job.ShardingContext) ([]any, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := b.fetched[sc.ShardingItem]
	if n == 3 {
		return nil, nil
	}
	b.fetched[sc.ShardingItem] = n + 1
	return []any{fmt.Sprintf("%d.%d", sc.ShardingItem, n)}, nil
}

func (b *batches) Process(ctx context.Context, sc job.ShardingContext, data []any) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.processed[sc.ShardingItem] = append(b.processed[sc.ShardingItem], data...)
	return nil
}

func TestDataflowAndScriptJobs(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	df := &batches{fetched: map[int]int{}, processed: map[int][]any{}}
	cfg := lite.JobConfig{JobName: "flow", JobType: lite.Dataflow, Cron: never, ShardingTotalCount: 2,
		StreamingProcess: true, MonitorExecution: true}
	a := start(t, env.Servers, env.Namespace, "127.0.0.1@-@a", cfg, df)
	a.in.Trigger()
	want := map[int][]any{0: {"0.0", "0.1", "0.2"}, 1: {"1.0", "1.1", "1.2"}}
	await.True(t, 5*time.Second, "the dataflow job streams every batch", func() bool {
		df.mu.Lock()
		defer df.mu.Unlock()
		return reflect.DeepEqual(df.processed, want)
	})

	dir := t.TempDir()
	script := lite.JobConfig{JobName: "script", JobType: lite.Script, Cron: never, ShardingTotalCount: 2,
		ShardingItemParameters: "0=zero,1=it's one", JobParameter: "p",
		ScriptCommandLine: fmt.Sprintf(`printf '%%s' "$EJCLOUD_SHARDING_PARAMETER" > %s/param-$EJCLOUD_SHARDING_ITEM; printf '%%s'`, dir) +
			fmt.Sprintf(` > %s/ctx-$EJCLOUD_SHARDING_ITEM`, dir), MonitorExecution: true}
	s := start(t, env.Servers, env.Namespace, "127.0.0.1@-@a", script, nil)
	s.in.Trigger()
	for item, param := range []string{"zero", "it's one"} {
		var got []byte
		await.True(t, 5*time.Second, fmt.Sprintf("the script runs for item %d", item), func() bool {
			var err error
			got, err = os.ReadFile(filepath.Join(dir, fmt.Sprint("ctx-", item)))
			return err == nil && len(got) > 0
		})
		var sc job.ShardingContext
		if err := json.Unmarshal(got, &sc); err != nil || sc.ShardingItem != item || sc.ShardingParameter != param || sc.JobParameter != "p" {
			t.Errorf("item %d: the context argument %q (%v); want item %d, parameter %q", item, got, err, item, param)
		}
		if p, err := os.ReadFile(filepath.Join(dir, fmt.Sprint("param-", item))); err != nil || string(p) != param {
			t.Errorf("item %d: EJCLOUD_SHARDING_PARAMETER %q, %v; want %q", item, p, err, param)
		}
	}
	a.stop(t)
	s.stop(t)
}

// A new shardingTotalCount in ZooKeeper reaches the running instances: the next fire reshards,
// new items run from that fire on, and items beyond a smaller count go.
func TestShardingTotalCountChange(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	tr := inspect(t, env)
	cfg := simpleJob("count", "* * * * * ?", 2)
	rec := &recorder{}
	a := start(t, env.Servers, env.Namespace, "127.0.0.1@-@a", cfg, rec)
	b := start(t, env.Servers, env.Namespace, "127.0.0.1@-@b", cfg, rec)
	await.True(t, 10*time.Second, "two items on two instances", func() bool { return len(assignment(t, tr, "count", 2)) == 2 })
	update := func(n int) int64 {
		c := cfg
		c.ShardingTotalCount = n
		data, _ := json.Marshal(c)
		set(t, tr, tr.Set("count/config", data, -1))
		return time.Now().UnixMilli()
	}
	grown := update(3)
	awaitRuns(t, rec, 5*time.Second, "item 2 runs", func(runs []run) bool {
		for _, x := range runs {
			if x.item == 2 && x.done {
				return true
			}
		}
		return false
	})
	var first int64
	for _, x := range rec.snapshot() {
		if x.item == 2 && (first == 0 || x.fire < first) {
			first = x.fire
		}
	}
	if first <= grown {
		t.Errorf("the new item 2 ran for fire %s, before the count changed at %s", fmtFire(first), fmtFire(grown))
	}
	shrunk := update(1)
	await.True(t, 5*time.Second, "items 1 and 2 are gone", func() bool {
		return !exists(t, tr, "count/sharding/1") && !exists(t, tr, "count/sharding/2")
	})
	awaitRuns(t, rec, 5*time.Second, "a fire after the shrink", func(runs []run) bool {
		for f := range doneByFire(runs) {
			if f > shrunk+1000 {
				return true
			}
		}
		return false
	})
	a.stop(t)
	b.stop(t)
	for f, items := range doneByFire(rec.snapshot()) {
		if f > shrunk+1000 && (len(items) != 1 || items[0] != 1) {
			t.Errorf("fire %s after the shrink ran %v; want item 0 once", fmtFire(f), items)
		}
	}
}

// Without monitorExecution a run writes nothing to ZooKeeper, and each fire runs each item once.
func TestWithoutMonitorExecution(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	tr := inspect(t, env)
	cfg := lite.JobConfig{JobName: "quiet", JobType: lite.Simple, Cron: "* * * * * ?", ShardingTotalCount: 2}
	rec := &recorder{}
	a := start(t, env.Servers, env.Namespace, "127.0.0.1@-@a", cfg, rec)
	awaitRuns(t, rec, 10*time.Second, "three fires", func(runs []run) bool { return len(doneByFire(runs)) >= 3 })
	a.stop(t)
	for f, items := range doneByFire(rec.snapshot()) {
		for item, n := range items {
			if n != 1 {
				t.Errorf("fire %s: item %d ran %d times", fmtFire(f), item, n)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, item := range []string{"0", "1"} {
		if n, err := tr.Get(ctx, "quiet/sharding/"+item); err != nil || len(n.Data) != 0 {
			t.Errorf("item %s: record %q, %v; want none without monitorExecution", item, n.Data, err)
		}
	}
	if _, err := lite.New(lite.JobConfig{JobName: "x", JobType: lite.Simple, Cron: never, ShardingTotalCount: 1, Failover: true},
		job.SimpleFunc(func(context.Context, job.ShardingContext) error { return nil }),
		lite.Options{Servers: env.Servers, Namespace: env.Namespace}); err == nil {
		t.Error("New accepted failover without monitorExecution")
	}
}
