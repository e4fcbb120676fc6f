package statetest

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// Ensemble is a ZooKeeper ensemble of the test's own, as production runs it: n servers of
// Debian's package (QuorumPeerMain) on loopback, each with its own client, quorum and election
// port and its own data directory. Every member is killed when the test ends, paused ones
// included.
type Ensemble struct {
	members []*Server
	links   []link // the peer links of a partitionable ensemble
}

// link is member from's connections to member to's quorum and election ports.
type link struct {
	from, to int
	proxies  []*Proxy
}

func portOf(addr string) int {
	_, p, _ := strings.Cut(addr, ":")
	n, _ := strconv.Atoi(p)
	return n
}

// Timing is an ensemble's tickTime, initLimit and syncLimit. Followers give up a leader that
// does not answer after SyncLimit ticks, and only then elect another.
type Timing struct {
	Tick                 time.Duration
	InitLimit, SyncLimit int
}

// FastTiming lets an ensemble elect and notice a dead leader within a second: tickTime=100,
// initLimit=20 (2 s to sync a follower), syncLimit=5 (a silent leader is given up after 0.5 s).
var FastTiming = Timing{Tick: 100 * time.Millisecond, InitLimit: 20, SyncLimit: 5}

// ProductionTiming is the timing of the zoo.cfg Debian ships (and ZooKeeper's sample config):
// tickTime=2000, initLimit=10, syncLimit=5, so a hung leader is given up after 10 s.
var ProductionTiming = Timing{Tick: 2 * time.Second, InitLimit: 10, SyncLimit: 5}

func (tm Timing) conf() string {
	return fmt.Sprintf("tickTime=%d\ninitLimit=%d\nsyncLimit=%d\n", tm.Tick.Milliseconds(), tm.InitLimit, tm.SyncLimit)
}

// StartEnsemble starts an ensemble of n servers with FastTiming and waits until every member
// serves and one leads. It fails the test if it cannot.
func StartEnsemble(t testing.TB, n int) *Ensemble {
	t.Helper()
	return StartEnsembleWith(t, n, FastTiming)
}

// StartEnsembleWith starts an ensemble of n servers with the given timing.
func StartEnsembleWith(t testing.TB, n int, tm Timing) *Ensemble {
	t.Helper()
	return startEnsembleTries(t, n, tm, false)
}

func startEnsembleTries(t testing.TB, n int, tm Timing, partitionable bool) *Ensemble {
	t.Helper()
	var err error
	for range 3 { // a free port can be taken between our probe and the JVM's bind
		var e *Ensemble
		if e, err = startEnsemble(t, t.TempDir(), n, tm, partitionable); err == nil {
			t.Cleanup(e.Stop)
			return e
		}
	}
	t.Fatalf("start a ZooKeeper ensemble of %d (partitionable: %v): %v", n, partitionable, err)
	return nil
}

