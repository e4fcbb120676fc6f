// Package mesoslocal is a single-host implementation of a Mesos 1.x master and agents that
// speaks the real v1 scheduler and executor HTTP APIs (SPEC §10), so that ejcloud's scheduler
// and executor run against it unchanged and cannot tell it from a real cluster. Executors are
// real child processes. It follows ../shared/MESOS.md, which records what real Mesos does on
// the wire; its §9 checklist is what the conformance tests of this package check.
//
//	scheduler ──POST /api/v1/scheduler──▶ master: frameworks, offers, tasks (master view)
//	          ◀──RecordIO events──────────         │ runTask, kill, shutdown, message
//	                                               ▼
//	executor  ──POST /api/v1/executor───▶ agent: executors (processes), status update manager
//	          ◀──RecordIO events──────────         │ forward head update while linked
//	                                               ▼ master → UPDATE → scheduler → ACKNOWLEDGE
//
// One mutex guards the whole cluster; timers and process waits take it briefly. Events are
// queued to per-connection streams and written by the connection's own goroutine, so a slow
// client never blocks the cluster.
package mesoslocal

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/sirupsen/logrus"
)

// Version is reported as the master's version.
const Version = "1.11.0"

// Cluster is a master with its agents.
type Cluster struct {
	opts  Options
	log   logrus.FieldLogger
	clock Clock
	cz    *containment

	masterID string // the first leading master's: agent ids and container names carry it
	url      string // http://host:port of the master
	host     string
	port     int

	mu            sync.Mutex       // guards every field below and all agent, executor and task state
	masterInfo    mesos.MasterInfo // the leading master's; its id changes at a master failover
	frameworks    map[string]*framework
	removed       []string // removed framework ids, oldest first
	agents        []*agent
	offers        map[string]*offer
	nextFramework int
	nextOffer     int
	allocTimer    Timer
	closed        bool
	// failovers counts master failovers, so that a timer of an earlier master's recovery does
	// not act for a later one; recoveredTimer marks unreachable the agents that have not
	// re-registered within the agent re-registration timeout (failover.go).
	failovers      int
	recoveredTimer Timer
	// cutOff holds, per framework id, the gate of a partition between that framework's
	// scheduler and the master (PartitionFramework), closed when it heals. By id, not on the
	// framework: the partition is in the network and outlives the master's record of it.
	cutOff map[string]chan struct{}

	ln, standbyLn net.Listener
	srv, standby  *http.Server
	wg            sync.WaitGroup // HTTP servers and executor process waiters
}

// New starts a master and its agents, listening on loopback.
func New(opts Options) (*Cluster, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	scalars, ports, err := parseResources(opts.AgentResources)
	if err != nil {
		return nil, fmt.Errorf("mesoslocal: --agent-resources: %w", err)
	}
	c := &Cluster{
		opts: opts, log: opts.Logger, clock: opts.Clock,
		masterID:   newUUID(),
		frameworks: map[string]*framework{},
		offers:     map[string]*offer{},
		cutOff:     map[string]chan struct{}{},
	}
	if c.cz, err = newContainment(opts.Containment, c.masterID[:8], c.log); err != nil {
		return nil, err
	}
	c.ln, err = net.Listen("tcp", opts.Addr)
	if err != nil {
		c.cz.close()
		return nil, fmt.Errorf("mesoslocal: listen on %s: %w", opts.Addr, err)
	}
	addr := c.ln.Addr().(*net.TCPAddr)
	c.host, c.port = addr.IP.String(), addr.Port
	c.url = "http://" + net.JoinHostPort(c.host, strconv.Itoa(c.port))
	port32 := uint32(c.port)
	c.masterInfo = mesos.MasterInfo{
		ID: c.masterID, IP: ipv4ToUint32(addr.IP), Port: &port32,
		PID: ptr("master@" + net.JoinHostPort(c.host, strconv.Itoa(c.port))), Hostname: ptr(c.host),
		Version: ptr(Version), Address: &mesos.Address{Hostname: ptr(c.host), IP: ptr(c.host), Port: int32(c.port)},
	}
	for i := range opts.Agents {
		a, err := c.newAgent(i, buildResources(scalars, ports))
		if err != nil {
			c.Close()
			return nil, err
		}
		c.agents = append(c.agents, a)
	}
	c.srv = &http.Server{Handler: c.routes(), ReadHeaderTimeout: 10 * time.Second}
	c.serve(c.srv, c.ln)
	if opts.StandbyAddr != "" {
		if c.standbyLn, err = net.Listen("tcp", opts.StandbyAddr); err != nil {
			c.Close()
			return nil, fmt.Errorf("mesoslocal: listen on standby %s: %w", opts.StandbyAddr, err)
		}
		c.standby = &http.Server{Handler: http.HandlerFunc(c.redirectToLeader), ReadHeaderTimeout: 10 * time.Second}
		c.serve(c.standby, c.standbyLn)
	}
	c.mu.Lock()
	c.scheduleAllocation()
	c.mu.Unlock()
	c.log.WithFields(logrus.Fields{"master": c.url, "agents": len(c.agents)}).Info("mesos-local started")
	return c, nil
}

