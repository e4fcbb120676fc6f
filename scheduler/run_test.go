package scheduler

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/internal/freeport"
	"github.com/ejcloud/ejcloud/state/statetest"
)

func TestMain(m *testing.M) { os.Exit(statetest.Main(m)) }

func quietLog() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	if os.Getenv("EJCLOUD_TEST_LOG") != "" {
		l.SetOutput(os.Stderr)
		l.SetLevel(logrus.DebugLevel)
	}
	return l
}

func testConfig(t testing.TB, env statetest.Env) Config {
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	cfg := Flags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	cfg.ZKServers, cfg.ZKNamespace, cfg.Hostname = env.Servers, env.Namespace, "127.0.0.1"
	cfg.HTTPAddr = freeAddr(t)
	cfg.MesosURL = noMesos(t) // never the default URL: whatever listens there is not the test's
	return *cfg
}

// noMesos is a master URL the test owns at which no Mesos answers: every call gets a 503.
func noMesos(t testing.TB) string {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no Mesos master here (test)", http.StatusServiceUnavailable)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func freeAddr(t testing.TB) string { return freeport.For(t) }

type running struct {
	cfg  Config
	stop context.CancelFunc
	done chan error
	inst *instance
}

func start(t testing.TB, cfg Config) *running { return startWith(t, cfg, hooks{}) }

func startWith(t testing.TB, cfg Config, h hooks) *running {
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{cfg: cfg, stop: cancel, done: make(chan error, 1)}
	started := make(chan *instance, 1)
	h.started = func(i *instance) { started <- i }
	go func() { r.done <- run(ctx, cfg, quietLog(), h) }()
	select {
	case r.inst = <-started:
	case err := <-r.done:
		r.done <- err
	case <-time.After(30 * time.Second):
		t.Fatal("scheduler did not start")
	}
	t.Cleanup(func() { cancel(); <-r.done })
	return r
}

var noRedirect = &http.Client{
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	Timeout:       5 * time.Second,
}

func get(t testing.TB, addr, path string) (*http.Response, map[string]any) {
	t.Helper()
	resp, err := noRedirect.Get("http://" + addr + path)
	if err != nil {
		return nil, nil
	}
	defer resp.Body.Close()
	var body map[string]any
	json.NewDecoder(resp.Body).Decode(&body)
	return resp, body
}

// isLeader tells a leader from a standby by /readyz, which names the role.
// leaderAndStandby starts two instances on a ZooKeeper of their own: a, once it leads, then b,
// once it serves.
func leaderAndStandby(t *testing.T) (a, b *running) {
	env := statetest.StartZooKeeper(t)
	a = start(t, testConfig(t, env))
	await.True(t, 20*time.Second, "a leads", func() bool { return isLeader(t, a.cfg.HTTPAddr) })
	b = start(t, testConfig(t, env))
	await.True(t, 20*time.Second, "b serves /healthz", func() bool {
		resp, _ := get(t, b.cfg.HTTPAddr, "/healthz")
		return resp != nil && resp.StatusCode == http.StatusOK
	})
	return a, b
}

func isLeader(t *testing.T, addr string) bool {
	_, body := get(t, addr, "/readyz")
	return body["leader"] == true
}

func TestOneLeaderAndStandbyRedirectsToIt(t *testing.T) {
	t.Parallel()
	a, b := leaderAndStandby(t)
	if isLeader(t, b.cfg.HTTPAddr) {
		t.Fatal("two leaders")
	}
	resp, _ := get(t, b.cfg.HTTPAddr, "/api/job/jobs?x=1")
	if resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != "http://"+a.cfg.HTTPAddr+"/api/job/jobs?x=1" {
		t.Fatalf("standby answered %d Location %q; want 307 to the leader", resp.StatusCode, resp.Header.Get("Location"))
	}
	resp, body := get(t, a.cfg.HTTPAddr, "/readyz")
	if resp.StatusCode != http.StatusServiceUnavailable || body["subscribed"] != false {
		t.Fatalf("/readyz on a leader not subscribed to Mesos = %d %v; want 503", resp.StatusCode, body)
	}

	a.stop()
	if err := <-a.done; err != nil {
		t.Fatalf("Run returned %v after a clean stop; want nil", err)
	}
	a.done <- nil // for the cleanup
	await.True(t, 10*time.Second, "b takes over after a stops", func() bool { return isLeader(t, b.cfg.HTTPAddr) })
}

func TestRunFailsWithOneLineWhenZooKeeperIsUnreachable(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, statetest.Env{Servers: []string{freeAddr(t)}, Namespace: "x"})
	cfg.ZKConnectTimeout = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := Run(ctx, cfg, quietLog())
	if err == nil || !strings.HasPrefix(err.Error(), "cannot reach ZooKeeper at "+cfg.ZKServers[0]) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Run with no ZooKeeper = %v; want one line naming the servers", err)
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	base := testConfig(t, statetest.Env{Servers: []string{"127.0.0.1:1"}, Namespace: "x"})
	dir := t.TempDir()
	secret, empty := filepath.Join(dir, "secret"), filepath.Join(dir, "empty")
	os.WriteFile(secret, []byte("s3cret\n"), 0o600)
	os.WriteFile(empty, []byte("\n"), 0o600)
	for _, tc := range []struct {
		name    string
		change  func(*Config)
		wantErr string
	}{
		{"loopback without credentials is fine", func(c *Config) {}, ""},
		{"non-loopback without credentials is refused", func(c *Config) { c.HTTPAddr = "0.0.0.0:8899" }, "--auth-root"},
		{"non-loopback with credentials is fine (over plain HTTP only with --insecure-http: tls_test.go)", func(c *Config) {
			c.HTTPAddr, c.AuthRoot, c.InsecureHTTP = "0.0.0.0:8899", "root:pw", true
		}, ""},
		{"credentials need a colon", func(c *Config) { c.AuthRoot, c.AuthGuest = "root:pw", "guest" }, "--auth-guest"},
		{"an empty password", func(c *Config) { c.AuthRoot = "admin:" }, "--auth-root"},
		{"an empty user", func(c *Config) { c.AuthRoot = ":pw" }, "--auth-root"},
		{"a guest without a root user", func(c *Config) { c.AuthGuest = "guest:look" }, "--auth-guest needs --auth-root"},
		{"queue size must be positive", func(c *Config) { c.JobStateQueueSize = 0 }, "--job-state-queue-size"},
		{"start-up timeout must not be negative", func(c *Config) { c.MesosStartupTimeout = -time.Second }, "--mesos-startup-timeout"},
		{"a start-up timeout of 0 is not a minute", func(c *Config) { c.MesosStartupTimeout = 0 }, "--mesos-startup-timeout must be positive"},
		{"a session timeout of 0", func(c *Config) { c.ZKSessionTimeout = 0 }, "--zk-session-timeout"},
		{"a negative session timeout", func(c *Config) { c.ZKSessionTimeout = -time.Second }, "--zk-session-timeout"},
		{"an empty host name", func(c *Config) { c.Hostname = "" }, "--hostname"},
		{"a raised jute.maxbuffer", func(c *Config) { c.ZKJuteMaxBuffer = 4 << 20 }, ""},
		{"a jute.maxbuffer below ZooKeeper's default", func(c *Config) { c.ZKJuteMaxBuffer = 1 << 19 }, "--zk-jute-maxbuffer"},
		{"a jute.maxbuffer of 0", func(c *Config) { c.ZKJuteMaxBuffer = 0 }, "--zk-jute-maxbuffer"},
		{"a jute.maxbuffer beyond the most", func(c *Config) { c.ZKJuteMaxBuffer = 1 << 30 }, "--zk-jute-maxbuffer"},
		{"a retention of 0 is not 30 days", func(c *Config) { c.EventTraceRetention = 0 }, "--event-trace-retention"},
		{"a task lease shorter than the unreachable timeout", func(c *Config) { c.TaskLease, c.UnreachableTimeout = 6*time.Second, 10*time.Second }, ""},
		{"a task lease as long as the unreachable timeout", func(c *Config) { c.TaskLease, c.UnreachableTimeout = 10*time.Second, 10*time.Second }, "--task-lease"},
		{"a negative task lease", func(c *Config) { c.TaskLease = -time.Second }, "--task-lease"},
		{"a list of masters", func(c *Config) { c.MesosURL = "http://m1:5050, https://m2:5050" }, ""},
		{"a master without a scheme", func(c *Config) { c.MesosURL = "m1:5050" }, "--mesos-url"},
		{"a master URL with credentials", func(c *Config) { c.MesosURL = "http://m1:5050,http://principal:s3cret@m2:5050" }, "--mesos-principal and --mesos-secret-file"},
		{"a master URL whose credentials do not parse", func(c *Config) { c.MesosURL = "http://principal:s3cret%zz@m2:5050/" }, `"http://…@m2:5050/" is not`},
		{"a zk:// password holding a '/'", func(c *Config) { c.MesosURL = "zk://u:s3/cret@z1:2181/mesos" }, "may not contain '/'"},
		{"masters in ZooKeeper", func(c *Config) { c.MesosURL = "zk://z1:2181,z2:2181/mesos" }, ""},
		{"masters in ZooKeeper with credentials", func(c *Config) { c.MesosURL = "zk://u:p@z1:2181/mesos" }, ""},
		{"zk:// without a path", func(c *Config) { c.MesosURL = "zk://z1:2181" }, "--mesos-url"},
		{"zk:// beside http://", func(c *Config) { c.MesosURL = "http://m1:5050,zk://z1:2181/mesos" }, "--mesos-url"},
		{"no master", func(c *Config) { c.MesosURL = " , " }, "--mesos-url"},
		{"a secret is read without its newline", func(c *Config) { c.MesosPrincipal, c.MesosSecretFile = "ejcloud", secret }, ""},
		{"a secret needs its principal", func(c *Config) { c.MesosSecretFile = secret }, "--mesos-secret-file needs --mesos-principal"},
		{"a missing secret file", func(c *Config) { c.MesosPrincipal, c.MesosSecretFile = "ejcloud", filepath.Join(dir, "nope") }, "--mesos-secret-file"},
		{"an empty secret file", func(c *Config) { c.MesosPrincipal, c.MesosSecretFile = "ejcloud", empty }, "is empty"},
		{"an SQLite event trace", func(c *Config) { c.EventTraceDB = "sqlite:///var/lib/ejcloud/trace.db" }, ""},
		{"a PostgreSQL event trace", func(c *Config) { c.EventTraceDB = "postgres://u:p@db:5432/ejcloud" }, ""},
		{"a MySQL event trace", func(c *Config) { c.EventTraceDB = "mysql://u:p@tcp(db:3306)/ejcloud" }, ""},
		{"an event trace DSN without a scheme", func(c *Config) { c.EventTraceDB = "trace.db" }, "--event-trace-db"},
		{"an event trace in an unknown database", func(c *Config) { c.EventTraceDB = "oracle://db/x" }, "--event-trace-db"},
		{"a negative retention", func(c *Config) { c.EventTraceRetention = -time.Hour }, "--event-trace-retention"},
		{"an executor binary that is there", func(c *Config) { c.ExecutorBinary = secret }, ""},
		{"an executor binary that is not there", func(c *Config) { c.ExecutorBinary = filepath.Join(dir, "nope") }, "--executor-binary " + filepath.Join(dir, "nope")},
		{"an executor binary that is a directory", func(c *Config) { c.ExecutorBinary = dir }, "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.change(&c)
			err := c.Validate()
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Validate() = %v; want %q", err, tc.wantErr)
			}
			if err != nil && (strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "s3")) {
				t.Fatalf("Validate() = %v: it shows the secret", err)
			}
			if c.MesosSecretFile == secret && tc.wantErr == "" && c.mesosSecret != "s3cret" {
				t.Fatalf("secret %q; want s3cret", c.mesosSecret)
			}
		})
	}
}

