package mesoslocal_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"

	"github.com/ejcloud/ejcloud/integration/mesoslocal"
	"github.com/ejcloud/ejcloud/internal/await"
)

// agentURL is the base URL of the agent an offer is from.
func agentURL(o mesos.Offer) string {
	return "http://" + o.URL.Address.GetIP() + ":" + itoa(int(o.URL.Address.Port))
}

// offerWith waits for an offer of at least need cpus. Resources freed while an offer is outstanding
// come in an offer of their own, so the first one waiting may hold only what one task freed.
func offerWith(s *sched, need float64) mesos.Offer {
	for {
		for _, o := range s.Offers() {
			if cpus(o) >= need-1e-9 {
				return o
			}
		}
	}
}

// query builds a query string from name, value pairs.
func query(kv ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v.Encode()
}

// get answers the status, Content-Type and body of a GET.
func get(t *testing.T, u string) (int, string, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Content-Type"), string(b)
}

type readAnswer struct {
	Data   string `json:"data"`
	Offset int64  `json:"offset"`
}

// readFileOK reads a file (from offset 0) through the agent's /files/read and fails unless it is answered.
func readFileOK(t *testing.T, agent, path string) readAnswer {
	t.Helper()
	code, ct, body := get(t, agent+"/files/read?"+query("path", path, "offset", "0"))
	var ans readAnswer
	if err := json.Unmarshal([]byte(body), &ans); code != 200 || ct != "application/json" || err != nil {
		t.Fatalf("/files/read of %s: %d %s %q (%v); want 200 with JSON", path, code, ct, body, err)
	}
	return ans
}

// The agent's own /state, as far as these tests read it.
type agentTaskDoc struct {
	ID    string `json:"id"`
	State string `json:"state"`
}

type agentExecutorDoc struct {
	ID             string         `json:"id"`
	Container      string         `json:"container"`
	Directory      string         `json:"directory"`
	Tasks          []agentTaskDoc `json:"tasks"`
	CompletedTasks []agentTaskDoc `json:"completed_tasks"`
}

type agentFrameworkDoc struct {
	ID                 string             `json:"id"`
	Name               string             `json:"name"`
	Executors          []agentExecutorDoc `json:"executors"`
	CompletedExecutors []agentExecutorDoc `json:"completed_executors"`
}

type agentStateDoc struct {
	Frameworks          []agentFrameworkDoc `json:"frameworks"`
	CompletedFrameworks []agentFrameworkDoc `json:"completed_frameworks"`
}

func agentState(t *testing.T, agent string) agentStateDoc {
	t.Helper()
	code, _, body := get(t, agent+"/state")
	var st agentStateDoc
	if err := json.Unmarshal([]byte(body), &st); code != 200 || err != nil {
		t.Fatalf("GET %s/state: %d %v", agent, code, err)
	}
	return st
}

func executorIDs(execs []agentExecutorDoc) []string {
	ids := []string{}
	for _, e := range execs {
		ids = append(ids, e.ID)
	}
	return ids
}

func taskStates(tasks []agentTaskDoc) map[string]string {
	out := map[string]string{}
	for _, t := range tasks {
		out[t.ID] = t.State
	}
	return out
}

