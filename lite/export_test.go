package lite

import (
	"sort"
	"time"

	"github.com/ejcloud/ejcloud/state"
)

// SetBeforeMulti makes in call f just before it sends a claim ("claim"), a taking ("take") or
// a failover flag ("flag"), and in an election before it takes the latch ("elect") and before
// it creates the leader's node ("lead"), on the goroutine that does it; set it before Run.
func SetBeforeMulti(in *Instance, f func(op string)) { in.beforeMulti = f }

// SetObserveOp makes in's ZooKeeper session tell f of every request (state.Config.ObserveOp);
// set it before Run.
func SetObserveOp(in *Instance, f func(op string, d time.Duration)) { in.observeOp = f }

// SetIdle makes in's runner call f each time it has done all its work and, no wake-up waiting,
// is about to wait for one, with the last cron fire it ran; set it before Run.
func SetIdle(in *Instance, f func(lastFire int64)) { in.idle = f }

// Fire hands in a cron fire labelled ms, as its ticker does when the cron comes.
func Fire(in *Instance, ms int64) { in.fire(ms) }

// RoundTrips counts the ZooKeeper requests of in's session so far; call it only once in has
// reached its runner (SetIdle said so), which comes after Run opened the session.
func RoundTrips(in *Instance) uint64 { return in.tree.RoundTrips() }

// MaxShards is the largest shard count whose transactions fit in one ZooKeeper request, for a
// job in a namespace: the most New accepts.
func MaxShards(namespace, jobName string) int {
	t, err := state.Offline(state.Config{Namespace: namespace})
	if err != nil {
		panic(err)
	}
	return sort.Search(10001, func(n int) bool { return n > 0 && writesFit(t, jobName, n) != nil }) - 1
}
