package scheduler

import (
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/ejcloud/ejcloud/eventtrace"
	"github.com/ejcloud/ejcloud/state"
)

// Config is the scheduler's configuration: the flags of SPEC §2.
type Config struct {
	ZKServers        []string
	ZKNamespace      string
	ZKDigest         string
	ZKSessionTimeout time.Duration
	// ZKJuteMaxBuffer is the ZooKeeper servers' jute.maxbuffer: it bounds one write, and so the
	// shards of a job (a run launches them all in one).
	ZKJuteMaxBuffer    int
	MesosURL           string
	MesosPrincipal     string
	MesosSecretFile    string
	MesosRole          string
	MesosUser          string
	FrameworkName      string
	FailoverTimeout    time.Duration
	Hostname           string
	HTTPAddr           string
	AuthRoot           string
	AuthGuest          string
	JobStateQueueSize  int
	ReconcileInterval  time.Duration
	UnreachableTimeout time.Duration
	// ReserveAfter is how long a READY run may be left out for want of resources before it
	// goes first and agents are held for it (plan.Reserve); 0: never.
	ReserveAfter time.Duration
	// TaskLease: executors kill their tasks when no renewal of it reached them for this long
	// (lease.go); 0 leaves tasks running however long their agent is cut off.
	TaskLease          time.Duration
	StaleTaskThreshold time.Duration
	FailoverBackoffMin time.Duration
	FailoverBackoffMax time.Duration
	ExecutorBinary     string
	// EventTraceDB is the event trace database's DSN (SPEC §9); "" keeps no history.
	EventTraceDB string
	// EventTraceRetention is how long its rows are kept (0: 30 days).
	EventTraceRetention time.Duration
	LogLevel            string
	LogFormat           string
	TLS                 // --mesos-ca-file, --tls-cert-file, --tls-key-file, --insecure-http (tls.go)

	// ZKConnectTimeout bounds the wait for the first ZooKeeper session (default 15s).
	ZKConnectTimeout time.Duration

	// MesosStartupTimeout: if no subscription to Mesos succeeds this long after this instance
	// was elected leader, the scheduler exits (default 60s): a wrong --mesos-url fails fast.
	// Each leadership term has its own budget; losses after a subscription are retried for ever.
	MesosStartupTimeout time.Duration

	// mesosSecret is the contents of MesosSecretFile, read by Validate.
	mesosSecret string
	// warnings are what Validate found worth an operator's attention but not worth refusing
	// to start over (Warnings).
	warnings []string
	// mesosZK is --mesos-url when it is a zk:// URL (Validate parses it): the masters are then
	// found in ZooKeeper.
	mesosZK *state.MesosZK
}

