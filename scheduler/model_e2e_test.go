package scheduler

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/encoding"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state/statetest"
)

func getBody(t *testing.T, addr, path string) string {
	t.Helper()
	resp, err := noRedirect.Get("http://" + addr + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", path, resp.StatusCode, b)
	}
	return string(b)
}

// The leader answers from its model: reading the API and /metrics costs ZooKeeper nothing.
func TestLeaderReadsMakeNoZooKeeperRequest(t *testing.T) {
	t.Parallel()
	s := newSystem(t, 1)
	addr := s.sched.cfg.HTTPAddr
	s.register(s.scriptJob("quiet", 2, ""))
	await.True(t, 5*time.Second, "the model has the job", func() bool {
		return strings.Contains(getBody(t, addr, "/api/job/jobs"), `"quiet"`)
	})
	// The registration's multi fired watches beyond the job's (on the stop marks, the disable
	// markers), which the model reads again after it shows the job: a request of its own,
	// which the window below must not count.
	ld, err := s.sched.inst.leaderState()
	if err != nil {
		t.Fatal(err)
	}
	if err := ld.store.Caught(context.Background()); err != nil {
		t.Fatal(err)
	}
	paths := []string{"/metrics", "/api/job/jobs", "/api/job/jobs/quiet", "/api/job/quiet/disable", "/api/job/quiet/failure", "/api/app/list", "/api/app/app",
		"/api/job/tasks/running", "/api/job/tasks/ready", "/api/job/tasks/failover", "/api/job/statistics/jobs/executionType",
		"/api/job/unplaced", "/api/job/quiet/fires", "/api/job/quiet/next"}
	before := s.sched.inst.store.RoundTrips()
	for range 3 {
		for _, p := range paths {
			getBody(t, addr, p)
		}
	}
	if trips := s.sched.inst.store.RoundTrips() - before; trips != 0 {
		t.Fatalf("%d reads of the API and /metrics made %d ZooKeeper requests; want none", 3*len(paths), trips)
	}
	if m := getBody(t, addr, "/metrics"); !strings.Contains(m, `ejcloud_queue_depth{queue="running"} 0`) {
		t.Fatalf("/metrics lacks the queue depths:\n%s", m)
	}
}

// What an operator changes in ZooKeeper behind the scheduler's back (zkCli, an older tool)
// reaches the leader's model within a second: a job's config and its disable marker.
func TestOthersChangesReachTheLeaderWithinASecond(t *testing.T) {
	t.Parallel()
	s := newSystem(t, 1)
	addr := s.sched.cfg.HTTPAddr
	ctx := context.Background()
	j := s.scriptJob("edited", 2, "")
	s.register(j)
	await.True(t, time.Second, "the new job", func() bool {
		return strings.Contains(getBody(t, addr, "/api/job/jobs"), `"edited"`)
	})
	j.ShardingTotalCount = 5
	if _, err := s.store.UpdateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	await.True(t, time.Second, "the changed config", func() bool {
		return strings.Contains(getBody(t, addr, "/api/job/jobs/edited"), `"shardingTotalCount":5`)
	})
	if err := s.store.DisableJob(ctx, "edited"); err != nil {
		t.Fatal(err)
	}
	await.True(t, time.Second, "the disable marker", func() bool {
		return strings.TrimSpace(getBody(t, addr, "/api/job/edited/disable")) == "true"
	})
	if _, err := s.store.EnableJob(ctx, "edited"); err != nil {
		t.Fatal(err)
	}
	await.True(t, time.Second, "the marker's removal", func() bool {
		return strings.TrimSpace(getBody(t, addr, "/api/job/edited/disable")) == "false"
	})
}

// stuckMesos subscribes at once, then never answers a call nor sends an event until release
// is closed, and ignores cancellation meanwhile: the leader's work blocks in its first call,
// as it can in an HTTP call or a ZooKeeper handshake to a hung server.
type stuckMesos struct{ release chan struct{} }

func (m stuckMesos) subscribe(context.Context, string, string) (*subscription, error) {
	return &subscription{caller: m, resp: m, frameworkID: "fw-stuck", heartbeat: time.Hour}, nil
}

func (m stuckMesos) Call(context.Context, *scheduler.Call) (mesos.Response, error) {
	<-m.release
	return nil, errors.New("released")
}

func (m stuckMesos) Decode(encoding.Unmarshaler) error {
	<-m.release
	return io.EOF
}

func (m stuckMesos) Close() error { return nil }

// Leadership is what ZooKeeper says, at once: cut off from ZooKeeper — one server, or every
// member of an ensemble — for longer than its session timeout, the leader answers /readyz 503
// within a second of losing the leadership, even while its work is blocked in a call that does
// not return.
func TestReadyzStopsSayingLeaderOnceTheLeadershipEnds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) statetest.Env
	}{
		{"one server", func(t *testing.T) statetest.Env { return statetest.StartZooKeeper(t) }},
		{"an ensemble of 3", func(t *testing.T) statetest.Env {
			return statetest.Env{Servers: statetest.StartEnsemble(t, 3).Servers(), Namespace: "ejcloud"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) { readyzFollowsTheLeadership(t, tc.start(t)) })
	}
}

func readyzFollowsTheLeadership(t *testing.T, env statetest.Env) {
	var proxies []*statetest.Proxy
	cfg := testConfig(t, env)
	cfg.ZKServers, cfg.ZKSessionTimeout = nil, 2*time.Second
	for _, srv := range env.Servers {
		p := statetest.NewProxy(t, srv)
		proxies = append(proxies, p)
		cfg.ZKServers = append(cfg.ZKServers, p.Addr)
	}
	stuck := stuckMesos{release: make(chan struct{})}
	s := startWith(t, cfg, hooks{mesos: stuck})
	t.Cleanup(func() { close(stuck.release) }) // before the scheduler stops (cleanups run last first)
	await.True(t, 30*time.Second, "leads and is subscribed", func() bool {
		resp, _ := get(t, cfg.HTTPAddr, "/readyz")
		return resp != nil && resp.StatusCode == http.StatusOK
	})
	for _, p := range proxies {
		p.Cut()
	}
	// The leadership ends one session timeout into the disconnection (state.Leadership).
	await.True(t, cfg.ZKSessionTimeout+time.Second, "/readyz 503", func() bool {
		resp, _ := get(t, cfg.HTTPAddr, "/readyz")
		return resp != nil && resp.StatusCode == http.StatusServiceUnavailable
	})
	if leader, _ := s.inst.status(); leader {
		t.Fatal("the instance still counts itself leader")
	}
}