// The default --executor-binary, beside the scheduler's binary, may be absent (apps whose
// packages carry their executor never fetch it): a warning, not a refusal.
func TestAMissingDefaultExecutorBinaryIsWarnedAbout(t *testing.T) {
	t.Parallel()
	c := testConfig(t, statetest.Env{Servers: []string{"127.0.0.1:1"}, Namespace: "x"})
	if c.ExecutorBinary != defaultExecutor() {
		t.Fatalf("the default --executor-binary is %q; want %q", c.ExecutorBinary, defaultExecutor())
	}
	if _, err := os.Stat(c.ExecutorBinary); err == nil {
		t.Fatalf("%s exists beside the test binary: the test needs it absent", c.ExecutorBinary)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("Validate() = %v; want a warning only", err)
	}
	if !slices.ContainsFunc(c.Warnings(), func(w string) bool { return strings.Contains(w, "GET /executor/ejcloud-executor answers 404") }) {
		t.Fatalf("warnings %q; want one about the missing executor binary", c.Warnings())
	}
}

func TestEventTraceFlags(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want time.Duration
		bad  bool
	}{
		{nil, 30 * 24 * time.Hour, false},
		{[]string{"--event-trace-retention", "7d"}, 7 * 24 * time.Hour, false},
		{[]string{"--event-trace-retention", "1d12h"}, 36 * time.Hour, false},
		{[]string{"--event-trace-retention", "90m"}, 90 * time.Minute, false},
		{[]string{"--event-trace-retention", "week"}, 0, true},
		{[]string{"--event-trace-retention", "xd"}, 0, true},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		c := Flags(fs)
		err := fs.Parse(tc.args)
		if tc.bad != (err != nil) || !tc.bad && c.EventTraceRetention != tc.want {
			t.Errorf("%v: retention %v, error %v; want %v (error: %v)", tc.args, c.EventTraceRetention, err, tc.want, tc.bad)
		}
	}
}

