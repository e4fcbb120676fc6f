// Package state keeps ejcloud's state in ZooKeeper (SPEC §4): app and job configs, the ready,
// running and failover queues, disable markers, the FrameworkID and leader election. It is the
// only package that imports the ZooKeeper client.
//
// Every change that touches more than one node is one ZooKeeper multi, and a Store returned by
// Leadership.Store adds a version check of its own election node to every write, so that a
// deposed leader's writes fail (fencing). ZooKeeper errors are translated to this package's
// sentinels; a session expiry is never swallowed: it ends any Leadership and surfaces as
// ErrSessionExpired.
//
//	POST /api/job/register → config.DecodeJob → Store.CreateJob: /config/job/<job>
//	producer: cron fire    → Store.AddReady: /state/ready/<job>
//	offer cycle            → Store.RecordLaunch: one multi (running+, failover−, ready−)
//	status update          → Store.EndTask: one multi (running−, failover+ or ready=1)
//	unhealable failure     → Store.EndTaskAndStop: one multi (running−, stopped+)
package state

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/sirupsen/logrus"
)

// Sentinel errors. Errors returned by this package wrap one of them (errors.Is), and the
// ZooKeeper error beneath where there is one.
var (
	ErrNotFound       = errors.New("state: not found")
	ErrExists         = errors.New("state: already exists")
	ErrConflict       = errors.New("state: changed concurrently")
	ErrNotLeader      = errors.New("state: not the leader (fenced write refused)")
	ErrQueueFull      = errors.New("state: queue full")
	ErrDisabled       = errors.New("state: job or app disabled")
	ErrUnavailable    = errors.New("state: ZooKeeper unavailable")
	ErrSessionExpired = errors.New("state: ZooKeeper session expired")
	ErrCorrupt        = errors.New("state: unreadable node")
	// ErrTooLarge: a multi larger than ZooKeeper takes in one request. It was not sent, so
	// nothing changed; the caller splits its work into smaller multis.
	ErrTooLarge = errors.New("state: write too large for one ZooKeeper request")

	// ErrAppNotFound is returned when a job names an app that does not exist.
	ErrAppNotFound = fmt.Errorf("%w: app", ErrNotFound)
)

// Config says how to reach ZooKeeper.
type Config struct {
	Servers        []string      // host:port, at least one
	Namespace      string        // root node, without slashes; default "elastic-job-cloud"
	SessionTimeout time.Duration // default 10s
	// Digest "user:password" enables digest authentication; nodes are then created with a
	// creator-only ACL.
	Digest string
	// QueueSizeLimit is --job-state-queue-size: adds to ready, failover or disable are refused
	// when the root already has this many children. Default 10000.
	QueueSizeLimit int
	Logger         logrus.FieldLogger
	// JuteMaxBuffer is the servers' jute.maxbuffer (their -Djute.maxbuffer): the most ZooKeeper
	// takes in one request, and what this client reads in one reply. It bounds every multi, and
	// so a job's shards, which a run launches in one write. 0 means ZooKeeper's default,
	// 1048575. Set it no higher than every server of the ensemble is set: a server closes the
	// connection of a client that sends more.
	JuteMaxBuffer int
	// ObserveOp, if set, is told the latency of every ZooKeeper request (op: create, get,
	// exists, children, multi, delete or sync), failed ones too. It is called on the
	// requesting goroutine and must not block: the scheduler feeds a histogram with it.
	ObserveOp func(op string, d time.Duration)
}

// Store is a handle on ejcloud's state. It is safe for concurrent use.
type Store struct {
	*shared
	fence *Fence      // non-nil on a leader's fenced view
	mv    *mirrorView // non-nil on a leader's view with its model (mirror.go)
}

