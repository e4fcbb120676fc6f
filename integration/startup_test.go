package integration

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// A start-up error of the scheduler is one line on stderr and exit status 1 (SPEC §2),
// whether it is a flag, a variable or a value; --help exits 0.
func TestSchedulerStartUpErrorsAreOneLine(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
		env  string
		says string
	}{
		{name: "unknown flag", args: []string{"--bogus"}, says: "-bogus"},
		{name: "bad variable", env: "EJCLOUD_FAILOVER_TIMEOUT=soon", says: "EJCLOUD_FAILOVER_TIMEOUT"},
		{name: "bad log level", args: []string{"--log-level", "verbose"}, says: "--log-level"},
		{name: "bad log format", args: []string{"--log-format", "xml"}, says: "--log-format"},
		{name: "bad queue size", args: []string{"--job-state-queue-size", "0"}, says: "--job-state-queue-size"},
		// A bool flag's value as the next argument stopped the parsing: the flags after it were
		// dropped, and the scheduler ran without them.
		{name: "a stray argument", args: []string{"--insecure-http", "false", "--job-state-queue-size", "0"}, says: `unexpected argument "false"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(filepath.Join(bins, "ejcloud-scheduler"), tc.args...)
			cmd.Env = os.Environ()
			if tc.env != "" {
				cmd.Env = append(cmd.Env, tc.env)
			}
			out, err := cmd.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("exit: %v; want status 1\n%s", err, out)
			}
			if lines := strings.Split(strings.TrimSpace(string(out)), "\n"); len(lines) != 1 || !strings.Contains(lines[0], tc.says) {
				t.Fatalf("output %q; want one line naming %q", out, tc.says)
			}
		})
	}
	if out, err := exec.Command(filepath.Join(bins, "ejcloud-scheduler"), "--help").CombinedOutput(); err != nil || !strings.Contains(string(out), "--zk-servers (EJCLOUD_ZK_SERVERS)  [default 127.0.0.1:2181]") {
		t.Fatalf("--help: %v\n%s", err, out)
	}
}

// A scheduler told to stop while ZooKeeper is out of reach stops at once, with status 0: leaving
// asks ZooKeeper (the leader resigns, a standby withdraws), and the client fails those requests
// when it cannot connect rather than holding them, which a review suspected. A guard: it passes
// on the code before it too.
func TestASchedulerStopsWhileZooKeeperIsDown(t *testing.T) {
	t.Parallel()
	zk := statetest.StartDedicated(t)
	env := statetest.Env{Servers: []string{zk.Addr}, Namespace: "stopping"}
	args := func() []string {
		return []string{"--zk-servers", zk.Addr, "--zk-namespace", env.Namespace, "--zk-session-timeout", "10s",
			"--mesos-url", "http://" + freeAddr(t), // no Mesos: leading needs none
			"--http-addr", freeAddr(t), "--hostname", "127.0.0.1", "--auth-root", creds}
	}
	leader := start(t, "ejcloud-scheduler", "elected leader", args()...)
	standby := start(t, "ejcloud-scheduler", "scheduler started", args()...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tree, err := state.Dial(ctx, state.Config{Servers: env.Servers, Namespace: env.Namespace})
	if err != nil {
		t.Fatal(err)
	}
	await.True(t, 10*time.Second, "the standby is a candidate", func() bool {
		names, err := tree.Children(ctx, "ha/election")
		return err == nil && len(names) == 2
	})
	tree.Close()
	zk.Stop()
	for _, p := range []*proc{leader, standby} {
		stopsCleanly(t, p, syscall.SIGTERM)
	}
}

// stopsCleanly sends sig and requires the process to exit with status 0 within 20 s.
func stopsCleanly(t *testing.T, p *proc, sig syscall.Signal) {
	t.Helper()
	began := time.Now()
	p.cmd.Process.Signal(sig)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s exited with %v after %v; want status 0", p.name, err, sig)
		}
		t.Logf("stopped %v after %v", time.Since(began).Round(time.Millisecond), sig)
	case <-time.After(20 * time.Second):
		t.Fatalf("%s (pid %d) did not stop within 20 s of %v:\n%s", p.name, p.cmd.Process.Pid, sig, tail(p.log.String(), 3000))
	}
}

// SIGHUP (a closed terminal, a supervisor's hangup) stops the scheduler as SIGTERM does: it
// resigns and exits 0. It killed it at once, leaving its election node to the session timeout.
func TestSIGHUPStopsTheSchedulerCleanly(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	p := start(t, "ejcloud-scheduler", "elected leader", "--zk-servers", strings.Join(env.Servers, ","), "--zk-namespace", env.Namespace,
		"--mesos-url", "http://"+freeAddr(t), "--http-addr", freeAddr(t), "--hostname", "127.0.0.1", "--auth-root", creds)
	stopsCleanly(t, p, syscall.SIGHUP)
	p.said(t, 5*time.Second, "scheduler stopped", "it says it stopped")
}
