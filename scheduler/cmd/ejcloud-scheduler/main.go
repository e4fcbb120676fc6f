// Command ejcloud-scheduler is ejcloud's Mesos framework, REST API and console.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/envflag"
	"github.com/ejcloud/ejcloud/scheduler"
)

func main() {
	fs := flag.NewFlagSet("ejcloud-scheduler", flag.ContinueOnError)
	cfg := scheduler.Flags(fs)
	envflag.Usage(fs, "ejcloud-scheduler: Elastic-Job-Cloud for Go, a Mesos framework for scheduled jobs.")
	// Every start-up error is one line and exit status 1 (SPEC §2).
	if err := envflag.Parse(fs, os.Args[1:], os.Getenv); err != nil {
		if err == flag.ErrHelp {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "ejcloud-scheduler:", err, "(--help lists the flags)")
		os.Exit(1)
	}
	log := logrus.New()
	level, err := logrus.ParseLevel(cfg.LogLevel)
	if err != nil {
		fmt.Fprintln(os.Stderr, "ejcloud-scheduler: --log-level:", err)
		os.Exit(1)
	}
	log.SetLevel(level)
	switch cfg.LogFormat {
	case "json":
		log.SetFormatter(&logrus.JSONFormatter{})
	case "text":
		log.SetFormatter(&logrus.TextFormatter{FullTimestamp: true})
	default:
		fmt.Fprintln(os.Stderr, "ejcloud-scheduler: --log-format must be text or json")
		os.Exit(1)
	}
	// SIGHUP too: a closed terminal or a supervisor's hangup would otherwise kill it at once,
	// without resigning (the standby waiting out the session) or writing the queued trace.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	go func() {
		// A second signal ends the process at once, as without the handler: an operator's
		// second Ctrl-C is not to be ignored while the shutdown waits.
		<-ctx.Done()
		stop()
	}()
	if err := scheduler.Run(ctx, *cfg, log); err != nil {
		// Through the logger, in its format: with --log-format json the reason the process
		// ends (the framework removed, Mesos unreachable) is the line a collector must parse.
		log.WithError(err).Error("ejcloud-scheduler exits")
		os.Exit(1)
	}
}