// shared is the part of a Store that its fenced views share.
type shared struct {
	conn       *zk.Conn
	servers    []string // for the extra sessions a load reads through (loadreaders.go)
	digest     string
	root       string
	acl        []zk.ACL
	queueLimit int
	timeout    time.Duration
	log        logrus.FieldLogger
	sess       *session
	roundTrips atomic.Uint64
	multis     atomic.Uint64
	observe    func(op string, d time.Duration) // Config.ObserveOp, or nil
	watchers   atomic.Pointer[watchFunc]        // the mirror's, told of every watch event
	jute       int                              // Config.JuteMaxBuffer, or its default
	// parents caches the running/failover job nodes known to exist, so that a launch does not
	// pay a round trip to create them; an entry is dropped when a write finds it wrong.
	parents sync.Map
}

// Fence is a leader's election node: every write of a fenced Store checks that it still exists
// at this version.
type Fence struct {
	Path    string
	Version int32
	// refused, if set (a Leadership's), is told when ZooKeeper refuses a write for the fence:
	// the election node changed or went, or the write receipt is gone. The leadership is over
	// then, whatever its watch has seen, and must end so that the instance campaigns again
	// rather than lead on with every write refused.
	refused func(error)
}

func (f *Fence) fenceRefused(err error) {
	if f != nil && f.refused != nil {
		f.refused(err)
	}
}

// Connect opens a session and creates the layout's parent nodes. It fails if no session is
// established before ctx ends.
func Connect(ctx context.Context, cfg Config) (*Store, error) {
	if len(cfg.Servers) == 0 {
		return nil, errors.New("state: no ZooKeeper servers configured")
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "elastic-job-cloud"
	}
	if strings.Contains(cfg.Namespace, "/") {
		return nil, fmt.Errorf("state: namespace %q must not contain '/'", cfg.Namespace)
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = 10 * time.Second
	}
	if cfg.QueueSizeLimit <= 0 {
		cfg.QueueSizeLimit = 10000
	}
	if cfg.Logger == nil {
		cfg.Logger = logrus.StandardLogger()
	}
	jute, err := cfg.juteMaxBuffer()
	if err != nil {
		return nil, err
	}
	sess := newSession(cfg.Logger)
	var sh *shared
	ready := make(chan struct{})
	conn, _, err := zk.Connect(cfg.Servers, cfg.SessionTimeout,
		zk.WithLogger(zkLogger{cfg.Logger}), zk.WithLogInfo(false), zk.WithDialer(boundedDialer(cfg.SessionTimeout, len(cfg.Servers))),
		sendBuffer(jute),
		zk.WithEventCallback(func(ev zk.Event) {
			sess.observe(ev)
			if ev.Type == zk.EventSession {
				return
			}
			<-ready // watch events come only after the shared part exists
			if w := sh.watchers.Load(); w != nil {
				w.f(ev)
			}
		}))
	if err != nil {
		return nil, fmt.Errorf("connect to ZooKeeper at %s: %w", strings.Join(cfg.Servers, ","), err)
	}
	sh = &shared{
		conn: conn, servers: cfg.Servers, digest: cfg.Digest, root: "/" + cfg.Namespace, acl: zk.WorldACL(zk.PermAll),
		queueLimit: cfg.QueueSizeLimit, timeout: cfg.SessionTimeout, log: cfg.Logger, sess: sess, observe: cfg.ObserveOp,
		jute: jute,
	}
	close(ready)
	s := &Store{shared: sh}
	if err := s.connected(ctx); err != nil {
		return nil, err
	}
	if err := s.ensureLayout(ctx); err != nil {
		conn.Close()
		return nil, err
	}
	if cfg.Digest != "" {
		if err := s.secureNamespace(ctx); err != nil {
			conn.Close()
			return nil, fmt.Errorf("state: give the namespace the digest's creator-only ACL: %w", err)
		}
	}
	return s, nil
}

// Close ends the session; its ephemeral nodes (an election node) go at once.
func (s *Store) Close() {
	s.sess.closing.Store(true)
	s.conn.Close()
}

// Server returns the address of the ZooKeeper server the session is connected to, or is
// trying to connect to.
func (s *Store) Server() string { return s.conn.Server() }

// SessionState says whether the session is usable now, and how many times it has expired.
func (s *Store) SessionState() (connected bool, expiries int) {
	connected, _, expiries, _ = s.sess.snapshot()
	return connected, expiries
}

