// Package statetest starts a real ZooKeeper server for tests: the standalone server from
// Debian's zookeeper package, on a free loopback port, with a throw-away data directory.
//
// One server serves a whole test binary; each test gets its own namespace, so tests never see
// each other's nodes. Packages whose tests use it should stop the server when they end:
//
//	func TestMain(m *testing.M) { os.Exit(statetest.Main(m)) }
package statetest

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/internal/freeport"
)

// JarDir is where Debian's zookeeper package installs its jars.
const JarDir = "/usr/share/java"

// InstallHint is what to run when ZooKeeper is missing.
const InstallHint = "apt-get update && apt-get install -y zookeeper"

// Server is a running standalone ZooKeeper.
type Server struct {
	Addr string // host:port on 127.0.0.1

	dir    string
	port   int
	mu     sync.Mutex // guards cmd, done and paused
	cmd    *exec.Cmd
	done   chan struct{}
	paused bool
	output *tailBuffer

	// A member of an ensemble (ensemble.go) has an id, the ensemble's server.N lines and its
	// timing; a standalone server has none of these.
	id     int
	peers  string
	timing string

	// props are Java system properties the server starts with (StartDedicated); conf, lines
	// of zoo.cfg that replace the defaults (StartDedicatedConfig).
	props []string
	conf  []string
}

// standaloneTiming: a short tick lets tests use session timeouts of a few hundred milliseconds.
const standaloneTiming = "tickTime=100\ninitLimit=10\nsyncLimit=5\n"

var shared struct {
	once sync.Once
	srv  *Server
	err  error
}

var namespaces atomic.Int64

// Env is what a test needs to reach its part of the shared server.
type Env struct {
	Servers   []string
	Namespace string
}

// StartZooKeeper returns the test binary's ZooKeeper server, starting it on first use, and a
// namespace that no other test uses. It fails the test, with the install command, when
// ZooKeeper is not installed; it never skips.
func StartZooKeeper(t testing.TB) Env {
	t.Helper()
	shared.once.Do(func() {
		dir, err := os.MkdirTemp("", "ejcloud-zk-")
		if err != nil {
			shared.err = err
			return
		}
		shared.srv, shared.err = Start(dir)
	})
	if shared.err != nil {
		t.Fatalf("start ZooKeeper: %v", shared.err)
	}
	ns := fmt.Sprintf("t%d_%s", namespaces.Add(1), sanitize(t.Name()))
	return Env{Servers: []string{shared.srv.Addr}, Namespace: ns}
}

// Main runs the tests and then stops the shared server, if one was started.
func Main(m *testing.M) int {
	code := m.Run()
	if shared.srv != nil {
		shared.srv.Stop()
		os.RemoveAll(shared.srv.dir)
	}
	return code
}

