package integration

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A start-up error of the scheduler is one line on stderr and exit status 1 (SPEC §2),
// whether it is a flag, a variable or a value; --help exits 0.
func TestSchedulerStartUpErrorsAreOneLine(t *testing.T) {
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
