package api

import (
	"context"
	"net/http"
	"sort"

	"github.com/gorilla/mux"
)

// Overseer is what the leader knows beyond ZooKeeper, read by the console's Operations and Jobs
// pages; a Scheduler that does not implement it answers those endpoints 501.
type Overseer interface {
	// Cluster is the leader's view of Mesos: its subscription and the master's agents.
	Cluster(ctx context.Context) (Cluster, error)
	// Unplaced is, per job, why its shards found no room in the last offer cycle: reason →
	// shards (binpack's reasons: "cpu", "mem", …).
	Unplaced() map[string]map[string]int
}

// Cluster is the answer of GET /api/operate/cluster.
type Cluster struct {
	Leader      string  `json:"leader"` // host:port of the leader's HTTP server
	Subscribed  bool    `json:"subscribed"`
	FrameworkID string  `json:"frameworkId"`
	Master      string  `json:"master"` // URL of the master subscribed at; "" before the first subscription
	Agents      []Agent `json:"agents"`
	// AgentsError says why the master's state could not be read; the rest still holds.
	AgentsError string `json:"agentsError,omitempty"`
}

// Agent is a Mesos agent as /master/state gives it, with this framework's executors on it.
type Agent struct {
	ID        string     `json:"id"`
	Hostname  string     `json:"hostname"`
	Active    bool       `json:"active"`
	Total     Resources  `json:"total"`
	Used      Resources  `json:"used"`
	Offered   Resources  `json:"offered"`
	Free      Resources  `json:"free"` // total − used
	Executors []Executor `json:"executors"`
}

// Resources are an agent's scalar resources.
type Resources struct {
	CPUs   float64 `json:"cpus"`
	MemMB  float64 `json:"mem"`
	DiskMB float64 `json:"disk"`
}

// Executor is one of this framework's live executors.
type Executor struct {
	ID      string `json:"id"`
	AppName string `json:"appName"`
	Tasks   int    `json:"tasks"` // its tasks the master counts as not terminal
}

func (s *Server) clusterRoutes(r *mux.Router) {
	r.HandleFunc("/api/operate/cluster", func(w http.ResponseWriter, r *http.Request) {
		o, ok := s.sched.(Overseer)
		if !ok {
			writeError(w, http.StatusNotImplemented, "the cluster view is not available here", "")
			return
		}
		c, err := o.Cluster(r.Context())
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if c.Agents == nil {
			c.Agents = []Agent{}
		}
		sort.Slice(c.Agents, func(i, j int) bool { return c.Agents[i].ID < c.Agents[j].ID })
		for i := range c.Agents {
			if c.Agents[i].Executors == nil {
				c.Agents[i].Executors = []Executor{}
			}
		}
		writeJSON(w, http.StatusOK, c)
	}).Methods(reads()...)
	// Unplaced reasons are per job, but one answer for all of them spares the Jobs page a
	// request per job.
	r.HandleFunc("/api/job/unplaced", func(w http.ResponseWriter, r *http.Request) {
		o, ok := s.sched.(Overseer)
		if !ok {
			writeError(w, http.StatusNotImplemented, "unplaced reasons are not available here", "")
			return
		}
		u := o.Unplaced()
		if u == nil {
			u = map[string]map[string]int{}
		}
		writeJSON(w, http.StatusOK, u)
	}).Methods(reads()...)
}