// Flags registers every flag on fs and returns the Config they fill.
func Flags(fs *flag.FlagSet) *Config {
	c := &Config{}
	fs.Func("zk-servers", "ZooKeeper servers, host:port[,host:port…]", func(s string) error {
		c.ZKServers = splitList(s)
		if len(c.ZKServers) == 0 {
			return fmt.Errorf("empty server list")
		}
		return nil
	})
	c.ZKServers = []string{"127.0.0.1:2181"}
	fs.Lookup("zk-servers").DefValue = "127.0.0.1:2181" // fs.Func has none, and --help shows it
	fs.StringVar(&c.ZKNamespace, "zk-namespace", "elastic-job-cloud", "ZooKeeper root node")
	fs.StringVar(&c.ZKDigest, "zk-digest", "", "user:password for ZooKeeper digest auth (nodes get a creator-only ACL)")
	fs.DurationVar(&c.ZKSessionTimeout, "zk-session-timeout", 10*time.Second, "ZooKeeper session timeout: how long a dead leader holds the leadership")
	fs.IntVar(&c.ZKJuteMaxBuffer, "zk-jute-maxbuffer", state.DefaultJuteMaxBuffer, "the ZooKeeper servers' jute.maxbuffer (their -Djute.maxbuffer), the most one request carries: it bounds a job's shards, as a run launches them all in one write (about 3,500 at the default; 6291456 takes 10,000 whatever the job's name); never more than every server of the ensemble is set to")
	fs.StringVar(&c.MesosURL, "mesos-url", "http://127.0.0.1:5050", "Mesos masters: zk://[user:pass@]host:port[,host:port…]/path (the leading master as Mesos publishes it in ZooKeeper), or http(s):// base URLs separated by commas, tried in order (leader redirects are followed)")
	fs.StringVar(&c.MesosPrincipal, "mesos-principal", "", "framework principal (FrameworkInfo.principal); with --mesos-secret-file, sent as HTTP Basic on every scheduler API call and on the reads of the master's and agents' state and sandbox files")
	fs.StringVar(&c.MesosSecretFile, "mesos-secret-file", "", "file holding the principal's secret, for a master with framework authentication (the secret is never on the command line)")
	fs.StringVar(&c.MesosRole, "mesos-role", "*", "Mesos role")
	fs.StringVar(&c.MesosUser, "mesos-user", currentUser(), "user tasks run as")
	fs.StringVar(&c.FrameworkName, "framework-name", "Elastic-Job-Cloud", "Mesos framework name")
	fs.DurationVar(&c.FailoverTimeout, "failover-timeout", 168*time.Hour, "how long Mesos keeps the framework's tasks while no scheduler is connected")
	fs.StringVar(&c.Hostname, "hostname", osHostname(), "advertised host name")
	fs.StringVar(&c.HTTPAddr, "http-addr", "127.0.0.1:8899", "REST API and console address")
	fs.StringVar(&c.AuthRoot, "auth-root", "", "user:password of the administrator (HTTP Basic)")
	fs.StringVar(&c.AuthGuest, "auth-guest", "", "user:password of the read-only guest (HTTP Basic; needs --auth-root)")
	fs.IntVar(&c.JobStateQueueSize, "job-state-queue-size", 10000, "most jobs in each of the ready, failover and disable queues")
	fs.DurationVar(&c.ReconcileInterval, "reconcile-interval", 10*time.Minute, "period of task reconciliation with Mesos (0 disables)")
	fs.DurationVar(&c.UnreachableTimeout, "unreachable-timeout", 15*time.Minute, "how long an unreachable task counts as running before it is treated as lost")
	fs.DurationVar(&c.ReserveAfter, "reserve-after", time.Minute, "a run left out this long for want of cpu or memory goes before the others, and the agents it would fit on once this framework's transient tasks there end are held for it: smaller runs no longer take what each of those tasks frees (0: never; larger runs may then wait for ever)")
	fs.DurationVar(&c.TaskLease, "task-lease", 0, "kill a task on an agent cut off from the master this long, before --unreachable-timeout relaunches it elsewhere (it must be shorter), so that no run goes on beside its relaunch; tasks then also stop while no scheduler reaches them (0: off)")
	fs.DurationVar(&c.StaleTaskThreshold, "stale-task-threshold", time.Hour, "warn about (and reconcile) a running task whose agent has sent no update of it for this long (0 disables)")
	fs.DurationVar(&c.FailoverBackoffMin, "failover-backoff-min", time.Second, "wait before relaunching a shard after its first infrastructure failure in a row; it doubles with each further one")
	fs.DurationVar(&c.FailoverBackoffMax, "failover-backoff-max", 5*time.Minute, "longest wait before relaunching a shard that keeps failing")
	fs.StringVar(&c.ExecutorBinary, "executor-binary", defaultExecutor(), "ejcloud-executor served at GET /executor/ejcloud-executor (a file ending in .gz is served decompressed)")
	fs.StringVar(&c.EventTraceDB, "event-trace-db", "", "event trace database (history and statistics): sqlite:///path/file.db, postgres://user:password@host:port/db or mysql://user:password@tcp(host:port)/db (default none)")
	c.EventTraceRetention = 30 * 24 * time.Hour
	fs.Func("event-trace-retention", "how long the event trace keeps its rows, e.g. 30d or 12h", func(s string) error {
		d, err := parseDays(s)
		c.EventTraceRetention = d
		return err
	})
	fs.Lookup("event-trace-retention").DefValue = "30d"
	fs.DurationVar(&c.MesosStartupTimeout, "mesos-startup-timeout", time.Minute, "exit if Mesos cannot be subscribed to this long after this instance became leader")
	fs.StringVar(&c.LogLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log-format", "text", "text or json")
	c.TLS.flags(fs)
	return c
}

// Validate checks what the flags alone cannot.
func (c *Config) Validate() error {
	c.warnings = nil
	// Zero values are refused, not taken for the defaults: an operator who writes 0 means
	// "never" or "none", and would get a minute, a month of trace or a dialer out of time.
	if c.MesosStartupTimeout <= 0 {
		return fmt.Errorf("--mesos-startup-timeout must be positive, got %v", c.MesosStartupTimeout)
	}
	if c.ZKSessionTimeout <= 0 {
		return fmt.Errorf("--zk-session-timeout must be positive, got %v", c.ZKSessionTimeout)
	}
	if c.ZKJuteMaxBuffer < state.DefaultJuteMaxBuffer || c.ZKJuteMaxBuffer > state.MostJuteMaxBuffer {
		return fmt.Errorf("--zk-jute-maxbuffer must be %d (ZooKeeper's default) to %d, got %d: set it to the servers' -Djute.maxbuffer", state.DefaultJuteMaxBuffer, state.MostJuteMaxBuffer, c.ZKJuteMaxBuffer)
	}
	if strings.TrimSpace(c.Hostname) == "" {
		return fmt.Errorf("--hostname must not be empty: it is advertised to Mesos (webui_url) and in standbys' redirects")
	}
	if c.TaskLease < 0 || c.TaskLease > 0 && c.TaskLease >= c.UnreachableTimeout {
		return fmt.Errorf("--task-lease must be 0 (off) or shorter than --unreachable-timeout (%v), got %v: a task must be dead before its relaunch", c.UnreachableTimeout, c.TaskLease)
	}
	if c.ReserveAfter < 0 {
		return fmt.Errorf("--reserve-after must be 0 (never) or positive, got %v", c.ReserveAfter)
	}
	if c.JobStateQueueSize < 1 {
		return fmt.Errorf("--job-state-queue-size must be at least 1, got %d", c.JobStateQueueSize)
	}
	if c.FailoverBackoffMin <= 0 || c.FailoverBackoffMax < c.FailoverBackoffMin {
		return fmt.Errorf("--failover-backoff-min must be positive and at most --failover-backoff-max, got %v and %v", c.FailoverBackoffMin, c.FailoverBackoffMax)
	}
	for name, cred := range map[string]string{"--auth-root": c.AuthRoot, "--auth-guest": c.AuthGuest, "--zk-digest": c.ZKDigest} {
		// An empty user or password would let "Authorization: Basic Og==" (":") in.
		if user, pass, ok := strings.Cut(cred, ":"); cred != "" && (!ok || user == "" || pass == "") {
			return fmt.Errorf("%s must be user:password, with neither empty", name)
		}
	}
	if c.AuthGuest != "" && c.AuthRoot == "" {
		// Without a root user every request is root's: the guest's limits would not hold.
		return fmt.Errorf("--auth-guest needs --auth-root: without a root user every request may write")
	}
	if c.EventTraceDB != "" {
		if err := eventtrace.CheckDSN(c.EventTraceDB); err != nil {
			return fmt.Errorf("--event-trace-db: %w", err)
		}
	}
	if c.EventTraceRetention <= 0 {
		return fmt.Errorf("--event-trace-retention must be positive, got %v", c.EventTraceRetention)
	}
	if err := c.checkExecutorBinary(); err != nil {
		return err
	}
	if err := c.parseMesosURL(); err != nil {
		return err
	}
	if err := c.readMesosSecret(); err != nil {
		return err
	}
	host, _, err := net.SplitHostPort(c.HTTPAddr)
	if err != nil {
		return fmt.Errorf("--http-addr %q: %w", c.HTTPAddr, err)
	}
	if c.AuthRoot == "" && !isLoopback(host) {
		return fmt.Errorf("refusing to serve the API on non-loopback address %s without credentials: set --auth-root user:password", c.HTTPAddr)
	}
	if err := c.validateTLS(host); err != nil {
		return err
	}
	return nil
}

// parseMesosURL checks --mesos-url: one zk:// URL (whose server list has commas of its own), or
// a list of http(s):// masters.
func (c *Config) parseMesosURL() error {
	c.mesosZK = nil
	if strings.HasPrefix(strings.TrimSpace(c.MesosURL), "zk://") {
		u, err := state.ParseMesosZK(strings.TrimSpace(c.MesosURL))
		if err != nil {
			return fmt.Errorf("--mesos-url: %w", err)
		}
		c.mesosZK = &u
		return nil
	}
	masters := c.MesosURLs()
	if len(masters) == 0 {
		return fmt.Errorf("--mesos-url names no master")
	}
	for _, u := range masters {
		p, err := url.Parse(u)
		if err != nil || p.Scheme != "http" && p.Scheme != "https" || p.Host == "" {
			return fmt.Errorf("--mesos-url: %q is not a zk://, http:// or https:// master URL", withoutUserinfo(u))
		}
		if p.User != nil {
			// It would be logged, and shown to guests as the master subscribed at.
			return fmt.Errorf("--mesos-url: a master URL may not carry credentials (%s://…@%s): give them with --mesos-principal and --mesos-secret-file", p.Scheme, p.Host)
		}
	}
	return nil
}

// MesosURLs are the masters of --mesos-url, in the order they are tried (none for zk://).
func (c *Config) MesosURLs() []string {
	if c.mesosZK != nil {
		return nil
	}
	return splitList(c.MesosURL)
}

// detectedScheme is how masters found in ZooKeeper are reached: their MasterInfo says where,
// not whether over TLS, so a CA given for the masters says they serve HTTPS.
func (c *Config) detectedScheme() string {
	if c.MesosCAFile != "" {
		return "https"
	}
	return "http"
}

// mesosTarget names the masters for logs and errors, without a password.
func (c *Config) mesosTarget() string {
	if c.mesosZK != nil {
		return c.mesosZK.String()
	}
	return c.MesosURL
}

// readMesosSecret reads --mesos-secret-file; a trailing newline is not part of the secret.
func (c *Config) readMesosSecret() error {
	if c.MesosSecretFile == "" {
		return nil
	}
	if c.MesosPrincipal == "" {
		return fmt.Errorf("--mesos-secret-file needs --mesos-principal: the secret is that principal's")
	}
	b, err := os.ReadFile(c.MesosSecretFile)
	if err != nil {
		return fmt.Errorf("--mesos-secret-file: %w", err)
	}
	c.mesosSecret = strings.TrimRight(string(b), "\r\n")
	if c.mesosSecret == "" {
		return fmt.Errorf("--mesos-secret-file %s is empty", c.MesosSecretFile)
	}
	clear := c.mesosZK != nil && c.detectedScheme() == "http"
	for _, u := range c.MesosURLs() {
		clear = clear || strings.HasPrefix(u, "http://")
	}
	if clear {
		c.warnings = append(c.warnings, "the secret of --mesos-principal goes to the Mesos masters and agents over plain HTTP: "+
			"anyone on the way can subscribe as this framework; serve Mesos over HTTPS (and give --mesos-ca-file for zk:// masters)")
	}
	return nil
}

// Warnings are what Validate found that an operator should fix but that does not stop the
// scheduler: the run logs each at start-up.
func (c *Config) Warnings() []string { return c.warnings }

// parseDays reads a duration that may be in days: "30d", "1d12h", or anything time.ParseDuration
// reads.
func parseDays(s string) (time.Duration, error) {
	days, rest, ok := strings.Cut(s, "d")
	if !ok {
		return time.ParseDuration(s)
	}
	n, err := strconv.Atoi(days)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a duration such as 30d or 12h", s)
	}
	d := time.Duration(n) * 24 * time.Hour
	if rest != "" {
		r, err := time.ParseDuration(rest)
		if err != nil {
			return 0, fmt.Errorf("%q is not a duration such as 30d or 12h", s)
		}
		d += r
	}
	return d, nil
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func currentUser() string {
	if u, err := user.Current(); err == nil {
		return u.Username
	}
	return "root"
}

func osHostname() string {
	if h, err := os.Hostname(); err == nil {
		return h
	}
	return "localhost"
}

// checkExecutorBinary refuses an --executor-binary that names no readable regular file: a typo
// would otherwise show only as a 404 to every agent fetching it. The default, beside the
// scheduler's own binary, may be absent (apps whose packages carry their executor do not
// fetch it): a warning then, since GET /executor/ejcloud-executor answers 404.
func (c *Config) checkExecutorBinary() error {
	f, err := os.Open(c.ExecutorBinary)
	if err == nil {
		var st os.FileInfo
		if st, err = f.Stat(); err == nil && !st.Mode().IsRegular() {
			err = fmt.Errorf("not a regular file")
		}
		f.Close()
	}
	switch {
	case err == nil:
		return nil
	case c.ExecutorBinary != defaultExecutor():
		return fmt.Errorf("--executor-binary %s: %w", c.ExecutorBinary, err)
	}
	c.warnings = append(c.warnings, fmt.Sprintf("no ejcloud-executor to serve (--executor-binary %s: %v): GET /executor/ejcloud-executor answers 404", c.ExecutorBinary, err))
	return nil
}

func defaultExecutor() string {
	exe, err := os.Executable()
	if err != nil {
		return "ejcloud-executor"
	}
	return filepath.Join(filepath.Dir(exe), "ejcloud-executor")
}

// withoutUserinfo is a URL as an error may show it: anything before an '@' of its authority
// (a password) left out.
func withoutUserinfo(u string) string {
	scheme, rest, ok := strings.Cut(u, "://")
	if !ok {
		scheme, rest = "", u
	}
	authority, path, _ := strings.Cut(rest, "/")
	at := strings.LastIndex(authority, "@")
	if at < 0 {
		return u
	}
	out := "…@" + authority[at+1:]
	if ok {
		out = scheme + "://" + out
	}
	if path != "" || strings.Contains(rest, "/") {
		out += "/" + path
	}
	return out
}