// GET /files/read of files in a running executor's sandbox, as Mesos 1.11's agent answers it.
func TestFilesRead(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	s.Launch(o, task("t1", o, testExecutor("e1", "basic"), "run"))
	s.Update("t1", mesos.TASK_RUNNING)
	agent := agentURL(o)
	dir := executorDir(t, c, s.FrameworkID, "e1")
	real, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}

	content := "0123456789 \"quoted\" \\ tab\t\x01\n"
	size := len(content)
	pages := os.Getpagesize() * 16
	big := strings.Repeat("abcdefgh", pages/8+100)
	outside := filepath.Join(t.TempDir(), "secret.txt")
	for _, err := range []error{
		os.WriteFile(filepath.Join(dir, "data.txt"), []byte(content), 0o644),
		os.WriteFile(filepath.Join(dir, "big.txt"), []byte(big), 0o644),
		os.Mkdir(filepath.Join(dir, "sub"), 0o755),
		os.WriteFile(outside, []byte("secret"), 0o644),
		os.Symlink(outside, filepath.Join(dir, "out")),
		os.Symlink("data.txt", filepath.Join(dir, "in")),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	file := filepath.Join(dir, "data.txt")
	up, _ := filepath.Rel(dir, outside) // ../../…/secret.txt
	inaccessible := func(suffix string) string { return "'" + real + "/" + suffix + "' is inaccessible.\n" }

	tests := []struct {
		name     string
		endpoint string // default /files/read
		query    string
		code     int
		data     string // 200: the data and offset answered
		offset   int
		body     string // otherwise: the exact body
	}{
		{name: "whole file", query: query("path", file, "offset", "0"), code: 200, data: content},
		{name: "no offset answers the size", query: query("path", file), code: 200, offset: size},
		{name: "no offset with a length", query: query("path", file, "length", "3"), code: 200, offset: size},
		{name: "offset", query: query("path", file, "offset", "10"), code: 200, data: content[10:], offset: 10},
		{name: "offset and length", query: query("path", file, "offset", "2", "length", "5"), code: 200, data: content[2:7], offset: 2},
		{name: "length", query: query("path", file, "offset", "0", "length", "4"), code: 200, data: content[:4]},
		{name: "length -1 reads to the end", query: query("path", file, "offset", "0", "length", "-1"), code: 200, data: content},
		{name: "hexadecimal offset", query: query("path", file, "offset", "0xa"), code: 200, data: content[10:], offset: 10},
		{name: "offset -1 answers the size", query: query("path", file, "offset", "-1"), code: 200, offset: size},
		{name: "offset -1 with a length", query: query("path", file, "offset", "-1", "length", "3"), code: 200, offset: size},
		{name: "offset at the end", query: query("path", file, "offset", strconv.Itoa(size)), code: 200, offset: size},
		// Since Mesos 1.1 the answer names the offset asked for, even past the end.
		{name: "offset past the end", query: query("path", file, "offset", strconv.Itoa(size+5)), code: 200, offset: size + 5},
		{name: "length 0", query: query("path", file, "offset", "3", "length", "0"), code: 200, offset: 3},
		{name: "reads at most 16 pages", query: query("path", filepath.Join(dir, "big.txt"), "offset", "0"), code: 200, data: big[:pages]},
		{name: "reads at most 16 pages from an offset", query: query("path", filepath.Join(dir, "big.txt"), "offset", "8", "length", strconv.Itoa(2*pages)),
			code: 200, data: big[8 : 8+pages], offset: 8},
		{name: "read.json", endpoint: "/files/read.json", query: query("path", file, "offset", "0"), code: 200, data: content},
		{name: "runs/latest", query: query("path", filepath.Join(filepath.Dir(dir), "latest", "data.txt"), "offset", "0"), code: 200, data: content},
		{name: "virtual path", query: query("path", "/frameworks/"+s.FrameworkID+"/executors/e1/runs/latest/data.txt", "offset", "0"), code: 200, data: content},
		{name: "file URI", query: query("path", "file://"+file, "offset", "0"), code: 200, data: content},
		{name: "symlink inside the sandbox", query: query("path", filepath.Join(dir, "in"), "offset", "0"), code: 200, data: content},
		{name: "dot-dot staying inside", query: query("path", dir+"/sub/../data.txt", "offset", "0"), code: 200, data: content},

		{name: "no path", query: "", code: 400, body: "Expecting 'path=value' in query.\n"},
		{name: "empty path", query: query("path", ""), code: 400, body: "Expecting 'path=value' in query.\n"},
		{name: "unparsable offset", query: query("path", file, "offset", "ten"), code: 400, body: "Failed to parse offset: Failed to convert 'ten' to number.\n"},
		{name: "offset below -1", query: query("path", file, "offset", "-2"), code: 400, body: "Negative offset provided: -2.\n"},
		{name: "unparsable length", query: query("path", file, "length", "1.5"), code: 400, body: "Failed to parse length: Failed to convert '1.5' to number.\n"},
		{name: "length below -1", query: query("path", file, "length", "-7"), code: 400, body: "Negative length provided: -7.\n"},
		{name: "the sandbox", query: query("path", dir), code: 400, body: "Cannot read a directory.\n"},
		{name: "a directory in the sandbox", query: query("path", filepath.Join(dir, "sub")), code: 400, body: "Cannot read a directory.\n"},

		{name: "missing file", query: query("path", filepath.Join(dir, "nope.txt")), code: 404},
		{name: "missing file past dot-dot", query: query("path", dir+"/../nope.txt"), code: 404},
		{name: "file outside every sandbox", query: query("path", outside), code: 404},
		{name: "the work dir", query: query("path", c.WorkDir()), code: 404},
		{name: "a sandbox's parent", query: query("path", filepath.Dir(dir)), code: 404},
		{name: "relative path", query: query("path", "data.txt"), code: 404},
		// As files.cpp: a path that leaves the sandbox it starts in is a bad request.
		{name: "dot-dot out of the sandbox", query: query("path", dir+"/"+up), code: 400, body: inaccessible(up)},
		{name: "symlink leading out", query: query("path", filepath.Join(dir, "out")), code: 400, body: inaccessible("out")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			endpoint := tc.endpoint
			if endpoint == "" {
				endpoint = "/files/read"
			}
			code, ct, body := get(t, agent+endpoint+"?"+tc.query)
			if code != tc.code {
				t.Fatalf("%d %q; want %d", code, body, tc.code)
			}
			if code != 200 {
				if body != tc.body {
					t.Fatalf("body %q; want %q", body, tc.body)
				}
				return
			}
			var ans readAnswer
			if err := json.Unmarshal([]byte(body), &ans); err != nil || ct != "application/json" {
				t.Fatalf("%s %q: %v; want JSON", ct, body, err)
			}
			if ans.Data != tc.data || ans.Offset != int64(tc.offset) {
				t.Fatalf("data %q offset %d; want %q offset %d", ans.Data, ans.Offset, tc.data, tc.offset)
			}
		})
	}

	// The answer is written as Mesos's JSON writer writes it, and jsonp wraps it.
	want := `{"data":"0123456789 \"quoted\" \\ tab\t\u0001\n","offset":0}`
	if _, _, body := get(t, agent+"/files/read?"+query("path", file, "offset", "0")); body != want {
		t.Errorf("raw answer %s; want %s", body, want)
	}
	if _, ct, body := get(t, agent+"/files/read?"+query("path", file, "offset", "-1", "jsonp", "cb")); ct != "text/javascript" || body != fmt.Sprintf(`cb({"data":"","offset":%d})`, size) {
		t.Errorf("jsonp answer %s %s", ct, body)
	}
}

