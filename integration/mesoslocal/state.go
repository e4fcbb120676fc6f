package mesoslocal

import (
	"encoding/json"
	"net/http"
	"slices"
	"sort"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
)

// The /master/state document, in the shape of the real master's (the fields a framework or an
// operator reads). As on a real master, executors carry no sandbox directory: that is in the
// agents' own /state.

type stateDoc struct {
	Version             string           `json:"version"`
	ID                  string           `json:"id"`
	PID                 string           `json:"pid"`
	Hostname            string           `json:"hostname"`
	Leader              string           `json:"leader,omitempty"` // the leading master's pid, as real Mesos shows it
	ActivatedSlaves     int              `json:"activated_slaves"`
	Frameworks          []frameworkDoc   `json:"frameworks"`
	CompletedFrameworks []map[string]any `json:"completed_frameworks"`
	Slaves              []slaveDoc       `json:"slaves"`
	// RecoveredSlaves are the agents a master that took over knows from its registry only: they
	// have not re-registered with it yet (Mesos lists them so, too).
	RecoveredSlaves []recoveredDoc `json:"recovered_slaves"`
}

type recoveredDoc struct {
	ID       string `json:"id"`
	Hostname string `json:"hostname"`
	Port     int    `json:"port"`
}

type frameworkDoc struct {
	ID               string        `json:"id"`
	Name             string        `json:"name"`
	User             string        `json:"user"`
	Hostname         string        `json:"hostname"`
	WebuiURL         string        `json:"webui_url"`
	Active           bool          `json:"active"`
	Connected        bool          `json:"connected"`
	Checkpoint       bool          `json:"checkpoint"`
	FailoverTimeout  float64       `json:"failover_timeout"`
	Roles            []string      `json:"roles"`
	SuppressedRoles  []string      `json:"suppressed_roles"`
	Capabilities     []string      `json:"capabilities"`
	Tasks            []taskDoc     `json:"tasks"`
	UnreachableTasks []taskDoc     `json:"unreachable_tasks"`
	Executors        []executorDoc `json:"executors"`
	Offers           []offerDoc    `json:"offers"`
}

type taskDoc struct {
	ID          string           `json:"id"`
	Name        string           `json:"name"`
	FrameworkID string           `json:"framework_id"`
	ExecutorID  string           `json:"executor_id"`
	SlaveID     string           `json:"slave_id"`
	State       string           `json:"state"`
	Resources   map[string]any   `json:"resources"`
	Statuses    []map[string]any `json:"statuses"`
}

type executorDoc struct {
	ExecutorID  string         `json:"executor_id"`
	Name        string         `json:"name"`
	FrameworkID string         `json:"framework_id"`
	SlaveID     string         `json:"slave_id"`
	Resources   map[string]any `json:"resources"`
}

type offerDoc struct {
	ID          string         `json:"id"`
	FrameworkID string         `json:"framework_id"`
	SlaveID     string         `json:"slave_id"`
	Resources   map[string]any `json:"resources"`
}

type slaveDoc struct {
	ID               string         `json:"id"`
	Hostname         string         `json:"hostname"`
	Port             int            `json:"port"`
	PID              string         `json:"pid"`
	Active           bool           `json:"active"`
	State            string         `json:"local_state"`
	Resources        map[string]any `json:"resources"`
	UsedResources    map[string]any `json:"used_resources"`
	OfferedResources map[string]any `json:"offered_resources"`
	Attributes       map[string]any `json:"attributes"`
}

// resourceDoc renders resources as the master does: {"cpus":1.0,"mem":128.0,"ports":"[31000-32000]"}.
func resourceDoc(rs mesos.Resources) map[string]any {
	out := map[string]any{"cpus": 0.0, "mem": 0.0, "disk": 0.0, "gpus": 0.0}
	for _, r := range rs {
		switch {
		case r.Scalar != nil:
			v, _ := out[r.Name].(float64)
			out[r.Name] = v + r.Scalar.Value
		case r.Ranges != nil:
			out[r.Name] = mesos.Resources{r}.String()
		}
	}
	return out
}

