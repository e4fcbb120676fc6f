package scheduler

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/internal/await"
)

// call is a curl-equivalent request to the scheduler.
func call(t testing.TB, method, url, body string, auth ...string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url, strings.NewReader(body))
	if body != "" && (strings.HasPrefix(body, "{") || strings.HasPrefix(body, `"`)) {
		req.Header.Set("Content-Type", "application/json")
	}
	if len(auth) == 2 {
		req.SetBasicAuth(auth[0], auth[1])
	}
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The app and job lifecycle of SPEC §7 over HTTP, with the 2.1.5 forms (raw job names,
// numeric strings, DELETE …/disable), against the running scheduler and real ZooKeeper.
func TestRESTLifecycle(t *testing.T) {
	t.Parallel()
	s := newSystem(t, 1)
	base := "http://" + s.sched.cfg.HTTPAddr
	exec := base + "/executor/ejcloud-executor"
	steps := []struct {
		method, path, body string
		want               int
		contains           string
	}{
		{"POST", "/api/app", `{"appName":"shop","appURL":"` + exec + `","bootstrapScript":"./ejcloud-executor","cpuCount":"0.1","memoryMB":"32"}`, 204, ""},
		{"POST", "/api/app", `{"appName":"shop","appURL":"` + exec + `","bootstrapScript":"./x"}`, 409, "exists"},
		{"PUT", "/api/app", `{"appName":"shop","eventTraceSamplingCount":"2"}`, 204, ""},
		{"GET", "/api/app/shop", "", 200, `"eventTraceSamplingCount":2`},
		{"GET", "/api/app/shop", "", 200, `"bootstrapScript":"./ejcloud-executor"`}, // kept by the partial update
		{"POST", "/api/job/register", `{"jobName":"rest","appName":"shop","jobType":"SCRIPT","jobExecutionType":"TRANSIENT","cron":"*/1 * * * * ?","shardingTotalCount":"2","cpuCount":"0.1","memoryMB":"16","scriptCommandLine":"echo \"$EJCLOUD_SHARDING_ITEM rest\" >> ` + s.dir + `/runs-rest.txt; true","timeZone":"UTC"}`, 204, ""},
		{"POST", "/api/job/register", `{"jobName":"bad","appName":"shop","jobType":"SCRIPT","jobExecutionType":"TRANSIENT","cron":"nope","shardingTotalCount":1,"cpuCount":1,"memoryMB":1,"scriptCommandLine":"true"}`, 400, `"field":"cron"`},
		{"GET", "/api/job/jobs/rest", "", 200, `"shardingTotalCount":2`},
		{"GET", "/api/job/rest/next?count=1", "", 200, "Z"},
		{"GET", "/api/job/rest/disable", "", 200, "false"},
		{"POST", "/api/app/shop/disable", "", 204, ""},
		{"GET", "/api/job/rest/disable", "", 200, "true"}, // its app is disabled
		{"DELETE", "/api/app/shop/disable", "", 204, ""},
		{"POST", "/api/job/trigger", "rest", 204, ""},
		{"DELETE", "/api/job/deregister", `"nope"`, 404, ""},
	}
	for _, st := range steps {
		code, body := call(t, st.method, base+st.path, st.body)
		if code != st.want || !strings.Contains(body, st.contains) {
			t.Fatalf("%s %s: %d %s; want %d containing %q", st.method, st.path, code, body, st.want, st.contains)
		}
	}
	await.True(t, 30*time.Second, "the job registered over REST runs", func() bool {
		r := s.runs("rest")
		return len(r["0"]) >= 1 && len(r["1"]) >= 1
	})
	code, body := call(t, "GET", base+"/api/job/tasks/ready", "")
	if code != 200 || !strings.HasPrefix(body, "[") {
		t.Fatalf("ready tasks: %d %s", code, body)
	}
	for _, st := range []struct{ method, path, body string }{
		{"DELETE", "/api/job/deregister", "rest"},
		{"DELETE", "/api/app/shop", ""},
	} {
		if code, body := call(t, st.method, base+st.path, st.body); code != 204 {
			t.Fatalf("%s %s: %d %s", st.method, st.path, code, body)
		}
	}
	if code, _ := call(t, "GET", base+"/api/app/shop", ""); code != 404 {
		t.Fatalf("deleted app: %d; want 404", code)
	}
}

// Fifty parallel registrations of one job: one 204, forty-nine 409, one job stored.
func TestParallelRegistrations(t *testing.T) {
	t.Parallel()
	s := newSystem(t, 1)
	base := "http://" + s.sched.cfg.HTTPAddr
	job := `{"jobName":"race","appName":"app","jobType":"SCRIPT","jobExecutionType":"TRANSIENT","shardingTotalCount":1,"cpuCount":0.1,"memoryMB":16,"scriptCommandLine":"true"}`
	codes := make(chan int, 50)
	var wg sync.WaitGroup
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			code, _ := call(t, "POST", base+"/api/job/register", job)
			codes <- code
		}()
	}
	wg.Wait()
	close(codes)
	count := map[int]int{}
	for c := range codes {
		count[c]++
	}
	if count[204] != 1 || count[409] != 49 {
		t.Fatalf("answers %v; want one 204 and 49 409", count)
	}
	code, body := call(t, "GET", base+"/api/job/jobs", "")
	var jobs []map[string]any
	json.Unmarshal([]byte(body), &jobs)
	if code != 200 || len(jobs) != 1 {
		t.Fatalf("jobs: %d %s", code, body)
	}
}

