package state

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/sirupsen/logrus"
)

// Real Mesos 1.x masters contend for leadership in ZooKeeper under the path of their --zk URL:
// each creates an ephemeral sequential node json.info_NNNNNNNNNN holding its MasterInfo as JSON,
// and the leader is the one with the lowest sequence (older masters also publish info_ nodes
// in protobuf, and the replicated log its log_replicas: both are ignored here).
const masterNodePrefix = "json.info_"

// MesosZK is a Mesos master URL of the zk:// kind: zk://[user:pass@]host:port[,host:port…]/path.
type MesosZK struct {
	Servers []string
	Auth    string // user:password for ZooKeeper digest authentication; "" for none
	Path    string
}

// ParseMesosZK parses a zk:// Mesos master URL.
func ParseMesosZK(s string) (MesosZK, error) {
	rest, ok := strings.CutPrefix(s, "zk://")
	if !ok {
		return MesosZK{}, fmt.Errorf("%q is not a zk:// URL", s)
	}
	hosts, p, _ := strings.Cut(rest, "/")
	if strings.Contains(p, "@") {
		// As Mesos reads it, the servers end at the first '/': an '@' after it is a password
		// holding a '/', which the errors below would print a part of.
		return MesosZK{}, fmt.Errorf("zk:// URL: an '@' after the first '/': credentials may not contain '/'")
	}
	var u MesosZK
	if at := strings.LastIndex(hosts, "@"); at >= 0 {
		u.Auth, hosts = hosts[:at], hosts[at+1:]
		if user, pass, ok := strings.Cut(u.Auth, ":"); !ok || user == "" || pass == "" {
			return MesosZK{}, fmt.Errorf("zk:// URL: credentials must be user:password")
		}
	}
	for _, h := range strings.Split(hosts, ",") {
		host, port, err := net.SplitHostPort(h)
		if err != nil || host == "" {
			return MesosZK{}, fmt.Errorf("zk:// URL: server %q is not host:port", h)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
			return MesosZK{}, fmt.Errorf("zk:// URL: server %q has no valid port", h)
		}
		u.Servers = append(u.Servers, h)
	}
	u.Path = path.Clean("/" + p)
	if u.Path == "/" || u.Path != "/"+strings.TrimSuffix(p, "/") {
		return MesosZK{}, fmt.Errorf("zk:// URL %s: the path must name the masters' node, e.g. zk://host:2181/mesos", u)
	}
	return u, nil
}

// String is the URL with the password left out, for logs and errors.
func (u MesosZK) String() string {
	auth := ""
	if user, _, ok := strings.Cut(u.Auth, ":"); ok {
		auth = user + ":…@"
	}
	return "zk://" + auth + strings.Join(u.Servers, ",") + u.Path
}

// MesosMaster is a master as it publishes itself in ZooKeeper.
type MesosMaster struct {
	ID      string
	Address string // host:port of its HTTP API
	node    string // its json.info_ node
}

// masterInfo is the part of Mesos' MasterInfo (as JSON) that locates a master.
type masterInfo struct {
	ID       string `json:"id"`
	IP       uint32 `json:"ip"` // IPv4 in network byte order, read as a little-endian integer
	Port     uint32 `json:"port"`
	Hostname string `json:"hostname"`
	Address  *struct {
		Hostname string `json:"hostname"`
		IP       string `json:"ip"`
		Port     int32  `json:"port"`
	} `json:"address"`
}

// parseMasterInfo reads a json.info_ node. Like Mesos' own redirects, it prefers the host name
// to the IP: a master's TLS certificate names its host.
func parseMasterInfo(data []byte) (MesosMaster, error) {
	var mi masterInfo
	if err := json.Unmarshal(data, &mi); err != nil {
		return MesosMaster{}, fmt.Errorf("MasterInfo is not JSON: %w", err)
	}
	host, port := mi.Hostname, int(mi.Port)
	if a := mi.Address; a != nil {
		host, port = a.Hostname, int(a.Port)
		if host == "" {
			host = a.IP
		}
	}
	if host == "" && mi.IP != 0 {
		b := make([]byte, 4)
		binary.LittleEndian.PutUint32(b, mi.IP)
		host = net.IP(b).String()
	}
	if host == "" || port <= 0 || port > 65535 {
		return MesosMaster{}, fmt.Errorf("MasterInfo %s names no host and port", data)
	}
	return MesosMaster{ID: mi.ID, Address: net.JoinHostPort(host, strconv.Itoa(port))}, nil
}