func (c *Cluster) state() stateDoc {
	doc := stateDoc{Version: Version, ID: c.masterInfo.ID, PID: *c.masterInfo.PID, Hostname: c.host,
		CompletedFrameworks: []map[string]any{}, RecoveredSlaves: []recoveredDoc{}}
	switch leading, leader := c.leader(); {
	case leading:
		doc.Leader = doc.PID
	case leader != "":
		doc.Leader = "master@" + leader
	}
	for _, id := range sortedKeys(c.frameworks) {
		f := c.frameworks[id]
		fd := frameworkDoc{ID: f.id, Name: f.info.Name, User: f.info.User, Hostname: ptrVal(f.info.Hostname),
			WebuiURL: ptrVal(f.info.WebUiURL), Active: f.stream != nil, Connected: f.stream != nil,
			Checkpoint: f.checkpoint(), Roles: f.roles(), Tasks: []taskDoc{}, UnreachableTasks: []taskDoc{},
			Executors: []executorDoc{}, Offers: []offerDoc{}}
		if f.info.FailoverTimeout != nil {
			fd.FailoverTimeout = *f.info.FailoverTimeout
		}
		fd.SuppressedRoles = append([]string{}, sortedKeys(f.suppressed)...)
		for _, cp := range f.info.Capabilities {
			fd.Capabilities = append(fd.Capabilities, cp.Type.String())
		}
		for _, tid := range sortedKeys(f.tasks) {
			fd.Tasks = append(fd.Tasks, taskDocOf(f.id, f.tasks[tid]))
		}
		for _, tid := range sortedKeys(f.unreachable) {
			fd.UnreachableTasks = append(fd.UnreachableTasks, taskDocOf(f.id, f.unreachable[tid]))
		}
		for _, a := range c.agents {
			for _, e := range a.liveExecutors() {
				if e.frameworkID == f.id && e.command == nil {
					fd.Executors = append(fd.Executors, executorDoc{ExecutorID: e.id, Name: ptrVal(e.info.Name),
						FrameworkID: f.id, SlaveID: a.id, Resources: resourceDoc(e.resources)})
				}
			}
		}
		for _, o := range c.offers {
			if o.framework == f {
				fd.Offers = append(fd.Offers, offerDoc{ID: o.id, FrameworkID: f.id, SlaveID: o.agent.id, Resources: resourceDoc(o.resources)})
			}
		}
		sort.Slice(fd.Offers, func(i, j int) bool { return fd.Offers[i].ID < fd.Offers[j].ID })
		doc.Frameworks = append(doc.Frameworks, fd)
	}
	for _, a := range c.agents {
		offered := mesos.Resources{}
		for _, o := range c.offers {
			if o.agent == a {
				offered.Add(o.resources...)
			}
		}
		if a.linked() {
			doc.ActivatedSlaves++
		}
		if a.awaitingRereg {
			doc.RecoveredSlaves = append(doc.RecoveredSlaves, recoveredDoc{ID: a.id, Hostname: a.hostname, Port: a.port})
		}
		doc.Slaves = append(doc.Slaves, slaveDoc{ID: a.id, Hostname: a.hostname, Port: a.port, PID: a.pid(),
			Active: a.linked(), State: a.state.String(), Resources: resourceDoc(a.total), UsedResources: resourceDoc(c.used(a)),
			OfferedResources: resourceDoc(offered), Attributes: map[string]any{}})
	}
	if doc.Frameworks == nil {
		doc.Frameworks = []frameworkDoc{}
	}
	return doc
}

func taskDocOf(frameworkID string, t *task) taskDoc {
	return taskDoc{ID: t.info.TaskID.Value, Name: t.info.Name, FrameworkID: frameworkID, ExecutorID: t.executorID,
		SlaveID: t.agent.id, State: t.state.String(), Resources: resourceDoc(t.resources), Statuses: []map[string]any{}}
}

func (c *Cluster) masterState(w http.ResponseWriter, r *http.Request) {
	if c.opts.AuthenticateReadonly {
		if _, ok := c.authenticate(w, r); !ok {
			return
		}
	}
	c.mu.Lock()
	doc := c.state()
	c.mu.Unlock()
	writeJSON(w, doc)
}

// State returns the /master/state document, for tests.
func (c *Cluster) State() ([]byte, error) {
	c.mu.Lock()
	doc := c.state()
	c.mu.Unlock()
	return json.Marshal(doc)
}

// OutstandingOffers counts the offers the master has given out and not got back.
func (c *Cluster) OutstandingOffers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.offers)
}

func (c *Cluster) listAgents(w http.ResponseWriter, r *http.Request) {
	c.mu.Lock()
	doc := c.state()
	c.mu.Unlock()
	writeJSON(w, doc.Slaves)
}