// An executor that has ended stays in its agent's /state under completed_executors, with its
// sandbox directory and its tasks, and its files stay readable through /files/read; when it
// was its framework's last executor on the agent, the framework is under
// completed_frameworks, until it launches there again.
func TestCompletedExecutors(t *testing.T) {
	t.Parallel()
	// Allocating every millisecond makes each freed task or executor an offer of its own, as a
	// loaded machine does at any interval: the launches below must pick an offer that holds them.
	c := newCluster(t, func(o *mesoslocal.Options) { o.AllocationInterval = time.Millisecond })
	s := subscribe(t, c.URL(), codec, paInfo())
	o := s.Offers()[0]
	agent := agentURL(o)
	s.Launch(o, task("a", o, testExecutor("e1", "basic"), "finish"), task("c", o, testExecutor("e2", "basic"), "run"))
	s.Terminal("a")
	s.Ack(s.Update("c", mesos.TASK_RUNNING))
	dirs := map[string]string{}
	for _, e := range []string{"e1", "e2"} {
		dirs[e] = executorDir(t, c, s.FrameworkID, e)
		if err := os.WriteFile(filepath.Join(dirs[e], "note.txt"), []byte("written by "+e), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A running executor lists its acknowledged terminal task as completed.
	await.True(t, wait, "task a completed on the live executor e1", func() bool {
		st := agentState(t, agent)
		return len(st.Frameworks) == 1 && len(st.Frameworks[0].Executors) == 2 &&
			taskStates(st.Frameworks[0].Executors[0].CompletedTasks)["a"] == "TASK_FINISHED"
	})

	// e1 exits: it is a completed executor of a framework still running e2 here.
	o = offerWith(s, 0.5)
	s.Launch(o, task("b", o, testExecutor("e1", "basic"), "exit3"))
	s.Ack(s.Update("b", mesos.TASK_RUNNING))
	if st := s.Terminal("b"); *st.State != mesos.TASK_FAILED {
		t.Fatalf("b: %v", st.String())
	}
	s.Await("FAILURE of e1", isType(scheduler.Event_FAILURE))
	st := agentState(t, agent)
	if len(st.Frameworks) != 1 || len(st.CompletedFrameworks) != 0 {
		t.Fatalf("frameworks %+v, completed %+v; want the framework live", st.Frameworks, st.CompletedFrameworks)
	}
	fw := st.Frameworks[0]
	if fw.ID != s.FrameworkID || !slices.Equal(executorIDs(fw.Executors), []string{"e2"}) || !slices.Equal(executorIDs(fw.CompletedExecutors), []string{"e1"}) {
		t.Fatalf("framework %+v; want e2 running and e1 completed", fw)
	}
	e1 := fw.CompletedExecutors[0]
	if e1.Directory != dirs["e1"] || e1.Container == "" || e1.Container != filepath.Base(dirs["e1"]) || len(e1.Tasks) != 0 {
		t.Fatalf("completed e1 %+v; want directory %s named by its container", e1, dirs["e1"])
	}
	if got := taskStates(e1.CompletedTasks); len(got) != 2 || got["a"] != "TASK_FINISHED" || got["b"] != "TASK_FAILED" {
		t.Fatalf("completed e1's tasks %v; want a finished and b failed", got)
	}
	if ans := readFileOK(t, agent, filepath.Join(e1.Directory, "note.txt")); ans.Data != "written by e1" {
		t.Fatalf("e1's note after its end: %+v", ans)
	}

	// e2, the framework's last executor here, is shut down: the framework is completed.
	s.MustCall(&scheduler.Call{Type: scheduler.Call_SHUTDOWN, Shutdown: &scheduler.Call_Shutdown{
		ExecutorID: mesos.ExecutorID{Value: "e2"}, AgentID: o.AgentID}})
	s.Terminal("c")
	s.Await("FAILURE of e2", isType(scheduler.Event_FAILURE))
	st = agentState(t, agent)
	if len(st.Frameworks) != 0 || len(st.CompletedFrameworks) != 1 {
		t.Fatalf("frameworks %+v, completed %+v; want the framework completed", st.Frameworks, st.CompletedFrameworks)
	}
	fw = st.CompletedFrameworks[0]
	if fw.ID != s.FrameworkID || fw.Name != frameworkInfo().Name || fw.Executors == nil || len(fw.Executors) != 0 ||
		!slices.Equal(executorIDs(fw.CompletedExecutors), []string{"e1", "e2"}) {
		t.Fatalf("completed framework %+v; want no executors and e1 then e2 completed", fw)
	}
	if e2 := fw.CompletedExecutors[1]; e2.Directory != dirs["e2"] || taskStates(e2.CompletedTasks)["c"] == "" {
		t.Fatalf("completed e2 %+v; want directory %s and task c", e2, dirs["e2"])
	}
	for e, dir := range dirs {
		if ans := readFileOK(t, agent, filepath.Join(dir, "note.txt")); ans.Data != "written by "+e {
			t.Fatalf("%s's note after its framework completed: %+v", e, ans)
		}
	}

	// Launching there again makes it a live framework, with its completed executors.
	o = offerWith(s, 0.6) // d and its new executor
	s.Launch(o, task("d", o, testExecutor("e3", "basic"), "run"))
	s.Update("d", mesos.TASK_RUNNING)
	st = agentState(t, agent)
	if len(st.Frameworks) != 1 || len(st.CompletedFrameworks) != 0 || !slices.Equal(executorIDs(st.Frameworks[0].Executors), []string{"e3"}) ||
		!slices.Equal(executorIDs(st.Frameworks[0].CompletedExecutors), []string{"e1", "e2"}) {
		t.Fatalf("after a new launch: frameworks %+v, completed %+v", st.Frameworks, st.CompletedFrameworks)
	}
}

// An agent keeps the last 150 completed executors of a framework (the default of
// --max_completed_executors_per_framework).
func TestCompletedExecutorsAreBounded(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	s := subscribe(t, c.URL(), codec, paInfo())
	var agent string
	const n = 152
	for launched := 0; launched < n; {
		o := s.Offers()[0]
		agent = agentURL(o)
		room := min(30, int(cpus(o)*10+1e-6)) // 0.1 cpus each
		var batch []mesos.TaskInfo
		for ; launched < n && len(batch) < room; launched++ {
			batch = append(batch, commandTask(fmt.Sprintf("cmd%03d", launched), o, &mesos.CommandInfo{Value: ptrTo("true")}))
		}
		if len(batch) == 0 {
			continue
		}
		s.Launch(o, batch...)
		for _, tk := range batch {
			if st := s.Terminal(tk.TaskID.Value); *st.State != mesos.TASK_FINISHED {
				t.Fatalf("%s: %v", tk.TaskID.Value, st.String())
			}
		}
	}
	var st agentStateDoc
	await.True(t, wait, "every command executor completed", func() bool {
		st = agentState(t, agent)
		return len(st.Frameworks) == 0 && len(st.CompletedFrameworks) == 1
	})
	ids := executorIDs(st.CompletedFrameworks[0].CompletedExecutors)
	seen := map[string]bool{}
	for _, id := range ids {
		seen[id] = true
	}
	if len(ids) != 150 || len(seen) != 150 {
		t.Fatalf("%d completed executors (%d distinct); want the last 150", len(ids), len(seen))
	}
	// The executors of the last batch ended last.
	for i := n - 2; i < n; i++ {
		if id := fmt.Sprintf("cmd%03d", i); !seen[id] {
			t.Fatalf("%s, among the last to end, is not listed", id)
		}
	}
}

// An agent restart (mesos-local's always recovers) keeps the completed executors of
// checkpointing frameworks and their sandboxes readable; those of a framework that does not
// checkpoint are not recovered, as on a real agent.
func TestCompletedExecutorsAcrossAgentRestart(t *testing.T) {
	t.Parallel()
	for _, checkpoint := range []bool{true, false} {
		t.Run("checkpoint="+strconv.FormatBool(checkpoint), func(t *testing.T) {
			c := newCluster(t)
			s := subscribe(t, c.URL(), codec, withCheckpoint(paInfo(), checkpoint))
			o := s.Offers()[0]
			agent := agentURL(o)
			s.Launch(o, task("t1", o, testExecutor("e1", "basic"), "exit3"))
			s.Ack(s.Update("t1", mesos.TASK_RUNNING)) // e1 exits once the agent has taken RUNNING
			s.Terminal("t1")
			s.Await("FAILURE of e1", isType(scheduler.Event_FAILURE))
			st := agentState(t, agent)
			if len(st.CompletedFrameworks) != 1 || len(st.CompletedFrameworks[0].CompletedExecutors) != 1 {
				t.Fatalf("before the restart: completed frameworks %+v", st.CompletedFrameworks)
			}
			dir := st.CompletedFrameworks[0].CompletedExecutors[0].Directory
			if err := os.WriteFile(filepath.Join(dir, "note.txt"), []byte("kept"), 0o644); err != nil {
				t.Fatal(err)
			}
			readFileOK(t, agent, filepath.Join(dir, "note.txt"))
			if err := c.RestartAgent(o.AgentID.Value); err != nil {
				t.Fatal(err)
			}
			st = agentState(t, agent)
			code, _, _ := get(t, agent+"/files/read?"+query("path", filepath.Join(dir, "note.txt")))
			if checkpoint {
				if len(st.CompletedFrameworks) != 1 || !slices.Equal(executorIDs(st.CompletedFrameworks[0].CompletedExecutors), []string{"e1"}) || code != 200 {
					t.Fatalf("after the restart: completed frameworks %+v, /files/read %d; want e1 kept and readable", st.CompletedFrameworks, code)
				}
			} else if len(st.CompletedFrameworks) != 0 || code != 404 {
				t.Fatalf("after the restart: completed frameworks %+v, /files/read %d; want e1 forgotten", st.CompletedFrameworks, code)
			}
		})
	}
}
