package lite_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/executor/job"
	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/lite"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// A job whose items could not all be written in one ZooKeeper transaction (the sharding, a
// claim of every item, their completion) is refused at New, and ignored when an operator
// writes it into ZooKeeper: otherwise every resharding would fail, "write too large", and no
// item would run again.
func TestAShardCountBeyondOneTransactionIsRefused(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	tr := inspect(t, env)
	nop := job.SimpleFunc(func(context.Context, job.ShardingContext) error { return nil })
	for _, n := range []int{6000, 10000} {
		_, err := lite.New(simpleJob("big", never, n), nop, lite.Options{Servers: env.Servers, Namespace: env.Namespace})
		if err == nil || !strings.Contains(err.Error(), "shardingTotalCount") {
			t.Errorf("New with %d items: %v; want an error naming shardingTotalCount", n, err)
		}
	}
	// Where the servers take larger requests (-Djute.maxbuffer), so do the instance's bounds.
	raised := lite.Options{Servers: env.Servers, Namespace: env.Namespace, JuteMaxBuffer: 8 << 20}
	if _, err := lite.New(simpleJob("big", never, 10000), nop, raised); err != nil {
		t.Errorf("New with 10000 items and an 8 MB jute.maxbuffer: %v", err)
	}
	raised.JuteMaxBuffer = 1 << 19
	if _, err := lite.New(simpleJob("big", never, 2), nop, raised); err == nil || !strings.Contains(err.Error(), "JuteMaxBuffer") {
		t.Errorf("New with a jute.maxbuffer below ZooKeeper's default: %v; want an error naming JuteMaxBuffer", err)
	}
	const name = "toobig"
	cfg := simpleJob(name, "* * * * * ?", 2)
	rec := &recorder{work: 50 * time.Millisecond}
	var log logSeen
	runInstance(t, newInstance(t, env.Servers, env.Namespace, "127.0.0.1@-@a", cfg, rec, func(o *lite.Options) { o.Logger = log.logger() }))
	awaitRuns(t, rec, 10*time.Second, "both items run", aFireAfter(0, 2))
	big := cfg
	big.ShardingTotalCount = 6000
	data, err := json.Marshal(big)
	if err != nil {
		t.Fatal(err)
	}
	set(t, tr, tr.Set(name+"/config", data, -1))
	// The change reaches the instance by a watch, at no set moment: wait for its word, then
	// for fires after it.
	await.True(t, 10*time.Second, "the instance says that it keeps its config", func() bool {
		return log.count("keeping the previous one") > 0
	})
	refused := time.Now().UnixMilli()
	awaitRuns(t, rec, 10*time.Second, "both items run after the change", aFireAfter(refused, 2))
	if exists(t, tr, name+"/sharding/2") {
		t.Error("item 2 exists: the instance took the config it should have refused")
	}
}

// The most items New accepts is the most whose transactions ZooKeeper takes: a job of that many
// shards, run by an instance with the longest id there may be, shards, runs every item, and
// shrinks to one item (deleting the others in the sharding's transaction).
func TestAJobOfTheMostItemsThatFitRuns(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	tr := inspect(t, env)
	name := strings.Repeat("j", 100) // the longest name: the fewest items fit, and the test is quicker
	most := lite.MaxShards(env.Namespace, name)
	t.Logf("at most %d items for job %q in namespace %q", most, name, env.Namespace)
	nop := job.SimpleFunc(func(context.Context, job.ShardingContext) error { return nil })
	if _, err := lite.New(simpleJob(name, never, most+1), nop, lite.Options{Servers: env.Servers, Namespace: env.Namespace}); err == nil ||
		!strings.Contains(err.Error(), fmt.Sprintf("at most %d", most)) {
		t.Errorf("New with %d items: %v; want an error saying at most %d", most+1, err, most)
	}
	cfg := simpleJob(name, never, most)
	cfg.Failover = false // fewer reads of every item
	id := "127.0.0.1@-@"
	id += strings.Repeat("i", 64-len(id))
	rec := &recorder{}
	x := runInstance(t, newInstance(t, env.Servers, env.Namespace, id, cfg, rec, nil))
	last := fmt.Sprintf("%s/sharding/%d/instance", name, most-1)
	await.True(t, 30*time.Second, "every item is given to the instance", func() bool {
		return exists(t, tr, last) && !exists(t, tr, name+"/leader/sharding/necessary")
	})
	x.in.Trigger()
	awaitRuns(t, rec, 60*time.Second, fmt.Sprintf("the %d items run", most), func(runs []run) bool {
		for _, items := range doneByFire(runs) {
			if len(items) == most {
				return true
			}
		}
		return false
	})
	cfg.ShardingTotalCount = 1
	data, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	set(t, tr, tr.Set(name+"/config", data, -1))
	await.True(t, 30*time.Second, "the other items are gone", func() bool {
		return !exists(t, tr, fmt.Sprintf("%s/sharding/%d", name, most-1)) && exists(t, tr, name+"/sharding/0/instance")
	})
}
