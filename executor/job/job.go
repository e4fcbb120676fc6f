// Package job is the SDK for SIMPLE and DATAFLOW jobs written in Go (SPEC §6.3). Users register
// their jobs under the names their job configs give as jobClass, then run the executor:
//
//	func main() {
//		job.Register("billing.close-day", job.SimpleFunc(closeDay))
//		job.RegisterDataflow("billing.export", exporter{})
//		executor.Main()
//	}
//
// The executor runs each shard with a context that is cancelled when the task is killed; a
// returned error or a panic is a job failure, which the scheduler does not fail over.
//
// Keep the init functions of an SDK executor's packages free of side effects (connections,
// files, goroutines): the executor re-executes its own binary as the supervisor of every
// SCRIPT run, and Go may initialize such a package in that process before the supervisor takes
// over. Do that work in main, before executor.Main, or in the jobs.
package job

import (
	"context"
	"fmt"
	"sort"
	"sync"

	"github.com/ejcloud/ejcloud/taskdata"
)

// ShardingContext tells a shard who it is.
type ShardingContext = taskdata.ShardingContext

type propertiesKey struct{}

// WithProperties returns ctx carrying a job's jobProperties (SPEC §3.2), for Properties. The
// executor gives every shard of an SDK job its job's.
func WithProperties(ctx context.Context, props map[string]string) context.Context {
	return context.WithValue(ctx, propertiesKey{}, props)
}

// Properties returns the jobProperties of the job whose shard ctx runs: the job config's
// object of strings, as registered (empty, never nil, when it has none). The map is the
// shard's own copy.
func Properties(ctx context.Context) map[string]string {
	props, _ := ctx.Value(propertiesKey{}).(map[string]string)
	out := make(map[string]string, len(props))
	for k, v := range props {
		out[k] = v
	}
	return out
}

// SimpleJob runs one shard.
type SimpleJob interface {
	Execute(ctx context.Context, sc ShardingContext) error
}

// SimpleFunc adapts a function to SimpleJob.
type SimpleFunc func(ctx context.Context, sc ShardingContext) error

// Execute calls f.
func (f SimpleFunc) Execute(ctx context.Context, sc ShardingContext) error { return f(ctx, sc) }

// DataflowJob fetches data and processes it. With the job's streamingProcess set, fetching
// repeats until Fetch returns no data or the context ends; otherwise there is one round.
type DataflowJob interface {
	Fetch(ctx context.Context, sc ShardingContext) ([]any, error)
	Process(ctx context.Context, sc ShardingContext, data []any) error
}

// RunDataflow runs a DataflowJob's shard: it fetches and processes, and with streaming repeats
// until a fetch returns nothing (or ctx ends).
func RunDataflow(ctx context.Context, j DataflowJob, sc ShardingContext, streaming bool) error {
	for {
		if ctx.Err() != nil {
			return nil // killed: no further round
		}
		data, err := j.Fetch(ctx, sc)
		if err != nil {
			return fmt.Errorf("fetch: %w", err)
		}
		if len(data) == 0 {
			return nil
		}
		if err := j.Process(ctx, sc, data); err != nil {
			return fmt.Errorf("process: %w", err)
		}
		if !streaming || ctx.Err() != nil {
			return nil
		}
	}
}

var registry = struct {
	sync.Mutex // guards the maps
	simple     map[string]SimpleJob
	dataflow   map[string]DataflowJob
}{simple: map[string]SimpleJob{}, dataflow: map[string]DataflowJob{}}

// Register makes j the SIMPLE job of that jobClass name. Registering a name twice, an empty
// name or a nil job is a programming error and panics, at start-up.
func Register(name string, j SimpleJob) {
	register(name, j == nil)
	registry.simple[name] = j
	registry.Unlock()
}

// RegisterDataflow makes j the DATAFLOW job of that jobClass name; it panics as Register does.
func RegisterDataflow(name string, j DataflowJob) {
	register(name, j == nil)
	registry.dataflow[name] = j
	registry.Unlock()
}

// register checks a registration and returns holding the registry lock.
func register(name string, isNil bool) {
	registry.Lock()
	_, s := registry.simple[name]
	_, d := registry.dataflow[name]
	switch {
	case name == "":
		registry.Unlock()
		panic("job: Register with an empty name")
	case isNil:
		registry.Unlock()
		panic(fmt.Sprintf("job: Register(%q) with a nil job", name))
	case s || d:
		registry.Unlock()
		panic(fmt.Sprintf("job: %q is registered twice", name))
	}
}

// Simple returns the SIMPLE job registered under name.
func Simple(name string) (SimpleJob, bool) {
	registry.Lock()
	defer registry.Unlock()
	j, ok := registry.simple[name]
	return j, ok
}

// Dataflow returns the DATAFLOW job registered under name.
func Dataflow(name string) (DataflowJob, bool) {
	registry.Lock()
	defer registry.Unlock()
	j, ok := registry.dataflow[name]
	return j, ok
}

// Names lists every registered name, sorted.
func Names() []string {
	registry.Lock()
	defer registry.Unlock()
	var out []string
	for n := range registry.simple {
		out = append(out, n)
	}
	for n := range registry.dataflow {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