// lowestMasterNode is the json.info_ node with the lowest sequence, or "".
func lowestMasterNode(children []string) string {
	var nodes []string
	for _, c := range children {
		if seq, ok := strings.CutPrefix(c, masterNodePrefix); ok && seq != "" {
			nodes = append(nodes, c)
		}
	}
	if len(nodes) == 0 {
		return ""
	}
	// The sequence is a fixed-width decimal, but compare it as a number all the same.
	sort.Slice(nodes, func(i, j int) bool { return sequence(nodes[i]) < sequence(nodes[j]) })
	return nodes[0]
}

func sequence(node string) int64 {
	n, err := strconv.ParseInt(strings.TrimPrefix(node, masterNodePrefix), 10, 64)
	if err != nil {
		return 1<<63 - 1
	}
	return n
}

// MasterDetector follows the leading Mesos master in ZooKeeper, with watches, as Mesos' own
// detector does. It keeps one session of its own.
type MasterDetector struct {
	u    MesosZK
	conn *zk.Conn
	sess *session
	log  logrus.FieldLogger

	mu      sync.Mutex
	cur     *MesosMaster  // nil while no master leads
	changed chan struct{} // closed and replaced when cur changes

	stop      func()
	done      chan struct{}
	closeOnce sync.Once
}

// DetectMesosMaster connects to the ZooKeeper of u and follows its leading master until Close.
// It fails if no session is established before ctx ends.
func DetectMesosMaster(ctx context.Context, u MesosZK, sessionTimeout time.Duration, log logrus.FieldLogger) (*MasterDetector, error) {
	sess := newSession(nil)
	conn, _, err := zk.Connect(u.Servers, sessionTimeout,
		zk.WithLogger(zkLogger{log}), zk.WithLogInfo(false), zk.WithDialer(boundedDialer(sessionTimeout, len(u.Servers))),
		zk.WithEventCallback(sess.observe))
	if err != nil {
		return nil, fmt.Errorf("connect to the ZooKeeper of %s: %w", u, err)
	}
	if err := sess.waitConnected(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("cannot reach the ZooKeeper of %s: %w", u, err)
	}
	if u.Auth != "" {
		if err := conn.AddAuth("digest", []byte(u.Auth)); err != nil {
			conn.Close()
			return nil, fmt.Errorf("authenticate to the ZooKeeper of %s: %w", u, err)
		}
	}
	run, stop := context.WithCancel(context.Background())
	d := &MasterDetector{u: u, conn: conn, sess: sess, log: log.WithField("masters", u.String()), changed: make(chan struct{}), stop: stop, done: make(chan struct{})}
	go d.follow(run)
	return d, nil
}

// Leader returns the leading master (ok false while none leads) and a channel closed when that
// changes.
func (d *MasterDetector) Leader() (m MesosMaster, ok bool, changed <-chan struct{}) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cur != nil {
		m, ok = *d.cur, true
	}
	return m, ok, d.changed
}

// Close stops following and ends the session (a candidate's node goes with it).
func (d *MasterDetector) Close() {
	d.closeOnce.Do(func() {
		d.stop()
		<-d.done
		d.conn.Close()
	})
}

func (d *MasterDetector) set(m *MesosMaster) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if (m == nil) == (d.cur == nil) && (m == nil || *m == *d.cur) {
		return
	}
	d.cur = m
	close(d.changed)
	d.changed = make(chan struct{})
	if m == nil {
		d.log.Warn("no Mesos master leads")
	} else {
		d.log.WithFields(logrus.Fields{"master": m.Address, "master_id": m.ID}).Info("leading Mesos master detected")
	}
}

