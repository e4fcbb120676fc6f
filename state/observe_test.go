package state_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// Config.ObserveOp is told of every ZooKeeper request, by operation, so the scheduler's
// latency histogram counts exactly the round trips the store makes: through a plain store,
// through the leader's model (its load, its watches and its writes) and the election.
func TestObserveOpSeesEveryRequest(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]int{}
	s := openPlain(t, statetest.StartZooKeeper(t), func(c *state.Config) {
		c.ObserveOp = func(op string, d time.Duration) {
			if d < 0 {
				t.Errorf("%s: negative latency %v", op, d)
			}
			mu.Lock()
			seen[op]++
			mu.Unlock()
		}
	})
	ctx := ctxT(t)
	must(t, s.CreateApp(ctx, testApp("app")), "CreateApp")
	if _, err := s.App(ctx, "app"); err != nil {
		t.Fatalf("App: %v", err)
	}
	must(t, s.AddReady(ctx, "job", false), "AddReady")
	l, err := s.Campaign(ctx, "127.0.0.1:1")
	must(t, err, "Campaign")
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m, err := l.Store().Mirror(mctx, nil)
	must(t, err, "Mirror")
	must(t, m.CreateJob(ctx, testJob("job", "app")), "CreateJob through the model")
	must(t, l.Confirm(ctx), "Confirm")
	cancel()
	l.Resign(context.Background())

	// The model's goroutines may still be finishing a request begun before the cancel.
	await.True(t, 10*time.Second, "every request the store counted was observed", func() bool {
		mu.Lock()
		defer mu.Unlock()
		total := 0
		for _, n := range seen {
			total += n
		}
		return uint64(total) == s.RoundTrips()
	})
	mu.Lock()
	defer mu.Unlock()
	for _, op := range []string{"create", "get", "exists", "children", "multi"} {
		if seen[op] == 0 {
			t.Errorf("no %q request observed: %v", op, seen)
		}
	}
}
