package lite

// SetBeforeMulti makes in call f just before it sends a claim ("claim"), a taking ("take") or
// a failover flag ("flag"), on the goroutine that sends it; set it before Run.
func SetBeforeMulti(in *Instance, f func(op string)) { in.beforeMulti = f }