// RoundTrips counts the ZooKeeper requests this Store and its views have made.
func (s *Store) RoundTrips() uint64 { return s.roundTrips.Load() }

// begin counts one ZooKeeper request about to be sent and returns its start, for end.
func (s *shared) begin() time.Time {
	s.roundTrips.Add(1)
	return time.Now()
}

// end reports a request's latency to the observer, if there is one.
func (s *shared) end(op string, start time.Time) {
	if s.observe != nil {
		s.observe(op, time.Since(start))
	}
}

// Multis counts the multis (the writes) among them.
func (s *Store) Multis() uint64 { return s.multis.Load() }

// Namespace returns the root path, e.g. "/elastic-job-cloud".
func (s *Store) Namespace() string { return s.root }

// SessionExpired returns a channel closed the next time the session expires.
func (s *Store) SessionExpired() <-chan struct{} { return s.sess.nextExpiry() }

// Fenced returns a view of s whose writes all check f first.
func (s *Store) Fenced(f Fence) *Store { return &Store{shared: s.shared, fence: &f, mv: s.mv} }

// Layout, relative to the namespace root (SPEC §4).
const (
	appsDir        = "config/app"
	jobsDir        = "config/job"
	readyDir       = "state/ready"
	runningDir     = "state/running"
	failoverDir    = "state/failover"
	disableAppDir  = "state/disable/app"
	disableJobDir  = "state/disable/job"
	stoppedDir     = "state/stopped"
	firesDir       = "state/fires"
	retryDir       = "state/retry"
	executorsDir   = "state/executors"
	unlistedDir    = "state/unlisted"
	restartsDir    = "state/restarts"
	frameworkIDKey = "ha/framework_id"
	electionDir    = "ha/election"
)

func (s *Store) path(parts ...string) string { return s.root + "/" + strings.Join(parts, "/") }

func (s *Store) ensureLayout(ctx context.Context) error {
	dirs := []string{"", "config", appsDir, jobsDir, "state", readyDir, runningDir, failoverDir,
		"state/disable", disableAppDir, disableJobDir, stoppedDir, firesDir, retryDir, executorsDir, unlistedDir, restartsDir, dependsGuardKey, "ha", electionDir}
	for _, d := range dirs {
		p := strings.TrimSuffix(s.path(d), "/")
		if err := s.ensure(ctx, p); err != nil {
			return fmt.Errorf("create %s: %w", p, err)
		}
	}
	return nil
}

// ensure creates an empty node if it is missing (not fenced: layout nodes are not state).
func (s *Store) ensure(ctx context.Context, p string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.mv != nil && s.mv.m.covered(p) {
		if n, _, err := s.mirroredNode(ctx, p); err != nil || n.exists {
			return err
		}
		m := s.mv.m
		m.writeMu.Lock()
		defer m.writeMu.Unlock()
		if err := s.sendMirrored(ctx, []any{s.createOp(p, nil)}); err != nil && !errors.Is(err, ErrExists) {
			return err
		}
		return nil
	}
	start := s.begin()
	_, err := s.conn.Create(p, nil, 0, s.acl)
	s.end("create", start)
	if err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return translate(err)
	}
	return nil
}

// translate maps a ZooKeeper error to this package's sentinel, keeping the original.
func translate(err error) error {
	var sentinel error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrUnavailable), errors.Is(err, ErrNotFound), errors.Is(err, ErrExists),
		errors.Is(err, ErrConflict), errors.Is(err, ErrSessionExpired):
		return err // translated already
	case errors.Is(err, zk.ErrNoNode):
		sentinel = ErrNotFound
	case errors.Is(err, zk.ErrNodeExists):
		sentinel = ErrExists
	case errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNotEmpty):
		sentinel = ErrConflict
	case errors.Is(err, zk.ErrSessionExpired):
		sentinel = ErrSessionExpired
	case errors.Is(err, zk.ErrConnectionClosed), errors.Is(err, zk.ErrNoServer),
		errors.Is(err, zk.ErrClosing), errors.Is(err, zk.ErrSessionMoved), brokenSocket(err):
		sentinel = ErrUnavailable
	default:
		return err
	}
	return fmt.Errorf("%w: %w", sentinel, err)
}

