package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/internal/await"
)

// GET /api/operate/sandbox answers, for each agent running the app's executor, the agent's
// hostname and the sandbox directory, read from the agent's own /state as on a real cluster
// (a real master's state has no directories): a directory on disk holding the executor's
// stdout, where the app's shard output is.
func TestSandboxEndpointFindsTheExecutorsSandbox(t *testing.T) {
	t.Parallel()
	w, s := startWorld(t, 2)
	const job = "boxed"
	s.must(t, 204, "POST", "/api/job/register", setPlacement(w.jobJSON(job, 2, "", false, `echo "boxed shard $EJCLOUD_SHARDING_ITEM"; `+w.hold(job)), "SPREAD"))
	s.must(t, 204, "POST", "/api/job/trigger", job)
	await.True(t, 30*time.Second, "both shards running", func() bool { r := w.runs(job); return len(r["0"]) == 1 && len(r["1"]) == 1 })
	type sandbox struct {
		Hostname string `json:"hostname"`
		Path     string `json:"path"`
	}
	var boxes []sandbox
	body := s.must(t, 200, "GET", "/api/operate/sandbox?appName=app", "")
	if err := json.Unmarshal([]byte(body), &boxes); err != nil || len(boxes) != 2 {
		t.Fatalf("sandboxes %s (%v); want the app's two executors' sandboxes", body, err)
	}
	work, _ := filepath.EvalSymlinks(w.mesos.work)
	hosts := map[string]bool{}
	for _, b := range boxes {
		hosts[b.Hostname] = true
		dir, err := filepath.EvalSymlinks(b.Path)
		if err != nil || !strings.HasPrefix(dir, work+"/slaves/") {
			t.Fatalf("sandbox %+v: %v; want a directory under mesos-local's work dir %s", b, err, work)
		}
		await.True(t, 10*time.Second, "the shard's output in the sandbox's stdout", func() bool {
			out, _ := os.ReadFile(filepath.Join(dir, "stdout"))
			return strings.Contains(string(out), "boxed shard ")
		})
	}
	if len(hosts) != 2 || hosts[""] {
		t.Fatalf("sandboxes %+v; want the two agents' hostnames", boxes)
	}
	w.release(job)
	quiet(t, s, job)
}
