package job

import (
	"context"
	"fmt"
	"slices"
	"testing"
)

type flow struct{}

func (flow) Fetch(context.Context, ShardingContext) ([]any, error) { return nil, nil }
func (flow) Process(context.Context, ShardingContext, []any) error { return nil }

var runs int

func TestRegistry(t *testing.T) {
	runs++ // the registry is global: each run of the test (-count) registers its own names
	simple, dataflow := fmt.Sprintf("a%d.simple", runs), fmt.Sprintf("a%d.flow", runs)
	Register(simple, SimpleFunc(func(context.Context, ShardingContext) error { return nil }))
	RegisterDataflow(dataflow, flow{})
	if _, ok := Simple(simple); !ok {
		t.Fatal("registered SIMPLE job not found")
	}
	if _, ok := Dataflow(dataflow); !ok {
		t.Fatal("registered DATAFLOW job not found")
	}
	if _, ok := Simple(dataflow); ok {
		t.Fatal("a DATAFLOW job must not be found as SIMPLE")
	}
	if got := Names(); !slices.Contains(got, simple) || !slices.Contains(got, dataflow) || !slices.IsSorted(got) {
		t.Fatalf("Names() = %v; want a sorted list with %s and %s", got, simple, dataflow)
	}
	for name, f := range map[string]func(){
		"duplicate": func() { RegisterDataflow(simple, flow{}) },
		"empty":     func() { Register("", SimpleFunc(nil)) },
		"nil":       func() { Register("x", nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s registration did not panic", name)
				}
			}()
			f()
		}()
	}
}

type counting struct{ fetches, processes int }

func (c *counting) Fetch(context.Context, ShardingContext) ([]any, error) {
	c.fetches++
	return []any{1}, nil
}

func (c *counting) Process(context.Context, ShardingContext, []any) error {
	c.processes++
	return nil
}

// A DATAFLOW job killed before its first round fetches nothing, streaming or not.
func TestAKilledDataflowJobFetchesNothing(t *testing.T) {
	for _, streaming := range []bool{false, true} {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		var c counting
		if err := RunDataflow(ctx, &c, ShardingContext{}, streaming); err != nil || c.fetches != 0 || c.processes != 0 {
			t.Errorf("streaming %v: %v, %d fetches, %d processes; want none", streaming, err, c.fetches, c.processes)
		}
	}
}
