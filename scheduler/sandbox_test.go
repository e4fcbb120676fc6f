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
	"github.com/ejcloud/ejcloud/taskend"
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
	t.Parallel()
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
			got, err := sandboxes(context.Background(), mesosReader{client: http.DefaultClient}, masterDoc(t, tc.executors, tc.agents), "FW", tc.app)
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

// An agent that authenticates its read-only endpoints (--authenticate_http_readonly) answers
// 401 to a scheduler without credentials; with the framework's principal and secret, the
// sandbox lookup and the end check read it.
func TestAgentReadsCarryTheFrameworksCredentials(t *testing.T) {
	t.Parallel()
	const dir = "/w/slaves/S0/frameworks/FW/executors/app@-@S0/runs/r0"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user, pass, ok := r.BasicAuth(); !ok || user != "ejcloud" || pass != "s3cret" {
			w.Header().Set("WWW-Authenticate", `Basic realm="mesos"`)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case "/state":
			json.NewEncoder(w).Encode(map[string]any{"hostname": "agent-0.example", "frameworks": []any{map[string]any{
				"id": "FW", "executors": []any{map[string]any{"id": "app@-@S0", "directory": dir}}}}})
		case "/files/read":
			if r.URL.Query().Get("path") != taskend.Path(dir, "T1") {
				http.NotFound(w, r)
				return
			}
			json.NewEncoder(w).Encode(map[string]any{"offset": 0, "data": "exited 0\n"})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	addr := strings.TrimPrefix(srv.URL, "http://")
	doc := masterDoc(t, map[string][]string{"FW": {"app@-@S0"}}, map[string]string{"S0": addr})
	ctx := context.Background()
	cases := []struct {
		name              string
		principal, secret string
		wantErr           string
	}{
		{"with the framework's credentials", "ejcloud", "s3cret", ""},
		{"without credentials", "", "", "401"},
		{"with a wrong secret", "ejcloud", "nope", "401"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reader := mesosReader{client: http.DefaultClient, principal: tc.principal, secret: tc.secret}
			got, err := sandboxes(ctx, reader, doc, "FW", "app")
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("sandboxes: error %v; want one naming %q", err, tc.wantErr)
				}
				if _, err := executorDirs(ctx, reader, doc, "FW", "S0"); err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("end check: error %v; want one naming %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || len(got) != 1 || got[0].Path != dir {
				t.Fatalf("sandboxes %+v, %v; want %s", got, err, dir)
			}
			dirs, err := executorDirs(ctx, reader, doc, "FW", "S0")
			if err != nil {
				t.Fatal(err)
			}
			rec, found, err := findEnd(ctx, reader, dirs, "app@-@S0", "T1")
			if err != nil || !found || !rec.Succeeded() {
				t.Fatalf("end record %+v found=%v err=%v; want exited 0", rec, found, err)
			}
		})
	}
}

// Agents are read over https when the master is (Mesos's SSL setting is the cluster's), over
// http otherwise.
func TestAgentsAreReadOverTheMastersScheme(t *testing.T) {
	t.Parallel()
	const dir = "/w/slaves/S0/frameworks/FW/executors/app@-@S0/runs/r0"
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(map[string]any{"hostname": "agent-0.example", "frameworks": []any{map[string]any{
			"id": "FW", "executors": []any{map[string]any{"id": "app@-@S0", "directory": dir}}}}})
	}))
	t.Cleanup(srv.Close)
	doc := masterDoc(t, map[string][]string{"FW": {"app@-@S0"}}, map[string]string{"S0": strings.TrimPrefix(srv.URL, "https://")})
	for _, tc := range []struct {
		master string
		ok     bool
	}{
		{"https://master.example:5050", true},
		{"http://master.example:5050", false}, // plain HTTP to a TLS agent
		{"", false},                           // no master known yet: http
	} {
		t.Run(tc.master, func(t *testing.T) {
			reader := (&Config{}).mesosReader(tc.master)
			reader.client = srv.Client() // trusts the test agent's certificate
			got, err := sandboxes(context.Background(), reader, doc, "FW", "app")
			if ok := err == nil && len(got) == 1 && got[0].Path == dir; ok != tc.ok {
				t.Fatalf("sandboxes %+v, %v; want them read: %v", got, err, tc.ok)
			}
		})
	}
}