// Guests read, root writes, strangers are refused; a standby redirects to the leader.
func TestAuthAndStandbyRedirect(t *testing.T) {
	t.Parallel()
	s := newSystem(t, 1, func(c *Config) { c.AuthRoot, c.AuthGuest = "root:pw", "guest:g" })
	base := "http://" + s.sched.cfg.HTTPAddr
	for _, tc := range []struct {
		method, path string
		auth         []string
		want         int
	}{
		{"GET", "/api/app/list", nil, 401},
		{"GET", "/api/app/list", []string{"root", "bad"}, 401},
		{"GET", "/api/app/list", []string{"guest", "g"}, 200},
		{"POST", "/api/app/app/disable", []string{"guest", "g"}, 403},
		{"POST", "/api/app/app/disable", []string{"root", "pw"}, 204},
	} {
		if code, body := call(t, tc.method, base+tc.path, "", tc.auth...); code != tc.want {
			t.Fatalf("%s %s as %v: %d %s; want %d", tc.method, tc.path, tc.auth, code, body, tc.want)
		}
	}
	standby := start(t, func() Config { c := testConfig(t, s.env); c.MesosURL = s.mesos.URL(); return c }())
	await.True(t, 30*time.Second, "standby serving", func() bool {
		code, _ := call(t, "GET", "http://"+standby.cfg.HTTPAddr+"/healthz", "")
		return code == 200
	})
	req, _ := http.NewRequest("GET", "http://"+standby.cfg.HTTPAddr+"/api/job/jobs", bytes.NewReader(nil))
	resp, err := noRedirect.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 307 || resp.Header.Get("Location") != base+"/api/job/jobs" {
		t.Fatalf("standby: %d %q; want 307 to the leader", resp.StatusCode, resp.Header.Get("Location"))
	}
}

// Reconciliation on demand (429 within 10 s) and the app's sandboxes, against mesos-local.
func TestOperateEndpoints(t *testing.T) {
	t.Parallel()
	s := newSystem(t, 1)
	base := "http://" + s.sched.cfg.HTTPAddr
	j := s.holdJob("boxed", 1, "")
	s.register(j)
	s.trigger("boxed")
	await.True(t, 30*time.Second, "running", func() bool { return len(s.runs("boxed")) == 1 })
	if code, body := call(t, "POST", base+"/api/operate/reconcile/explicit", ""); code != 204 {
		t.Fatalf("reconcile: %d %s", code, body)
	}
	if code, _ := call(t, "POST", base+"/api/operate/reconcile/explicit", ""); code != 429 {
		t.Fatalf("second reconcile within 10 s: %d; want 429", code)
	}
	code, body := call(t, "GET", base+"/api/operate/sandbox?appName=app", "")
	var boxes []map[string]string
	json.Unmarshal([]byte(body), &boxes)
	if code != 200 || len(boxes) != 1 || !strings.HasPrefix(boxes[0]["hostname"], "127.0.0.") || !strings.Contains(boxes[0]["path"], "/executors/app@-@") {
		t.Fatalf("sandbox: %d %s", code, body)
	}
	s.release("boxed")
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	s := newSystem(t, 1)
	j := s.scriptJob("measured", 2, "")
	s.register(j)
	s.trigger("measured")
	await.True(t, 30*time.Second, "ran", func() bool { return len(s.runs("measured")) == 2 && s.runningCount("measured") == 0 })
	// The test reads ZooKeeper; the leader drops a task from its model once the multi's answer
	// is back, and counts its update just after: a moment later. So the scrape waits for the
	// ends. A scrape is no snapshot, though: the registry runs its collectors side by side, so
	// the scrape that first shows the second end counted may have read the queue depths just
	// before that end left the model. The one after it cannot have.
	metrics := "http://" + s.sched.cfg.HTTPAddr + "/metrics"
	await.True(t, 10*time.Second, "both ends counted", func() bool {
		_, body := call(t, "GET", metrics, "")
		return strings.Contains(body, `ejcloud_status_updates_total{state="TASK_FINISHED"} 2`)
	})
	code, body := call(t, "GET", metrics, "")
	for _, want := range []string{"ejcloud_leader 1", "ejcloud_mesos_subscribed 1", "ejcloud_tasks_launched_total 2",
		`ejcloud_status_updates_total{state="TASK_FINISHED"} 2`, `ejcloud_queue_depth{queue="running"} 0`, "ejcloud_zk_round_trips_total "} {
		if code != 200 || !strings.Contains(body, want) {
			t.Fatalf("/metrics: %d, no %q in\n%s", code, want, body)
		}
	}
}
