package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

var bin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "no-leftovers")
	if err != nil {
		panic(err)
	}
	bin = filepath.Join(dir, "no-leftovers")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		panic(string(out))
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func TestLeftovers(t *testing.T) {
	for _, tc := range []struct {
		name     string
		script   string
		wantCode int
		wantErr  string // in stderr
		orphan   bool   // the script writes the pid of a background process to $PIDFILE
	}{
		{name: "a clean command passes its status through", script: "exit 0", wantCode: 0},
		{name: "a failing command passes its status through", script: "exit 3", wantCode: 3},
		{name: "an orphan that exits within the grace is fine", script: "(sleep 0.2) & exit 0", wantCode: 0},
		{name: "an orphan that outlives the grace fails the run and is killed",
			script:   `sh -c 'echo $$ > "$PIDFILE"; exec sleep 60' & while [ ! -s "$PIDFILE" ]; do sleep 0.01; done; exit 0`,
			wantCode: 1, wantErr: "sleep 60", orphan: true},
		{name: "a grandchild in another session is found too",
			script:   `setsid sh -c 'echo $$ > "$PIDFILE"; exec sleep 60' & while [ ! -s "$PIDFILE" ]; do sleep 0.01; done; exit 0`,
			wantCode: 1, wantErr: "sleep 60", orphan: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pidfile := filepath.Join(t.TempDir(), "pid")
			cmd := exec.Command(bin, "-grace", "1s", "sh", "-c", tc.script)
			cmd.Env = append(os.Environ(), "PIDFILE="+pidfile)
			var stderr strings.Builder
			cmd.Stderr = &stderr
			err := cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.wantCode || !strings.Contains(stderr.String(), tc.wantErr) {
				t.Fatalf("exit %d, stderr %q; want exit %d and %q", code, stderr.String(), tc.wantCode, tc.wantErr)
			}
			if tc.orphan {
				b, _ := os.ReadFile(pidfile)
				pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
				if err != nil {
					t.Fatalf("pid file: %q", b)
				}
				// no-leftovers killed and reaped it before exiting: it is gone, not even a zombie.
				if err := syscall.Kill(pid, 0); err == nil {
					t.Errorf("orphan %d still exists after no-leftovers exited", pid)
				}
			}
		})
	}
}
