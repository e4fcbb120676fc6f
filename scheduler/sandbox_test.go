package scheduler

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/ejcloud/ejcloud/api"
)

// fakeAgent serves an agent's /state as a real agent does: frameworks → executors → directory.
func fakeAgent(t *testing.T, hostname string, frameworks map[string]map[string]string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/state" {
			http.NotFound(w, r)
			return
		}
		var fws []map[string]any
		for id, execs := range frameworks {
			var es []map[string]any
			for eid, dir := range execs {
				es = append(es, map[string]any{"id": eid, "directory": dir, "container": "c-" + eid, "tasks": []any{}})
			}
			fws = append(fws, map[string]any{"id": id, "executors": es, "completed_executors": []any{}})
		}
		json.NewEncoder(w).Encode(map[string]any{"id": "ignored", "hostname": hostname, "flags": map[string]any{"work_dir": "/w"},
			"frameworks": fws, "completed_frameworks": []any{}})
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// masterDoc is a /master/state as a real master reports it: executors without directories,
// agents with their pids.
func masterDoc(t *testing.T, executors map[string][]string, agents map[string]string) masterState {
	t.Helper()
	var fws []map[string]any
	for fw, execs := range executors {
		var es []map[string]any
		for _, e := range execs {
			agent := e[strings.LastIndex(e, "@-@")+3:]
			es = append(es, map[string]any{"executor_id": e, "slave_id": agent, "framework_id": fw})
		}
		fws = append(fws, map[string]any{"id": fw, "executors": es})
	}
	var slaves []map[string]any
	for id, addr := range agents {
		slaves = append(slaves, map[string]any{"id": id, "hostname": "host-" + id, "pid": "slave(1)@" + addr})
	}
	b, _ := json.Marshal(map[string]any{"frameworks": fws, "slaves": slaves})
	var doc masterState
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

func TestSandboxesReadTheAgentsState(t *testing.T) {
	s0 := fakeAgent(t, "agent-0.example", map[string]map[string]string{
		"FW":    {"app@-@S0": "/w/slaves/S0/frameworks/FW/executors/app@-@S0/runs/r0", "other@-@S0": "/w/other"},
		"OTHER": {"app@-@S0": "/w/not-ours"},
	})
	s1 := fakeAgent(t, "agent-1.example", map[string]map[string]string{
		"FW": {"app@-@S1": "/w/slaves/S1/frameworks/FW/executors/app@-@S1/runs/r1"},
	})
	down := "127.0.0.1:1" // nothing listens there
	cases := []struct {
		name      string
		executors map[string][]string
		agents    map[string]string
		app       string
		want      []api.Sandbox
		wantErr   string
	}{
		{"one agent", map[string][]string{"FW": {"app@-@S0"}}, map[string]string{"S0": s0}, "app",
			[]api.Sandbox{{Hostname: "agent-0.example", Path: "/w/slaves/S0/frameworks/FW/executors/app@-@S0/runs/r0"}}, ""},
		{"two agents", map[string][]string{"FW": {"app@-@S0", "app@-@S1", "other@-@S0"}}, map[string]string{"S0": s0, "S1": s1}, "app",
			[]api.Sandbox{{Hostname: "agent-0.example", Path: "/w/slaves/S0/frameworks/FW/executors/app@-@S0/runs/r0"},
				{Hostname: "agent-1.example", Path: "/w/slaves/S1/frameworks/FW/executors/app@-@S1/runs/r1"}}, ""},
		{"only the app's executors", map[string][]string{"FW": {"app@-@S0", "other@-@S0"}}, map[string]string{"S0": s0}, "other",
			[]api.Sandbox{{Hostname: "agent-0.example", Path: "/w/other"}}, ""},
		{"only our framework", map[string][]string{"OTHER": {"app@-@S0"}}, map[string]string{"S0": s0}, "app", []api.Sandbox{}, ""},
		{"no executor of the app", map[string][]string{"FW": {"other@-@S0"}}, map[string]string{"S0": s0}, "app2", []api.Sandbox{}, ""},
		{"agent unreachable", map[string][]string{"FW": {"app@-@S0"}}, map[string]string{"S0": down}, "app", nil, "agent S0"},
		{"agent not in the master's state", map[string][]string{"FW": {"app@-@S9"}}, map[string]string{"S0": s0}, "app", nil, "no address for agent S9"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := sandboxes(context.Background(), http.DefaultClient, masterDoc(t, tc.executors, tc.agents), "FW", tc.app)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v; want one naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			sort.Slice(got, func(i, j int) bool { return got[i].Hostname < got[j].Hostname })
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("sandboxes %+v; want %+v", got, tc.want)
			}
		})
	}
}
