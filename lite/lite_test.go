package lite_test

import (
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/lite"
	"github.com/ejcloud/ejcloud/state/statetest"
)

func simpleJob(name, cronExpr string, items int) lite.JobConfig {
	return lite.JobConfig{JobName: name, JobType: lite.Simple, Cron: cronExpr, ShardingTotalCount: items,
		MonitorExecution: true, Failover: true}
}

// Three instances, nine items: AVG_ALLOCATION's [0,1,2] [3,4,5] [6,7,8] over the instances in
// Elastic-Job-Lite's (descending) order, and every item runs exactly once per fire.
func TestThreeInstancesNineItemsAvgAllocationOncePerFire(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	tr := inspect(t, env)
	cfg := simpleJob("avg", "* * * * * ?", 9)
	rec := &recorder{work: 100 * time.Millisecond}
	ids := []string{"127.0.0.1@-@a", "127.0.0.1@-@b", "127.0.0.1@-@c"}
	var ins []*instance
	for _, id := range ids {
		ins = append(ins, start(t, env.Servers, env.Namespace, id, cfg, rec))
	}
	want := map[string][]int{ids[2]: {0, 1, 2}, ids[1]: {3, 4, 5}, ids[0]: {6, 7, 8}}
	await.True(t, 10*time.Second, "the AVG_ALLOCATION sharding", func() bool {
		return reflect.DeepEqual(assignment(t, tr, "avg", 9), want)
	})
	sharded := time.Now().UnixMilli()
	var from int64
	awaitRuns(t, rec, 10*time.Second, "three fires on the final sharding", func(runs []run) bool {
		var fires []int64
		for f, items := range doneByFire(runs) {
			if f > sharded && len(items) == 9 {
				fires = append(fires, f)
			}
		}
		sort.Slice(fires, func(i, j int) bool { return fires[i] < fires[j] })
		if len(fires) >= 3 {
			from = fires[0]
		}
		return len(fires) >= 3
	})
	last := time.Now().Add(-time.Second).UnixMilli() // fires in flight when stopping are not judged
	for _, x := range ins {
		x.stop(t)
	}
	runs := rec.snapshot()
	checkOncePerFire(t, runs, 9, from, last)
	for _, x := range runs {
		if x.fire >= from && !contains(want[x.inst], x.item) {
			t.Errorf("fire %s: item %d ran on %s, which was not given it", fmtFire(x.fire), x.item, x.inst)
		}
	}
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
