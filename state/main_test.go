package state_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/state/statetest"
)

func TestMain(m *testing.M) { os.Exit(statetest.Main(m)) }

// testLogger records warnings so that tests can see what the store reported.
type testLogger struct {
	*logrus.Logger
	hook *recordHook
}

type recordHook struct{ entries chan *logrus.Entry }

func (h *recordHook) Levels() []logrus.Level { return []logrus.Level{logrus.WarnLevel} }
func (h *recordHook) Fire(e *logrus.Entry) error {
	select {
	case h.entries <- e:
	default:
	}
	return nil
}

func newLogger() testLogger {
	l := logrus.New()
	l.SetOutput(discard{})
	h := &recordHook{entries: make(chan *logrus.Entry, 100)}
	l.AddHook(h)
	return testLogger{l, h}
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// open connects a Store to the test's namespace on the shared server. With
// EJCLOUD_TEST_MIRROR set (make test runs the package both ways) it is a mirrored view: every
// test of the store then also tests the leader's model.
func open(t *testing.T, env statetest.Env, mutate ...func(*state.Config)) *state.Store {
	t.Helper()
	s := openPlain(t, env, mutate...)
	if os.Getenv("EJCLOUD_TEST_MIRROR") == "" {
		return s
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	m, err := s.Mirror(ctx, nil)
	if err != nil {
		t.Fatalf("Mirror: %v", err)
	}
	return m
}

// openPlain connects a Store without a mirror.
func openPlain(t *testing.T, env statetest.Env, mutate ...func(*state.Config)) *state.Store {
	t.Helper()
	cfg := state.Config{Servers: env.Servers, Namespace: env.Namespace, SessionTimeout: 2 * time.Second, Logger: newLogger().Logger}
	for _, m := range mutate {
		m(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := state.Connect(ctx, cfg)
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}

func newStore(t *testing.T, mutate ...func(*state.Config)) *state.Store {
	return open(t, statetest.StartZooKeeper(t), mutate...)
}

func testApp(name string) config.App {
	a := config.DefaultApp()
	a.AppName, a.AppURL, a.BootstrapScript = name, "file:///opt/app.tar.gz", "bin/start.sh"
	return a
}

func testJob(name, app string) config.Job {
	return config.Job{JobName: name, AppName: app, JobType: config.Script, JobExecutionType: config.Transient,
		Cron: "0/5 * * * * ?", TimeZone: "UTC", ShardingTotalCount: 3, CPUCount: 0.1, MemoryMB: 32,
		ScriptCommandLine: "true", Placement: config.Spread, JobShardingStrategyType: config.AvgAllocation,
		JobProperties: map[string]string{}}
}

func mustIs(t *testing.T, err, target error, what string) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("%s: error = %v; want %v", what, err, target)
	}
}

func must(t *testing.T, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}