// sync makes the server this session is connected to catch up with the quorum's leader, so
// that a read after it sees every write committed before it: among them a write of this
// session's whose answer was lost with a connection to another server.
func (s *Store) sync(ctx context.Context, p string) error {
	err := s.untilSessionFails(ctx, func() error {
		start := s.begin()
		_, err := s.conn.Sync(p)
		s.end("sync", start)
		return translateConn(err)
	})
	if err != nil {
		return fmt.Errorf("sync %s: %w", p, translate(err))
	}
	return nil
}

// brokenSocket: go-zookeeper hands a request whose write to the socket failed the socket's
// error (EPIPE, ECONNRESET, a write timeout) rather than ErrConnectionClosed. The request may or
// may not have reached the server, as with a lost answer, and the connection is closing.
func brokenSocket(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false // a net.Error too, but the caller's
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, os.ErrDeadlineExceeded)
}

// translateConn marks a broken connection as ErrUnavailable and keeps every other error as
// ZooKeeper gave it, for the callers that test it against zk's errors themselves.
func translateConn(err error) error {
	if t := translate(err); errors.Is(t, ErrUnavailable) {
		return t
	}
	return err
}

// node is one read: data and version, or absent.
type node struct {
	data    []byte
	version int32
	exists  bool
	stat    *zk.Stat
	mn      *mnode // the mirrored node it came from, if any (for cachedParse)
}

func (s *Store) get(ctx context.Context, p string) (node, error) {
	if s.mv != nil && s.mv.m.covered(p) {
		n, mn, err := s.mirroredNode(ctx, p)
		n.mn = mn
		return n, err
	}
	if err := ctx.Err(); err != nil {
		return node{}, err
	}
	var data []byte
	var stat *zk.Stat
	err := s.untilSessionFails(ctx, func() (err error) {
		start := s.begin()
		data, stat, err = s.conn.Get(p)
		s.end("get", start)
		return translateConn(err)
	})
	if errors.Is(err, zk.ErrNoNode) {
		return node{}, nil
	}
	if err != nil {
		return node{}, fmt.Errorf("read %s: %w", p, translate(err))
	}
	return node{data: data, version: stat.Version, exists: true, stat: stat}, nil
}

