package lite

import "time"

// SetBeforeMulti makes in call f just before it sends a claim ("claim"), a taking ("take") or
// a failover flag ("flag"), on the goroutine that sends it; set it before Run.
func SetBeforeMulti(in *Instance, f func(op string)) { in.beforeMulti = f }

// SetObserveOp makes in's ZooKeeper session tell f of every request (state.Config.ObserveOp);
// set it before Run.
func SetObserveOp(in *Instance, f func(op string, d time.Duration)) { in.observeOp = f }
