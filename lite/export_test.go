package lite

// SetBeforeMulti makes in call f just before it sends a claim ("claim") or a taking ("take"),
// on the runner's goroutine; set it before Run.
func SetBeforeMulti(in *Instance, f func(op string)) { in.beforeMulti = f }