// agentStateDoc is an agent's own /state (GET http://<agent>/state, also /slave(1)/state), in
// the real agent's shape: its frameworks and their executors with their sandbox directories.
// A framework is in frameworks while it has executors here (running, launching or shutting
// down), with the executors that have ended under completed_executors; once its last executor
// has ended it is in completed_frameworks, in the same shape with no executors, until it
// launches here again (Mesos's Slave::removeFramework and Slave::run).
type agentStateDoc struct {
	Version             string         `json:"version"`
	ID                  string         `json:"id"`
	PID                 string         `json:"pid"`
	Hostname            string         `json:"hostname"`
	Resources           map[string]any `json:"resources"`
	Attributes          map[string]any `json:"attributes"`
	Flags               map[string]any `json:"flags"`
	Frameworks          []agentFwDoc   `json:"frameworks"`
	CompletedFrameworks []agentFwDoc   `json:"completed_frameworks"`
}

type agentFwDoc struct {
	ID                 string         `json:"id"`
	Name               string         `json:"name"`
	User               string         `json:"user"`
	Hostname           string         `json:"hostname"`
	FailoverTimeout    float64        `json:"failover_timeout"`
	Checkpoint         bool           `json:"checkpoint"`
	Roles              []string       `json:"roles"`
	Executors          []agentExecDoc `json:"executors"`
	CompletedExecutors []agentExecDoc `json:"completed_executors"`
}

type agentExecDoc struct {
	ID             string         `json:"id"`
	Name           string         `json:"name"`
	Source         string         `json:"source"`
	Container      string         `json:"container"`
	Directory      string         `json:"directory"`
	Resources      map[string]any `json:"resources"`
	Tasks          []taskDoc      `json:"tasks"`
	QueuedTasks    []taskDoc      `json:"queued_tasks"`
	CompletedTasks []taskDoc      `json:"completed_tasks"`
}

// What a real agent keeps in memory of what has ended (slave/constants.hpp and the default of
// --max_completed_executors_per_framework).
const (
	maxCompletedFrameworks            = 50
	maxCompletedExecutorsPerFramework = 150
	maxCompletedTasksPerExecutor      = 200
)

// agentFramework is the agent's record of a framework (Mesos's slave Framework): made when the
// framework first launches here, it keeps the framework's executors that have ended, most
// recent last.
type agentFramework struct {
	id         string
	info       mesos.FrameworkInfo
	checkpoint bool
	completed  []agentExecDoc
}

// record is the agent's record of a framework launching a task here. A completed framework
// becomes a live one again, with its completed executors. Caller holds c.mu.
func (a *agent) record(f *framework) *agentFramework {
	r := a.records[f.id]
	if r == nil {
		r = &agentFramework{id: f.id}
		a.records[f.id] = r
	}
	r.info, r.checkpoint = f.info, f.checkpoint()
	a.completedFws = slices.DeleteFunc(a.completedFws, func(id string) bool { return id == f.id })
	return r
}

// executorCompleted adds an executor that has ended to its framework's completed executors,
// and moves the framework to the completed frameworks if it has no executor left here.
// Caller holds c.mu.
func (a *agent) executorCompleted(e *executor) {
	r := a.records[e.frameworkID]
	if r == nil || e.forgotten {
		return
	}
	r.completed = append(r.completed, a.execDoc(e))
	if n := len(r.completed) - maxCompletedExecutorsPerFramework; n > 0 {
		r.completed = slices.Delete(r.completed, 0, n)
	}
	for k := range a.executors {
		if k.framework == e.frameworkID {
			return
		}
	}
	if !slices.Contains(a.completedFws, r.id) {
		a.completedFws = append(a.completedFws, r.id)
	}
	if n := len(a.completedFws) - maxCompletedFrameworks; n > 0 {
		for _, id := range a.completedFws[:n] {
			delete(a.records, id)
		}
		a.completedFws = slices.Delete(a.completedFws, 0, n)
	}
}

// completeTask keeps a task whose terminal update was acknowledged for the executor's
// completed_tasks. Caller holds c.mu.
func (e *executor) completeTask(id string, t *agentTask) {
	e.completedTasks = append(e.completedTasks, e.a.taskDoc(e, id, t))
	if n := len(e.completedTasks) - maxCompletedTasksPerExecutor; n > 0 {
		e.completedTasks = slices.Delete(e.completedTasks, 0, n)
	}
}