func startEnsemble(t testing.TB, dir string, n int, tm Timing, partitionable bool) (*Ensemble, error) {
	e := &Ensemble{}
	peerPorts := make([][2]int, n) // each member's quorum and election port
	for i := range n {
		ports := make([]int, 3)
		for k := range ports {
			p, err := freePort()
			if err != nil {
				return nil, err
			}
			ports[k] = p
		}
		peerPorts[i] = [2]int{ports[1], ports[2]}
		e.members = append(e.members, &Server{dir: filepath.Join(dir, fmt.Sprint(i+1)), port: ports[0],
			Addr: fmt.Sprintf("127.0.0.1:%d", ports[0]), id: i + 1, timing: tm.conf()})
	}
	// Each member's server.N lines: its own ports, and the others' — through a proxy per link
	// when the ensemble is partitionable, so that a test can cut a member off from its peers.
	for i, m := range e.members {
		var peers strings.Builder
		for j := range n {
			q, el := peerPorts[j][0], peerPorts[j][1]
			if partitionable && j != i {
				pq := NewProxy(t, fmt.Sprintf("127.0.0.1:%d", q))
				pe := NewProxy(t, fmt.Sprintf("127.0.0.1:%d", el))
				e.links = append(e.links, link{from: i, to: j, proxies: []*Proxy{pq, pe}})
				q, el = portOf(pq.Addr), portOf(pe.Addr)
			}
			fmt.Fprintf(&peers, "server.%d=127.0.0.1:%d:%d\n", j+1, q, el)
		}
		m.peers = peers.String()
	}
	// Members are started together: each waits for a quorum, which needs the others up.
	errs := make(chan error, n)
	for _, m := range e.members {
		if err := os.MkdirAll(m.dir, 0o755); err != nil {
			return nil, err
		}
		go func() { errs <- m.Start() }()
	}
	var first error
	for range n {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	if first == nil {
		first = e.awaitLeader(60 * time.Second)
	}
	if first != nil {
		e.Stop()
		return nil, first
	}
	return e, nil
}

func (e *Ensemble) awaitLeader(d time.Duration) error {
	deadline := time.Now().Add(d)
	for e.Leader() < 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("no member of the ensemble %v reports Mode: leader within %v", e.Servers(), d)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// Servers returns the members' client addresses, in member order.
func (e *Ensemble) Servers() []string {
	out := make([]string, len(e.members))
	for i, m := range e.members {
		out[i] = m.Addr
	}
	return out
}

// Member returns the i-th member (from 0), to Stop, Start, Pause or Resume it.
func (e *Ensemble) Member(i int) *Server { return e.members[i] }

// Index returns the index of the member at client address addr, or -1.
func (e *Ensemble) Index(addr string) int {
	for i, m := range e.members {
		if m.Addr == addr {
			return i
		}
	}
	return -1
}

// Leader returns the index of the member whose srvr says it leads the quorum, or -1 if none
// does. A paused member is not asked: it would not answer, and its own view is stale.
func (e *Ensemble) Leader() int {
	for i, m := range e.members {
		if !m.Paused() && m.Mode() == "leader" {
			return i
		}
	}
	return -1
}

// StartPartitionableEnsemble starts an ensemble whose members reach each other through proxies,
// so that Isolate can cut one off from its peers while its clients still reach it.
func StartPartitionableEnsemble(t testing.TB, n int, tm Timing) *Ensemble {
	t.Helper()
	return startEnsembleTries(t, n, tm, true)
}

// Isolate cuts member i off from its peers silently, as a network partition does: the
// connections stay open and carry nothing, so the member notices only by its timeouts, and
// meanwhile goes on serving its clients from what it has. The isolation lasts until the test
// ends.
func (e *Ensemble) Isolate(i int) {
	for _, l := range e.links {
		if l.from == i || l.to == i {
			for _, p := range l.proxies {
				p.DropRequests()
				p.DropReplies()
			}
		}
	}
}

// Serving returns the index of the member the session sid is connected to, or -1.
func (e *Ensemble) Serving(sid int64) int {
	for i, m := range e.members {
		if !m.Paused() && m.Serves(sid) {
			return i
		}
	}
	return -1
}

// Stop kills every member (resuming paused ones first) and waits for them to exit.
func (e *Ensemble) Stop() {
	for _, m := range e.members {
		m.Stop()
	}
}

// LeaderSession returns the ZooKeeper session of the scheduler that leads namespace ns: the
// owner of the first node in its election (state's layout: /{ns}/ha/election).
func LeaderSession(servers []string, ns string) (int64, error) {
	conn, _, err := zk.Connect(servers, 5*time.Second, zk.WithLogInfo(false), zk.WithLogger(quietZK{}))
	if err != nil {
		return 0, err
	}
	defer conn.Close()
	dir := "/" + ns + "/ha/election"
	names, _, err := conn.Children(dir)
	if err != nil {
		return 0, fmt.Errorf("list %s: %w", dir, err)
	}
	if len(names) == 0 {
		return 0, fmt.Errorf("no candidate in %s", dir)
	}
	// Sequence numbers are the names' last ten digits.
	sort.Slice(names, func(i, j int) bool { return names[i][len(names[i])-10:] < names[j][len(names[j])-10:] })
	_, st, err := conn.Get(dir + "/" + names[0])
	if err != nil {
		return 0, fmt.Errorf("read %s/%s: %w", dir, names[0], err)
	}
	return st.EphemeralOwner, nil
}

type quietZK struct{}

func (quietZK) Printf(string, ...any) {}
