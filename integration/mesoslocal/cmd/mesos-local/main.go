// Command mesos-local runs a single-host Mesos master with agents that speak the real v1
// scheduler and executor HTTP APIs, for development and tests (SPEC §10).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/envflag"
	"github.com/ejcloud/ejcloud/integration/audit"
	"github.com/ejcloud/ejcloud/integration/mesoslocal"
	"github.com/ejcloud/ejcloud/state"
)

func main() {
	fs := flag.NewFlagSet("mesos-local", flag.ContinueOnError)
	var o mesoslocal.Options
	fs.StringVar(&o.Addr, "addr", "127.0.0.1:5050", "master address (loopback)")
	fs.IntVar(&o.Agents, "agents", 1, "number of agents")
	fs.StringVar(&o.AgentResources, "agent-resources", "cpus:4;mem:4096;disk:10000;ports:[31000-32000]", "resources of each agent")
	fs.StringVar(&o.WorkDir, "work-dir", "", "sandboxes and fetcher cache (default: a new temporary directory)")
	fs.StringVar(&o.StandbyAddr, "standby-addr", "", "also listen here as a non-leading master that answers 307")
	fs.DurationVar(&o.HeartbeatInterval, "heartbeat-interval", 0, "scheduler HEARTBEAT interval (Mesos: 15s)")
	fs.DurationVar(&o.AllocationInterval, "allocation-interval", 0, "allocation interval (Mesos: 1s)")
	fs.DurationVar(&o.OfferTimeout, "offer-timeout", 0, "rescind offers held this long (Mesos: never)")
	fs.DurationVar(&o.AgentPingTimeout, "agent-ping-timeout", 0, "agent ping timeout (Mesos: 15s)")
	fs.IntVar(&o.MaxAgentPingTimeouts, "max-agent-ping-timeouts", 0, "missed pings before an agent is unreachable (Mesos: 5)")
	fs.DurationVar(&o.AgentReregisterTimeout, "agent-reregister-timeout", 0, "after a master failover, agents not re-registered by then are unreachable (Mesos: 10m)")
	fs.DurationVar(&o.AgentReregisterDelay, "agent-reregister-delay", 0, "how long agents take to re-register with a new master (Mesos: up to --registration_backoff_factor, 1s)")
	fs.DurationVar(&o.StatusUpdateRetryMin, "status-update-retry", 0, "first status update retry interval (Mesos: 10s)")
	fs.DurationVar(&o.StatusUpdateRetryMax, "status-update-retry-max", 0, "largest status update retry interval (Mesos: 10m)")
	fs.DurationVar(&o.ExecutorRegistrationTimeout, "executor-registration-timeout", 0, "(Mesos: 1m)")
	fs.DurationVar(&o.ExecutorShutdownGracePeriod, "executor-shutdown-grace-period", 0, "(Mesos: 5s)")
	fs.DurationVar(&o.ExecutorReregistrationTimeout, "executor-reregistration-timeout", 0, "(Mesos: 2s)")
	fs.DurationVar(&o.RecoveryTimeout, "recovery-timeout", 0, "how long executors wait for a restarted agent (Mesos: 15m)")
	fs.DurationVar(&o.ExecutorHeartbeatInterval, "executor-heartbeat-interval", 0, "(Mesos: 30m)")
	fs.StringVar(&o.Containment, "containment", mesoslocal.ContainAuto, "executor containers: session (kill the executor's session when it ends), cgroup (also a cgroup v2 per executor; fails if the hierarchy is not writable) or auto (cgroup where possible)")
	authFrameworks := fs.Bool("authenticate-http-frameworks", false, "require HTTP Basic credentials from --credentials on the scheduler API")
	authReadonly := fs.Bool("authenticate-http-readonly", false, "also require the --credentials on the master's read-only endpoints (/master/state, /state)")
	authAgentReadonly := fs.Bool("authenticate-agent-http-readonly", false, "also require the --credentials on the agents' read-only endpoints (/state, /files/read), as agents with --authenticate_http_readonly and --http_credentials do")
	credentials := fs.String("credentials", "", "Mesos credentials file: JSON {\"credentials\":[{\"principal\",\"secret\"}]} or lines \"principal secret\"")
	zkURL := fs.String("zk", "", "zk://host:port[,host:port…]/path: contend for leadership there as Mesos masters do (json.info_ nodes holding MasterInfo as JSON); until it leads, the scheduler API answers 307 to the leader or 503")
	zkSessionTimeout := fs.Duration("zk-session-timeout", 10*time.Second, "ZooKeeper session timeout with --zk (Mesos: 10secs): a killed master leads until it expires")
	record := fs.String("record-updates", "", "append every status update the agents take to this file as JSON lines, for integration/audit")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	envflag.Usage(fs, "mesos-local: a single-host Mesos master and agents speaking the v1 HTTP APIs.\n\n"+
		"Fault injection: POST /local/agents/{id}/{partition|heal|kill|restart|gone};\n"+
		"POST /local/frameworks/{id}/{partition|heal} (the framework's scheduler cut off from the master: its event stream\n"+
		"silent, its calls unanswered until the heal); POST /local/master/failover[?hold=<agent id>…]\n"+
		"(a new master takes over: frameworks must re-subscribe, agents re-register after --agent-reregister-delay, held ones\n"+
		"only when healed, and those not back within --agent-reregister-timeout are unreachable); state: GET /master/state.")
	if err := envflag.Parse(fs, os.Args[1:], os.Getenv); err != nil {
		if err == flag.ErrHelp {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "mesos-local:", err)
		os.Exit(2)
	}
	log := logrus.New()
	level, err := logrus.ParseLevel(*logLevel)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mesos-local: --log-level:", err)
		os.Exit(2)
	}
	log.SetLevel(level)
	o.Logger = log
	if o.WorkDir == "" {
		if o.WorkDir, err = os.MkdirTemp("", "mesos-local-"); err != nil {
			fmt.Fprintln(os.Stderr, "mesos-local:", err)
			os.Exit(1)
		}
	}
	switch {
	case !*authFrameworks && *credentials != "":
		fmt.Fprintln(os.Stderr, "mesos-local: --credentials is read only with --authenticate-http-frameworks")
		os.Exit(2)
	case *authFrameworks && *credentials == "":
		fmt.Fprintln(os.Stderr, "mesos-local: --authenticate-http-frameworks needs --credentials")
		os.Exit(2)
	case *authReadonly && !*authFrameworks:
		fmt.Fprintln(os.Stderr, "mesos-local: --authenticate-http-readonly needs --authenticate-http-frameworks and its --credentials")
		os.Exit(2)
	case *authAgentReadonly && !*authFrameworks:
		fmt.Fprintln(os.Stderr, "mesos-local: --authenticate-agent-http-readonly needs --authenticate-http-frameworks and its --credentials")
		os.Exit(2)
	case *authFrameworks:
		o.AuthenticateReadonly, o.AuthenticateAgentReadonly = *authReadonly, *authAgentReadonly
		if o.Credentials, err = mesoslocal.ReadCredentials(*credentials); err != nil {
			fmt.Fprintln(os.Stderr, "mesos-local: --credentials:", err)
			os.Exit(2)
		}
	}
	if *record != "" {
		f, err := os.OpenFile(*record, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			fmt.Fprintln(os.Stderr, "mesos-local: --record-updates:", err)
			os.Exit(1)
		}
		defer f.Close()
		// Unbuffered: an audit reads the file while mesos-local runs, and after it is killed.
		o.OnStatusUpdate = audit.NewRecorder(f).Observe
	}
	var masters state.MesosZK
	var candidacy atomic.Pointer[state.MasterCandidacy]
	if *zkURL != "" {
		if masters, err = state.ParseMesosZK(*zkURL); err != nil {
			fmt.Fprintln(os.Stderr, "mesos-local: --zk:", err)
			os.Exit(2)
		}
		o.Leader = func() (bool, string) {
			c := candidacy.Load()
			if c == nil {
				return false, ""
			}
			leading, m, _ := c.Leading()
			return leading, m.Address
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, err := mesoslocal.New(o)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mesos-local:", err)
		os.Exit(1)
	}
	fmt.Printf("mesos-local: master %s with %d agents %v, work dir %s\n", c.URL(), len(c.AgentIDs()), c.AgentIDs(), o.WorkDir)
	lost := make(<-chan struct{})
	if *zkURL != "" {
		cand, err := contend(ctx, c, masters, *zkSessionTimeout, log)
		if err != nil {
			c.Close()
			fmt.Fprintln(os.Stderr, "mesos-local: --zk:", err)
			os.Exit(1)
		}
		defer cand.Close()
		candidacy.Store(cand)
		lost = cand.Lost()
		go announce(ctx, cand, c.URL())
	}
	select {
	case <-ctx.Done():
	case <-lost:
		// A real master whose ZooKeeper session expired has lost its leadership and aborts.
		c.Close()
		fmt.Fprintln(os.Stderr, "mesos-local: lost the ZooKeeper session of --zk; exiting as a Mesos master does")
		os.Exit(1)
	}
	c.Close()
	fmt.Println("mesos-local: stopped")
}

// contend publishes the master under --zk.
func contend(ctx context.Context, c *mesoslocal.Cluster, masters state.MesosZK, timeout time.Duration, log logrus.FieldLogger) (*state.MasterCandidacy, error) {
	info, err := c.MasterInfo()
	if err != nil {
		return nil, err
	}
	connect, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return state.ContendMesosMaster(connect, masters, info, timeout, log)
}

// announce prints when this master starts leading, for operators and tests.
func announce(ctx context.Context, cand *state.MasterCandidacy, url string) {
	for {
		leading, _, changed := cand.Leading()
		if leading {
			fmt.Printf("mesos-local: elected, leading master %s\n", url)
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}
