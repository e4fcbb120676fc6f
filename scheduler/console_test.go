package scheduler

import (
	"net/http"
	"testing"
)

// Both instances serve the console; the standby keeps answering the API 307 and sends
// /console/leader to the leader.
func TestStandbyServesTheConsole(t *testing.T) {
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
