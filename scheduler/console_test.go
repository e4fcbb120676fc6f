package scheduler

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// Both instances serve the console; the standby keeps answering the API 307 and sends
// /console/leader to the leader.
func TestStandbyServesTheConsole(t *testing.T) {
	t.Parallel()
	a, b := leaderAndStandby(t)
	for _, addr := range []string{a.cfg.HTTPAddr, b.cfg.HTTPAddr} {
		for _, path := range []string{"/", "/console/app.js", "/console/session"} {
			if resp, _ := get(t, addr, path); resp == nil || resp.StatusCode != http.StatusOK {
				t.Fatalf("GET %s of %s = %v; want 200", path, addr, resp)
			}
		}
	}
	if resp, _ := get(t, b.cfg.HTTPAddr, "/console/leader"); resp == nil || resp.StatusCode != http.StatusTemporaryRedirect ||
		resp.Header.Get("Location") != "http://"+a.cfg.HTTPAddr+"/console/leader" {
		t.Fatalf("standby's /console/leader = %v; want 307 to the leader", resp)
	}
	if resp, _ := get(t, a.cfg.HTTPAddr, "/console/leader"); resp == nil || resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != "/" {
		t.Fatalf("leader's /console/leader = %v; want 302 to its console", resp)
	}
	if resp, _ := get(t, b.cfg.HTTPAddr, "/api/job/jobs"); resp == nil || resp.StatusCode != http.StatusTemporaryRedirect {
		t.Fatalf("standby's API = %v; want 307", resp)
	}
	if resp, _ := get(t, a.cfg.HTTPAddr, "/nope"); resp == nil || resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /nope = %v; want 404", resp)
	}
}

// A leader that has never subscribed to Mesos (no FrameworkID stored: its master answers 503)
// still answers the Operations page: who leads, that it is not subscribed, and why the agents
// are missing; and an existing app's sandboxes are an empty list, while an unknown app is 404.
// That is when an operator most needs the page.
func TestClusterAndSandboxBeforeTheFirstSubscription(t *testing.T) {
	t.Parallel()
	base := leaderServingTheAPI(t)

	code, body := call(t, "GET", base+"/api/operate/cluster", "")
	if code != http.StatusOK {
		t.Fatalf("GET /api/operate/cluster before any subscription: %d %s; want 200", code, body)
	}
	var c struct {
		Leader      string `json:"leader"`
		Subscribed  bool   `json:"subscribed"`
		FrameworkID string `json:"frameworkId"`
		AgentsError string `json:"agentsError"`
	}
	if err := json.Unmarshal([]byte(body), &c); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	if c.Leader == "" || c.Subscribed || c.FrameworkID != "" || c.AgentsError == "" {
		t.Fatalf("cluster %s: want the leader, not subscribed, no framework id, and why the agents are missing", body)
	}

	if code, body := call(t, "POST", base+"/api/app", `{"appName":"app","appURL":"/opt/app","bootstrapScript":"./run","cpuCount":0.1,"memoryMB":32}`); code/100 != 2 {
		t.Fatalf("register the app: %d %s", code, body)
	}
	if code, body := call(t, "GET", base+"/api/operate/sandbox?appName=app", ""); code != http.StatusOK || strings.TrimSpace(body) != "[]" {
		t.Fatalf("sandboxes of an existing app before any subscription: %d %q; want 200 []", code, body)
	}
	if code, body := call(t, "GET", base+"/api/operate/sandbox?appName=no-such-app", ""); code != http.StatusNotFound {
		t.Fatalf("sandboxes of an unknown app: %d %s; want 404", code, body)
	}
}

// leaderServingTheAPI starts a scheduler on a namespace of its own, whose Mesos master answers
// 503, and returns the base URL of its API once it leads and serves it.
func leaderServingTheAPI(t *testing.T) string {
	t.Helper()
	s := start(t, testConfig(t, statetest.StartZooKeeper(t)))
	base := "http://" + s.cfg.HTTPAddr
	await.True(t, 20*time.Second, "it leads and serves the API", func() bool {
		code, _ := call(t, "GET", base+"/api/app/list", "")
		return code == http.StatusOK
	})
	return base
}

// Without --event-trace-db the history endpoints answer 2.1.5's empty shapes, which read like
// a search that found nothing: a header tells the console that nothing is recorded at all.
func TestConsoleLearnsTheEventTraceIsNotConfigured(t *testing.T) {
	t.Parallel()
	base := leaderServingTheAPI(t)
	for _, path := range []string{"/api/job/events/executions", "/api/job/events/statusTraces"} {
		resp, err := noRedirect.Get(base + path)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Ejcloud-Event-Trace") != "none" {
			t.Fatalf("GET %s without an event trace database: %d, Ejcloud-Event-Trace %q; want 200 and \"none\"", path, resp.StatusCode, resp.Header.Get("Ejcloud-Event-Trace"))
		}
	}
}