// StartDedicated starts a server of the test's own, stopped when the test ends; for tests that
// stop and restart ZooKeeper, or that need the server set differently: props are Java system
// properties, "name=value" (e.g. "jute.maxbuffer=4194304").
func StartDedicated(t testing.TB, props ...string) *Server {
	t.Helper()
	s, err := start(t.TempDir(), props, nil)
	if err != nil {
		t.Fatalf("start ZooKeeper: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// StartDedicatedConfig is StartDedicated with lines of zoo.cfg, "key=value", that replace the
// defaults (e.g. "maxSessionTimeout=2000": ZooKeeper reads the file as Java properties, the
// last line of a key wins).
func StartDedicatedConfig(t testing.TB, conf ...string) *Server {
	t.Helper()
	s, err := start(t.TempDir(), nil, conf)
	if err != nil {
		t.Fatalf("start ZooKeeper with %v: %v", conf, err)
	}
	t.Cleanup(s.Stop)
	return s
}

var nonName = regexp.MustCompile(`[^A-Za-z0-9_]+`)

func sanitize(name string) string {
	s := nonName.ReplaceAllString(name, "_")
	if len(s) > 60 {
		s = s[:60]
	}
	return s
}

// Classpath returns the classpath of Debian's ZooKeeper server, or an error saying how to
// install it.
func Classpath() (string, error) {
	jar := filepath.Join(JarDir, "zookeeper.jar")
	if _, err := os.Stat(jar); err != nil {
		return "", fmt.Errorf("ZooKeeper is not installed (%s is missing): run `%s` (make test does this for you)", jar, InstallHint)
	}
	if _, err := exec.LookPath("java"); err != nil {
		return "", fmt.Errorf("java is not on PATH: run `%s`", InstallHint)
	}
	cp := []string{jar}
	// The jar's manifest lists its dependencies; a logging binding keeps stderr quiet.
	if nop := filepath.Join(JarDir, "slf4j-nop.jar"); fileExists(nop) {
		cp = append(cp, nop)
	}
	return strings.Join(cp, ":"), nil
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// Start starts a standalone server with its data and config in dir, on a free loopback port,
// and waits until it answers.
func Start(dir string) (*Server, error) { return start(dir, nil, nil) }

func start(dir string, props, conf []string) (*Server, error) {
	var lastErr error
	for range 3 { // the free port can be taken between our probe and the JVM's bind
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		s := &Server{dir: dir, port: port, Addr: fmt.Sprintf("127.0.0.1:%d", port), props: props, conf: conf}
		if lastErr = s.Start(); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

// Start (re)starts a stopped server on its old port and data directory, so that sessions and
// data survive a restart as they do in production.
func (s *Server) Start() error {
	cp, err := Classpath()
	if err != nil {
		return err
	}
	data := filepath.Join(s.dir, "data")
	if err := os.MkdirAll(data, 0o755); err != nil {
		return err
	}
	cfg := filepath.Join(s.dir, "zoo.cfg")
	timing, main := s.timing, "org.apache.zookeeper.server.ZooKeeperServerMain"
	if timing == "" {
		timing = standaloneTiming
	}
	conf := fmt.Sprintf("%sdataDir=%s\nclientPort=%d\n"+
		"clientPortAddress=127.0.0.1\nminSessionTimeout=200\nmaxSessionTimeout=60000\n"+
		"admin.enableServer=false\n4lw.commands.whitelist=ruok,srvr,cons\nmaxClientCnxns=0\n"+
		"snapCount=100000\nautopurge.purgeInterval=0\n", timing, data, s.port)
	for _, line := range s.conf {
		conf += line + "\n"
	}
	if s.peers != "" {
		if err := os.WriteFile(filepath.Join(data, "myid"), []byte(fmt.Sprintf("%d\n", s.id)), 0o644); err != nil {
			return err
		}
		conf += s.peers
		main = "org.apache.zookeeper.server.quorum.QuorumPeerMain"
	}
	if err := os.WriteFile(cfg, []byte(conf), 0o644); err != nil {
		return err
	}
	// Tests want a server that starts fast (C1 only, a small serial heap). Benchmarks of the
	// server's throughput want it as production runs it: EJCLOUD_ZK_JVM replaces these flags
	// (e.g. "-Xmx1g", the JVM's defaults: full JIT, G1).
	jvm := []string{"-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"}
	if f := os.Getenv("EJCLOUD_ZK_JVM"); f != "" {
		jvm = strings.Fields(f)
	}
	for _, p := range s.props {
		jvm = append(jvm, "-D"+p)
	}
	cmd := exec.Command("java", append(jvm, "-Dzookeeper.jmx.log4j.disable=true", "-Dzookeeper.admin.enableServer=false",
		"-cp", cp, main, cfg)...)
	out := &tailBuffer{max: 16 << 10}
	cmd.Stdout, cmd.Stderr = out, out
	// The JVM must not outlive the test binary, even if the binary is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start java: %w", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	s.mu.Lock()
	s.cmd, s.done, s.output, s.paused = cmd, done, out, false
	s.mu.Unlock()
	deadline := time.Now().Add(60 * time.Second)
	for {
		// A member of an ensemble answers ruok before it has joined a quorum; it serves once
		// srvr tells its mode.
		if s.peers == "" && ruok(s.Addr) || s.peers != "" && s.Mode() != "" {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("ZooKeeper on %s exited during start-up: %s", s.Addr, out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("ZooKeeper on %s did not answer within 60s: %s", s.Addr, out.String())
		}
	}
}

// Stop kills the server and waits for it to exit. Data stays in its directory.
func (s *Server) Stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.cmd, s.paused = nil, false
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	// A paused JVM is resumed first, so that nothing of it stays stopped in the process group.
	syscall.Kill(-cmd.Process.Pid, syscall.SIGCONT)
	syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	<-done
}

// Pause stops the server's JVM (SIGSTOP), as a long GC pause or a frozen VM does: its kernel
// still accepts connections, and nothing answers. Resume or Stop ends it.
func (s *Server) Pause() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && !s.paused {
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGSTOP)
		s.paused = true
	}
}

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd != nil && s.paused {
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGCONT)
		s.paused = false
	}
}

// Paused says the server is paused.
func (s *Server) Paused() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.paused
}

// Mode is what the server's srvr says of its role: "leader", "follower" or "standalone"; ""
// when it does not answer within a second or is not serving (an ensemble member out of quorum).
func (s *Server) Mode() string {
	c, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err != nil {
		return ""
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(c, "srvr"); err != nil {
		return ""
	}
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		if m, ok := strings.CutPrefix(sc.Text(), "Mode: "); ok {
			return strings.TrimSpace(m)
		}
	}
	return ""
}

// Serves says whether the session sid is connected to this server (its cons lists it).
func (s *Server) Serves(sid int64) bool {
	c, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(c, "cons"); err != nil {
		return false
	}
	want := fmt.Sprintf("sid=0x%x,", sid)
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		if strings.Contains(sc.Text(), want) {
			return true
		}
	}
	return false
}

func ruok(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := io.WriteString(c, "ruok"); err != nil {
		return false
	}
	line, _ := bufio.NewReader(c).ReadString('\n')
	return strings.HasPrefix(line, "imok")
}

func freePort() (int, error) {
	port, err := freeport.Port()
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	return port, nil
}

// tailBuffer keeps the last max bytes written, for error messages.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