func (s *Store) stat(ctx context.Context, p string) (*zk.Stat, error) {
	if s.mv != nil && s.mv.m.covered(p) {
		n, _, err := s.mirroredNode(ctx, p)
		return n.stat, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var ok bool
	var stat *zk.Stat
	err := s.untilSessionFails(ctx, func() (err error) {
		start := s.begin()
		ok, stat, err = s.conn.Exists(p)
		s.end("exists", start)
		return translateConn(err)
	})
	if err != nil {
		return nil, fmt.Errorf("stat %s: %w", p, translate(err))
	}
	if !ok {
		return nil, nil
	}
	return stat, nil
}

// children lists a node's children, sorted; a missing node has none.
func (s *Store) children(ctx context.Context, p string) ([]string, error) {
	if s.mv != nil && s.mv.m.covered(p) {
		return s.mirroredChildren(ctx, p)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var names []string
	err := s.untilSessionFails(ctx, func() (err error) {
		start := s.begin()
		names, _, err = s.conn.Children(p)
		s.end("children", start)
		return translateConn(err)
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", p, translate(err))
	}
	sort.Strings(names)
	return names, nil
}

// anyChild reports whether some child of p has a name that match accepts. From the mirror it
// neither sorts nor copies the names: a task's end asks it of a job of thousands of tasks.
func (s *Store) anyChild(ctx context.Context, p string, match func(name string) bool) (bool, error) {
	if s.mv != nil && s.mv.m.covered(p) {
		return s.mirroredAnyChild(ctx, p, match)
	}
	names, err := s.children(ctx, p)
	return slices.ContainsFunc(names, match), err
}

// getMany reads many nodes at once.
func (s *Store) getMany(ctx context.Context, paths []string) ([]node, error) {
	out := make([]node, len(paths))
	if s.mv != nil {
		for i, p := range paths {
			var err error
			if out[i], err = s.get(ctx, p); err != nil {
				return nil, err
			}
		}
		return out, nil
	}
	err := concurrently(len(paths), 64, func(i int) (err error) {
		out[i], err = s.get(ctx, paths[i])
		return err
	})
	return out, err
}

// concurrently runs f(0…n-1), at most limit at a time, and joins their errors. go-zookeeper
// pipelines concurrent requests over its one connection, so n reads issued this way cost about
// one round trip of latency instead of n.
func concurrently(n, limit int, f func(i int) error) error {
	errs := make([]error, n)
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// OpError says which operation of a multi failed.
type OpError struct {
	Op   string // create, set, delete or check
	Path string
	Err  error // wraps a sentinel
}

func (e *OpError) Error() string { return e.Op + " " + e.Path + ": " + e.Err.Error() }
func (e *OpError) Unwrap() error { return e.Err }

// multi runs ops as one transaction, behind the fence check on a fenced Store. A failed fence
// check is ErrNotLeader; another failed op is an *OpError wrapping its sentinel.
func (s *Store) multi(ctx context.Context, ops ...any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if len(ops) == 0 {
		return nil
	}
	if s.mv != nil {
		return s.mirroredMulti(ctx, ops)
	}
	return s.sendMulti(ctx, ops)
}

// sendMulti sends ops as one multi, behind the fence check on a fenced Store.
func (s *Store) sendMulti(ctx context.Context, ops []any) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if s.fence != nil {
		ops = append([]any{&zk.CheckVersionRequest{Path: s.fence.Path, Version: s.fence.Version}}, ops...)
	}
	// ZooKeeper closes the connection of a client that sends a request over its jute.maxbuffer:
	// the multi would fail with its outcome unknown, and, sent again, fail again for ever.
	if err := s.fits(ops); err != nil {
		return err
	}
	s.multis.Add(1)
	start := s.begin()
	res, err := s.conn.Multi(ops...)
	s.end("multi", start)
	if err == nil {
		return nil
	}
	for i, r := range res {
		if r.Error == nil {
			continue
		}
		if i == 0 && s.fence != nil {
			err := fmt.Errorf("%w: election node %s: %w", ErrNotLeader, s.fence.Path, r.Error)
			s.fence.fenceRefused(err)
			return err
		}
		return refused(ops[i], r.Error)
	}
	// No per-op result: the request itself failed (connection loss, expiry).
	return fmt.Errorf("multi of %d ops: %w", len(ops), translate(err))
}

// refused is the error of an op that ZooKeeper refused, or that the model refused because it
// knows ZooKeeper would. A versioned op on a node that is gone was built on a read that no
// longer holds, just as one refused for a bad version was: it is a conflict too, so that
// read-modify-write loops read again. Otherwise a fire whose ready entry a launch took between
// the fire's read and its write would look like the fire of a deleted job, and be dropped.
func refused(op any, err error) *OpError {
	name, p := describe(op)
	err = translate(err)
	if errors.Is(err, ErrNotFound) && version(op) >= 0 {
		err = fmt.Errorf("%w: %w", ErrConflict, err)
	}
	return &OpError{Op: name, Path: p, Err: err}
}

// version is the version an op expects its node to have; -1 for any, or for a create.
func version(op any) int32 {
	switch o := op.(type) {
	case *zk.SetDataRequest:
		return o.Version
	case *zk.DeleteRequest:
		return o.Version
	case *zk.CheckVersionRequest:
		return o.Version
	}
	return -1
}

func describe(op any) (string, string) {
	switch o := op.(type) {
	case *zk.CreateRequest:
		return "create", o.Path
	case *zk.SetDataRequest:
		return "set", o.Path
	case *zk.DeleteRequest:
		return "delete", o.Path
	case *zk.CheckVersionRequest:
		return "check", o.Path
	}
	return "?", ""
}

// multiSlack is what the largest multi sent leaves of jute.maxbuffer: room for the request's
// framing and the slack of multiBytes.
const multiSlack = 16 << 10

// maxMulti is the largest multi sent.
func (s *shared) maxMulti() int { return s.jute - multiSlack }

// MaxConfigBytes is the most an app's or a job's config may take as stored JSON. A job's writes
// carry its app's config beside its own (appOp), and an update of it the job's fire ledger and
// the restart list of its running tasks too, all in one multi of at most jute.maxbuffer: each
// config may take a quarter of it (252 KiB with ZooKeeper's default).
func (s *Store) MaxConfigBytes() int { return s.maxMulti() / 4 }

// fits says whether ops go in one multi: nil, or an error wrapping ErrTooLarge.
func (s *shared) fits(ops []any) error {
	if n, most := multiBytes(ops), s.maxMulti(); n > most {
		return fmt.Errorf("multi of %d ops, %d bytes (ZooKeeper takes %d in one request, jute.maxbuffer %d): %w", len(ops), n, most, s.jute, ErrTooLarge)
	}
	return nil
}

// The bounds of Config.JuteMaxBuffer. ZooKeeper's own default is the least: a server set lower
// would refuse the writes and reads this package sizes to its default. The most is far beyond
// what ZooKeeper's operators set (a few MB): a server holds every request whole in memory.
const (
	DefaultJuteMaxBuffer = juteMaxBuffer
	MostJuteMaxBuffer    = 256 << 20
)

// juteMaxBuffer returns cfg's JuteMaxBuffer, its default for 0, or an error naming the bounds.
func (cfg Config) juteMaxBuffer() (int, error) {
	switch n := cfg.JuteMaxBuffer; {
	case n == 0:
		return juteMaxBuffer, nil
	case n < DefaultJuteMaxBuffer || n > MostJuteMaxBuffer:
		return 0, fmt.Errorf("state: jute.maxbuffer must be %d (ZooKeeper's default) to %d, got %d", DefaultJuteMaxBuffer, MostJuteMaxBuffer, n)
	default:
		return n, nil
	}
}

// sendBuffer sizes a session's send buffer for requests of up to jute bytes: go-zookeeper's own
// (1.5 MB) is enough for ZooKeeper's default, and a larger request would fail to encode.
func sendBuffer(jute int) func(*zk.Conn) {
	return zk.WithMaxConnBufferSize(max(jute+multiSlack, 1536<<10))
}

// multiBytes is how many bytes ops take as one multi request on the wire (jute encoding: a
// length before each string and byte array, a header before each op), give or take a few.
func multiBytes(ops []any) int {
	n := 4 + 8 + 9 // the packet's length, the request header, the multi's end
	for _, op := range ops {
		n += opBytes(op)
	}
	return n
}

func opBytes(op any) int {
	const header, str, i32 = 9, 4, 4 // op type, done flag, error; a string's length; an int
	switch o := op.(type) {
	case *zk.CreateRequest:
		n := header + str + len(o.Path) + str + len(o.Data) + i32 + i32 // the ACL count, flags
		for _, a := range o.Acl {
			n += i32 + str + len(a.Scheme) + str + len(a.ID)
		}
		return n
	case *zk.SetDataRequest:
		return header + str + len(o.Path) + str + len(o.Data) + i32
	case *zk.DeleteRequest:
		return header + str + len(o.Path) + i32
	case *zk.CheckVersionRequest:
		return header + str + len(o.Path) + i32
	}
	return header
}

func (s *Store) createOp(p string, data []byte) *zk.CreateRequest {
	return &zk.CreateRequest{Path: p, Data: data, Acl: s.acl}
}

func setOp(p string, data []byte, version int32) *zk.SetDataRequest {
	return &zk.SetDataRequest{Path: p, Data: data, Version: version}
}

func deleteOp(p string, version int32) *zk.DeleteRequest {
	return &zk.DeleteRequest{Path: p, Version: version}
}

func checkOp(p string, version int32) *zk.CheckVersionRequest {
	return &zk.CheckVersionRequest{Path: p, Version: version}
}

// retry runs attempt until it does not fail with ErrConflict: the read-modify-write loop of
// every version-checked update. Conflicts come only from concurrent writers, so this ends.
func retry(ctx context.Context, attempt func() error) error {
	for {
		err := attempt()
		if !errors.Is(err, ErrConflict) {
			return err
		}
		if ctx.Err() != nil {
			return err
		}
	}
}

// bestEffortDelete removes an empty parent node; it is fine if it has children or is gone.
func (s *Store) bestEffortDelete(ctx context.Context, p string) {
	s.parents.Delete(p)
	if s.mv != nil { // no round trip to learn what the model knows
		if n, _, err := s.mirroredNode(ctx, p); err != nil || !n.exists || n.stat.NumChildren > 0 {
			return
		}
	}
	err := s.multi(ctx, deleteOp(p, -1))
	if err != nil && !errors.Is(err, ErrConflict) && !errors.Is(err, ErrNotFound) {
		s.log.WithError(err).WithField("path", p).Debug("could not remove empty queue node")
	}
}

// ensureParent creates a job's node under a queue root if it is not known to exist.
func (s *Store) ensureParent(ctx context.Context, p string) error {
	if _, ok := s.parents.Load(p); ok {
		return nil
	}
	if err := s.ensure(ctx, p); err != nil {
		return err
	}
	s.parents.Store(p, struct{}{})
	return nil
}

func base(p string) string { return path.Base(p) }

type zkLogger struct{ log logrus.FieldLogger }

func (l zkLogger) Printf(format string, args ...any) {
	l.log.WithField("component", "zk").Debugf(format, args...)
}

// boundedDialer dials ZooKeeper servers through connections whose deadlines are never further
// away than go-zookeeper's own read timeout (2/3 of the session timeout), and, until the server
// has answered the connect handshake, than the session timeout shared out among the servers
// (the Java client's connect timeout). go-zookeeper v1.0.4 gives the handshake ten times the
// read timeout (conn.go: recvTimeout * 10), so a server that accepts TCP but does not answer — a
// SIGSTOPped or frozen member, whose kernel still accepts — held a client for 33 s with a 5 s
// session, longer than the session itself. Bounded, a hung member costs one share and the client
// tries the next, so that a client can try every member within one session timeout.
func boundedDialer(sessionTimeout time.Duration, servers int) zk.Dialer {
	limit := sessionTimeout * 2 / 3
	handshake := min(limit, max(sessionTimeout/time.Duration(max(servers, 1)), time.Second))
	return func(network, address string, timeout time.Duration) (net.Conn, error) {
		c, err := net.DialTimeout(network, address, timeout)
		if err != nil {
			return nil, err
		}
		return &boundedConn{Conn: c, limit: limit, handshake: handshake}, nil
	}
}

type boundedConn struct {
	net.Conn
	limit, handshake time.Duration
	answered         atomic.Bool // the server has sent something: it is alive
}

func (c *boundedConn) bound(t time.Time) time.Time {
	limit := c.limit
	if !c.answered.Load() {
		limit = c.handshake
	}
	if max := time.Now().Add(limit); !t.IsZero() && t.After(max) {
		return max
	}
	return t
}

func (c *boundedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.answered.Store(true)
	}
	return n, err
}

func (c *boundedConn) SetReadDeadline(t time.Time) error  { return c.Conn.SetReadDeadline(c.bound(t)) }
func (c *boundedConn) SetWriteDeadline(t time.Time) error { return c.Conn.SetWriteDeadline(c.bound(t)) }
func (c *boundedConn) SetDeadline(t time.Time) error      { return c.Conn.SetDeadline(c.bound(t)) }

// connected waits for the store's session and authenticates it with its digest; on failure it
// closes the connection.
func (s *Store) connected(ctx context.Context) error {
	if err := s.sess.waitConnected(ctx); err != nil {
		s.conn.Close()
		return fmt.Errorf("cannot reach ZooKeeper at %s: %w", strings.Join(s.servers, ","), err)
	}
	if s.digest != "" {
		if err := s.conn.AddAuth("digest", []byte(s.digest)); err != nil {
			s.conn.Close()
			return fmt.Errorf("authenticate to ZooKeeper: %w", err)
		}
		s.acl = zk.AuthACL(zk.PermAll)
	}
	return nil
}
