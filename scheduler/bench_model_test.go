package scheduler

import (
	"context"
	"testing"

	"github.com/ejcloud/ejcloud/state"
)

// benchModel is the store the benchmarks' leader works through: the leader's model, as in
// production (state.Store.Mirror).
func benchModel(b testing.TB, ctx context.Context, base *state.Store) *state.Store {
	m, err := base.Mirror(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	return m
}
