package executor

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/envflag"
	"github.com/ejcloud/ejcloud/executor/job"
)

// Version is the build's version, set with -ldflags "-X github.com/ejcloud/ejcloud/executor.Version=…".
var Version = "dev"

// Main runs the executor with the jobs registered through executor/job and exits the process.
// It is the whole main function of an executor binary.
func Main() {
	os.Exit(main1(os.Args[1:], os.Getenv, os.Stdout, os.Stderr))
}

// main1 is Main without the exit: 0 after a clean stop, 1 when the agent was lost, 2 for bad
// usage or when not started by a Mesos agent.
func main1(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	name := "ejcloud-executor"
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	version := fs.Bool("version", false, "print the version and exit")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	envflag.Usage(fs, fmt.Sprintf(`%s %s: the Mesos executor of ejcloud (Elastic-Job-Cloud for Go).

A Mesos agent starts it for an app; it is not run by hand. It reads the agent's environment:
  MESOS_FRAMEWORK_ID MESOS_EXECUTOR_ID MESOS_DIRECTORY MESOS_SANDBOX MESOS_AGENT_ENDPOINT
  MESOS_EXECUTOR_SHUTDOWN_GRACE_PERIOD, with MESOS_CHECKPOINT=1 also
  MESOS_RECOVERY_TIMEOUT MESOS_SUBSCRIPTION_BACKOFF_MAX, and where the agent authenticates
  executors MESOS_EXECUTOR_AUTHENTICATION_TOKEN.
It runs SCRIPT jobs; SIMPLE and DATAFLOW jobs need an executor built with the executor/job SDK.
Registered jobs: %s`, name, Version, registered()))
	// Like every ejcloud command's, its flags read EJCLOUD_* variables too (SPEC §2): an app's
	// executor takes its log level from the environment the agent gives it.
	if err := envflag.Parse(fs, args, getenv); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	if *version {
		fmt.Fprintf(stdout, "%s %s\n", name, Version)
		return 0
	}
	cfg, err := FromEnv(getenv)
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 2
	}
	log := logrus.New()
	log.SetOutput(stderr)
	log.SetFormatter(&logrus.TextFormatter{FullTimestamp: true})
	level, err := logrus.ParseLevel(*logLevel)
	if err != nil {
		fmt.Fprintf(stderr, "%s: --log-level: %v\n", name, err)
		return 2
	}
	log.SetLevel(level)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	entry := log.WithField("executor", cfg.ExecutorID)
	entry.WithFields(logrus.Fields{"version": Version, "agent": cfg.AgentEndpoint, "checkpoint": cfg.Checkpoint}).Info("executor starting")
	if err := New(cfg, entry).Run(ctx); err != nil {
		entry.WithError(err).Error("executor stopped")
		return 1
	}
	entry.Info("executor stopped")
	return 0
}

func registered() string {
	if names := job.Names(); len(names) > 0 {
		return strings.Join(names, ", ")
	}
	return "none"
}
