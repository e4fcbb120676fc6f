// Command lite-service is an example of a service that runs a sharded job in Elastic-Job-Lite
// mode: start it several times against one ZooKeeper and the instances share the job's items,
// each item running once per fire; kill one and the others take its items over.
//
//	go build -o lite-service ./lite/examples/lite-service
//	./lite-service --zk 127.0.0.1:2181 --items 9 --cron '*/5 * * * * ?' &
//	./lite-service --zk 127.0.0.1:2181 --items 9 --cron '*/5 * * * * ?' &
//
// Its job is SIMPLE: each item waits --work, logging "start" and "done" lines (item, fire,
// instance) to stdout, or to --record when given (one line per write, appended).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/envflag"
	"github.com/ejcloud/ejcloud/executor/job"
	"github.com/ejcloud/ejcloud/lite"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "lite-service:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("lite-service", flag.ContinueOnError)
	zk := fs.String("zk", "127.0.0.1:2181", "ZooKeeper servers, comma-separated host:port")
	ns := fs.String("namespace", "ejcloud-lite", "ZooKeeper namespace")
	name := fs.String("job", "example-job", "job name")
	cronExpr := fs.String("cron", "*/5 * * * * ?", "Quartz cron expression")
	items := fs.Int("items", 9, "shardingTotalCount")
	strategy := fs.String("strategy", "AVG_ALLOCATION", "AVG_ALLOCATION, ODEVITY or ROUND_ROBIN")
	failover := fs.Bool("failover", true, "run a lost instance's items on the survivors")
	misfire := fs.Bool("misfire", false, "run fires that come during a run after it")
	session := fs.Duration("session-timeout", 10*time.Second, "ZooKeeper session timeout")
	work := fs.Duration("work", time.Second, "how long each item works")
	ip := fs.String("ip", "", "this server's IP as the job's servers/{ip} (default: the first non-loopback IPv4)")
	record := fs.String("record", "", "append the item runs to this file instead of stdout")
	if err := envflag.Parse(fs, args, os.Getenv); err != nil {
		return err
	}
	out := os.Stdout
	if *record != "" {
		f, err := os.OpenFile(*record, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		out = f
	}
	var mu sync.Mutex // one line per write
	logLine := func(what string, sc job.ShardingContext) {
		parts := strings.Split(sc.TaskID, "@-@") // job@-@item@-@fire@-@instance
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, "%s %d %s %s\n", what, sc.ShardingItem, parts[2], strings.Join(parts[3:], "@-@"))
	}
	work1 := job.SimpleFunc(func(ctx context.Context, sc job.ShardingContext) error {
		logLine("start", sc)
		select {
		case <-time.After(*work):
		case <-ctx.Done():
			return ctx.Err()
		}
		logLine("done", sc)
		return nil
	})
	cfg := lite.JobConfig{
		JobName: *name, JobType: lite.Simple, Cron: *cronExpr, ShardingTotalCount: *items,
		JobShardingStrategyType: *strategy, Failover: *failover, Misfire: *misfire, MonitorExecution: true,
	}
	log := logrus.New()
	log.SetOutput(os.Stderr)
	in, err := lite.New(cfg, work1, lite.Options{Servers: strings.Split(*zk, ","), Namespace: *ns,
		SessionTimeout: *session, IP: *ip, Logger: log})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log.WithField("instance", in.ID()).Info("lite-service started")
	return in.Run(ctx)
}