// forgetUncheckpointed is what an agent restart loses: it does not recover the frameworks
// that do not checkpoint, so their completed executors are no longer listed nor their
// sandboxes served. Caller holds c.mu.
func (a *agent) forgetUncheckpointed() {
	for id, r := range a.records {
		if !r.checkpoint {
			delete(a.records, id)
		}
	}
	a.completedFws = slices.DeleteFunc(a.completedFws, func(id string) bool { return a.records[id] == nil })
	for p, at := range a.files {
		if !at.checkpoint {
			delete(a.files, p)
		}
	}
}

func (a *agent) taskDoc(e *executor, id string, t *agentTask) taskDoc {
	return taskDoc{ID: id, Name: t.info.Name, FrameworkID: e.frameworkID, ExecutorID: e.id, SlaveID: a.id,
		State: t.state.String(), Resources: resourceDoc(normalise(t.info.Resources)), Statuses: []map[string]any{}}
}

// execDoc is an executor as the agent's /state shows it. Caller holds c.mu.
func (a *agent) execDoc(e *executor) agentExecDoc {
	ed := agentExecDoc{ID: e.id, Name: ptrVal(e.info.Name), Source: ptrVal(e.info.Source), Container: e.containerID, Directory: e.dir,
		Resources: resourceDoc(e.resources), Tasks: []taskDoc{}, QueuedTasks: []taskDoc{},
		CompletedTasks: append([]taskDoc{}, e.completedTasks...)}
	for _, id := range sortedKeys(e.tasks) {
		t := e.tasks[id]
		td := a.taskDoc(e, id, t)
		switch {
		case terminal(t.state):
			ed.CompletedTasks = append(ed.CompletedTasks, td)
		case !t.delivered && e.command == nil:
			ed.QueuedTasks = append(ed.QueuedTasks, td)
		default:
			ed.Tasks = append(ed.Tasks, td)
		}
	}
	return ed
}

func fwDoc(id string, info mesos.FrameworkInfo, checkpoint bool) *agentFwDoc {
	fd := &agentFwDoc{ID: id, Name: info.Name, User: info.User, Hostname: ptrVal(info.Hostname),
		Checkpoint: checkpoint, Roles: info.Roles, Executors: []agentExecDoc{}, CompletedExecutors: []agentExecDoc{}}
	if info.FailoverTimeout != nil {
		fd.FailoverTimeout = *info.FailoverTimeout
	}
	return fd
}

// stateJSON serves the agent's /state.
func (a *agent) stateJSON(w http.ResponseWriter, r *http.Request) {
	a.c.mu.Lock()
	doc := agentStateDoc{Version: Version, ID: a.id, PID: a.pid(), Hostname: a.hostname, Resources: resourceDoc(a.total),
		Attributes: map[string]any{}, Flags: map[string]any{"work_dir": a.c.opts.WorkDir},
		Frameworks: []agentFwDoc{}, CompletedFrameworks: []agentFwDoc{}}
	frameworks := map[string]*agentFwDoc{}
	// Every executor the agent keeps, as Mesos's agent lists its Framework's executors: one that
	// has ended stays listed until its tasks' terminal updates are acknowledged.
	for _, e := range a.agentExecutors() {
		fd := frameworks[e.frameworkID]
		if fd == nil {
			if rec := a.records[e.frameworkID]; rec != nil {
				fd = fwDoc(e.frameworkID, rec.info, e.checkpoint)
				fd.CompletedExecutors = append(fd.CompletedExecutors, rec.completed...)
			} else {
				fd = fwDoc(e.frameworkID, a.frameworks[e.frameworkID], e.checkpoint)
			}
			frameworks[e.frameworkID] = fd
		}
		fd.Executors = append(fd.Executors, a.execDoc(e))
	}
	for _, id := range sortedKeys(frameworks) {
		doc.Frameworks = append(doc.Frameworks, *frameworks[id])
	}
	for _, id := range a.completedFws {
		rec := a.records[id]
		fd := fwDoc(id, rec.info, rec.checkpoint)
		fd.CompletedExecutors = append(fd.CompletedExecutors, rec.completed...)
		doc.CompletedFrameworks = append(doc.CompletedFrameworks, *fd)
	}
	a.c.mu.Unlock()
	writeJSON(w, doc)
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(v)
}