// follow reads the leader again at every change of the masters' children, until ctx ends. While
// ZooKeeper cannot be read the last known leader stands, as in Mesos' detector: a scheduler that
// lost its ZooKeeper connection can still talk to the master it knows.
func (d *MasterDetector) follow(ctx context.Context) {
	defer close(d.done)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		watch, err := d.read()
		if err != nil {
			d.log.WithError(err).Debug("cannot read the Mesos masters; retrying")
			_, _, _, sessChanged := d.sess.snapshot()
			select {
			case <-ctx.Done():
			case <-sessChanged:
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		select {
		case <-ctx.Done():
		case <-watch:
		}
	}
}

// read sets the leader from ZooKeeper and returns the watch that fires at the next change.
func (d *MasterDetector) read() (<-chan zk.Event, error) {
	children, _, watch, err := d.conn.ChildrenW(d.u.Path)
	if errors.Is(err, zk.ErrNoNode) {
		exists, _, w, err := d.conn.ExistsW(d.u.Path)
		if err != nil {
			return nil, err
		}
		if exists { // created in between: list it
			return closedWatch(), nil
		}
		d.set(nil)
		return w, nil
	}
	if err != nil {
		return nil, err
	}
	lowest := lowestMasterNode(children)
	if lowest == "" {
		d.set(nil)
		return watch, nil
	}
	data, _, err := d.conn.Get(d.u.Path + "/" + lowest)
	if errors.Is(err, zk.ErrNoNode) {
		return closedWatch(), nil // it left while we looked: list again
	}
	if err != nil {
		return nil, err
	}
	m, err := parseMasterInfo(data)
	if err != nil {
		// A leader that cannot be read cannot be followed; say so, and wait for the next one.
		d.log.WithError(err).WithField("node", lowest).Error("the leading Mesos master's node cannot be read")
		d.set(nil)
		return watch, nil
	}
	m.node = lowest
	d.set(&m)
	return watch, nil
}

func closedWatch() <-chan zk.Event {
	ch := make(chan zk.Event)
	close(ch)
	return ch
}

// MasterCandidacy is a master contending for leadership the way Mesos masters do (for
// mesos-local): its json.info_ node leads when it has the lowest sequence.
type MasterCandidacy struct {
	*MasterDetector
	node string
	lost <-chan struct{}
}

// ContendMesosMaster publishes info (a MasterInfo as JSON) under u's path and returns at once;
// Leading tells whether this candidate leads now. The node lives as long as the session: a
// candidate whose session expired has lost (Lost), as a real master that then aborts.
func ContendMesosMaster(ctx context.Context, u MesosZK, info []byte, sessionTimeout time.Duration, log logrus.FieldLogger) (*MasterCandidacy, error) {
	if _, err := parseMasterInfo(info); err != nil {
		return nil, err
	}
	d, err := DetectMesosMaster(ctx, u, sessionTimeout, log)
	if err != nil {
		return nil, err
	}
	lost := d.sess.nextExpiry()
	acl := zk.WorldACL(zk.PermAll)
	if u.Auth != "" { // as Mesos: everyone may read, the creator may do all
		acl = append(zk.AuthACL(zk.PermAll), zk.WorldACL(zk.PermRead)...)
	}
	p := ""
	for _, part := range strings.Split(strings.TrimPrefix(u.Path, "/"), "/") {
		p += "/" + part
		if _, err := d.conn.Create(p, nil, 0, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			d.Close()
			return nil, fmt.Errorf("create %s: %w", p, err)
		}
	}
	created, err := d.conn.Create(u.Path+"/"+masterNodePrefix, info, zk.FlagEphemeral|zk.FlagSequence, acl)
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("publish the master under %s: %w", u, err)
	}
	return &MasterCandidacy{MasterDetector: d, node: path.Base(created), lost: lost}, nil
}

// Leading tells whether this candidate is the leading master, and returns a channel closed
// when that may have changed.
func (c *MasterCandidacy) Leading() (bool, MesosMaster, <-chan struct{}) {
	m, ok, changed := c.Leader()
	return ok && m.node == c.node, m, changed
}

// Lost is closed when the candidate's session expired: its node is gone.
func (c *MasterCandidacy) Lost() <-chan struct{} { return c.lost }