// An event trace database that does not answer at start-up does not keep the scheduler from
// starting and leading (a history must not stop the jobs): the history answers 503 meanwhile.
func TestRunStartsAndLeadsWhileTheEventTraceDatabaseIsDown(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, statetest.StartZooKeeper(t))
	cfg.EventTraceDB = "sqlite://" + filepath.Join(t.TempDir(), "no-such-dir", "trace.db")
	r := start(t, cfg)
	select {
	case err := <-r.done:
		t.Fatalf("Run with the event trace database down returned %v; want it running", err)
	default:
	}
	await.True(t, 20*time.Second, "it leads", func() bool { return isLeader(t, cfg.HTTPAddr) })
	if resp, body := get(t, cfg.HTTPAddr, "/api/job/events/executions"); resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("the history with its database down answered %v %v; want 503", resp, body)
	}
}

func TestRunFailsWithOneLineWhenMesosIsUnreachable(t *testing.T) {
	t.Parallel()
	cfg := testConfig(t, statetest.StartZooKeeper(t))
	cfg.MesosURL = "http://" + freeAddr(t)
	cfg.MesosStartupTimeout = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := Run(ctx, cfg, quietLog())
	if err == nil || !strings.HasPrefix(err.Error(), "cannot reach Mesos at "+cfg.MesosURL) || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Run with no Mesos = %v; want one line naming the master", err)
	}
}

// With --mesos-url zk://… and no master published there, the start-up budget runs out with one
// line that says so, and the ZooKeeper password of the URL is not in it.
func TestRunFailsWithOneLineWhenNoMasterLeadsInZooKeeper(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	cfg := testConfig(t, env)
	cfg.MesosURL = "zk://mesos:s3cret@" + strings.Join(env.Servers, ",") + "/" + env.Namespace + "-mesos"
	cfg.MesosStartupTimeout = time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := Run(ctx, cfg, quietLog())
	if err == nil || !strings.HasPrefix(err.Error(), "cannot reach Mesos at zk://mesos:…@") || !strings.Contains(err.Error(), "no Mesos master leads") ||
		strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "\n") {
		t.Fatalf("Run with no master in ZooKeeper = %v; want one line saying no master leads, without the password", err)
	}
}