func (c *Cluster) serve(srv *http.Server, ln net.Listener) {
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			c.log.WithError(err).Error("HTTP server stopped")
		}
	}()
}

// leader is Options.Leader, or "this master leads" without one.
func (c *Cluster) leader() (leading bool, leader string) {
	if c.opts.Leader == nil {
		return true, ""
	}
	return c.opts.Leader()
}

// MasterInfo is the MasterInfo this master publishes, as JSON (how Mesos writes it to
// ZooKeeper: proto field names).
func (c *Cluster) MasterInfo() ([]byte, error) {
	c.mu.Lock()
	mi := c.masterInfo
	c.mu.Unlock()
	return json.Marshal(&mi)
}

// URL returns the master's base URL, e.g. http://127.0.0.1:5050.
func (c *Cluster) URL() string { return c.url }

// StandbyURL returns the URL of the redirecting standby listener, if one was configured.
func (c *Cluster) StandbyURL() string {
	if c.standbyLn == nil {
		return ""
	}
	return "http://" + c.standbyLn.Addr().String()
}

// AgentIDs returns the agents' ids in creation order.
func (c *Cluster) AgentIDs() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := make([]string, len(c.agents))
	for i, a := range c.agents {
		ids[i] = a.id
	}
	return ids
}

// Close kills every executor process the cluster started, closes every connection and waits
// for all of its goroutines.
func (c *Cluster) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	for _, t := range []Timer{c.allocTimer, c.recoveredTimer} {
		if t != nil {
			t.Stop()
		}
	}
	for _, f := range c.frameworks {
		f.stopTimers()
		if f.stream != nil {
			f.stream.close()
		}
	}
	// Healed, so that the streams and calls a partition holds end now, not when the server's
	// shutdown gives up on them.
	for id := range c.cutOff {
		c.healFramework(id)
	}
	for _, a := range c.agents {
		a.shutdown()
	}
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if c.srv != nil {
		c.srv.Shutdown(ctx)
		c.srv.Close()
	}
	if c.standby != nil {
		c.standby.Close()
	}
	c.wg.Wait() // the process waiters have ended every container
	c.cz.close()
	return nil
}

// routes serves the master: the scheduler API, state, and fault injection.
func (c *Cluster) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/api/v1/scheduler", c.schedulerAPI)
	mux.HandleFunc("GET /master/state", c.masterState)
	mux.HandleFunc("GET /state", c.masterState)
	mux.HandleFunc("GET /local/agents", c.listAgents)
	mux.HandleFunc("POST /local/agents/{id}/{action}", c.agentAction)
	mux.HandleFunc("POST /local/frameworks/{id}/{action}", c.frameworkAction)
	mux.HandleFunc("POST /local/master/failover", c.masterFailover)
	return mux
}

func (c *Cluster) redirectToLeader(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Location", "//"+net.JoinHostPort(c.host, strconv.Itoa(c.port))+r.URL.Path)
	w.WriteHeader(http.StatusTemporaryRedirect)
}

func newUUID() string {
	b := uuidBytes()
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// uuidBytes returns a random RFC 4122 v4 uuid, the 16 raw bytes Mesos puts in status updates.
func uuidBytes() []byte {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		panic(fmt.Sprintf("mesoslocal: crypto/rand: %v", err))
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return b
}

func ptr[T any](v T) *T { return &v }

func ipv4ToUint32(ip net.IP) uint32 {
	v4 := ip.To4()
	if v4 == nil {
		return 0
	}
	// Mesos stores the address in network byte order in a uint32.
	return uint32(v4[0]) | uint32(v4[1])<<8 | uint32(v4[2])<<16 | uint32(v4[3])<<24
}

func (c *Cluster) now() float64 {
	return float64(c.clock.Now().UnixNano()) / 1e9
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// WorkDir returns the directory holding the agents' sandboxes.
func (c *Cluster) WorkDir() string { return c.opts.WorkDir }
