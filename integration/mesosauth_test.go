package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// A master with framework authentication (mesos-local --authenticate-http-frameworks): a
// scheduler without the secret is told which flags to set, and stops; with --mesos-principal
// and --mesos-secret-file it subscribes and runs a job, and reads the master's and agents'
// read-only endpoints with them. (Issue 15, framework authentication.)
func TestFrameworkAuthentication(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	creds, secret := filepath.Join(dir, "credentials"), filepath.Join(dir, "secret")
	os.WriteFile(creds, []byte(`{"credentials":[{"principal":"ejcloud","secret":"s3cret"}]}`), 0o600)
	os.WriteFile(secret, []byte("s3cret\n"), 0o600) // as `echo s3cret > file` writes it
	w := &world{zk: statetest.StartZooKeeper(t), dir: t.TempDir()}
	w.mesos = startMesosWith(t, 1, "cpus:4;mem:4096;disk:1000;ports:[31000-32000]",
		"--authenticate-http-frameworks", "--authenticate-http-readonly", "--authenticate-agent-http-readonly", "--credentials", creds)

	without := startScheduler(t, w.zk, w.mesos, "--mesos-startup-timeout", "2s", "--log-format", "json")
	without.said(t, 30*time.Second, "set --mesos-principal and --mesos-secret-file", "the scheduler without the secret names the flags")
	await.True(t, 30*time.Second, "the scheduler without the secret stops", func() bool { return exited(without.proc) })
	// Its last word is a line of its log format, which a collector parses (it was plain text).
	// The process has exited, but its console may not be drained yet: the last line is waited
	// for, whole, until it is the exit's (a retry's warning may be last for a moment).
	var line string
	var last struct{ Level, Msg, Error string }
	await.True(t, 10*time.Second, "the scheduler's exit line, whole and last", func() bool {
		out := without.proc.log.String()
		if !strings.HasSuffix(out, "\n") {
			return false
		}
		lines := strings.Split(strings.TrimSpace(out), "\n")
		line = strings.TrimSpace(lines[len(lines)-1])
		last = struct{ Level, Msg, Error string }{}
		return json.Unmarshal([]byte(line), &last) == nil && last.Msg == "ejcloud-scheduler exits"
	})
	if last.Level != "error" || last.Msg != "ejcloud-scheduler exits" || !strings.Contains(last.Error, "cannot reach Mesos") {
		t.Fatalf("the scheduler's last line %q; want a JSON error entry saying why it exits", line)
	}

	with := startScheduler(t, w.zk, w.mesos, "--mesos-principal", "ejcloud", "--mesos-secret-file", secret)
	leaderOf(t, with)
	with.must(t, 204, "POST", "/api/app", w.appJSON(""))
	with.must(t, 204, "POST", "/api/job/register", w.jobJSON("authed", 2, "", false, ""))
	w.triggerAndAwait(t, with, "authed", 2, 1)
	// The master's state and the agent's (here both authenticated too) are read with the
	// framework's credentials.
	if code, body := with.api(t, "GET", "/api/operate/sandbox?appName=app", ""); code != 200 || !strings.Contains(body, `"path":"/`) {
		t.Fatalf("sandboxes through the authenticated master and agent states: %d %s", code, body)
	}
}

// --mesos-url lists several masters: the first does not answer (nothing listens there), the
// scheduler subscribes at the second and runs a job; the operations that read the master's
// state go to the master it subscribed at. (Issue 15, a list of master URLs.)
func TestAListOfMastersWhoseFirstIsDead(t *testing.T) {
	t.Parallel()
	w := &world{zk: statetest.StartZooKeeper(t), mesos: startMesos(t, 1), dir: t.TempDir()}
	s := startScheduler(t, w.zk, w.mesos, "--mesos-url", "http://"+freeAddr(t)+","+w.mesos.url)
	leaderOf(t, s)
	s.must(t, 204, "POST", "/api/app", w.appJSON(""))
	s.must(t, 204, "POST", "/api/job/register", w.jobJSON("listed", 1, "", false, ""))
	w.triggerAndAwait(t, s, "listed", 1, 1)
	if code, body := s.api(t, "GET", "/api/operate/sandbox?appName=app", ""); code != 200 {
		t.Fatalf("sandboxes through the master subscribed at: %d %s", code, body)
	}
}
