package scheduler

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/ejcloud/ejcloud/internal/await"
)

// A running task whose agent says nothing for longer than --stale-task-threshold is counted
// in ejcloud_tasks_stale until it speaks again (here: it finishes).
func TestASilentTaskIsReportedStale(t *testing.T) {
	t.Parallel()
	s := newSystem(t, 1, func(c *Config) { c.StaleTaskThreshold = time.Second })
	s.register(s.holdJob("quiet", 1, ""))
	s.trigger("quiet")
	metrics := func() string {
		_, body := call(t, "GET", "http://"+s.sched.cfg.HTTPAddr+"/metrics", "")
		return body
	}
	await.True(t, 30*time.Second, "the silent task is counted stale", func() bool {
		return strings.Contains(metrics(), "\nejcloud_tasks_stale 1\n")
	})
	s.release("quiet")
	await.True(t, 30*time.Second, "the finished task is no longer stale", func() bool {
		return s.runningCount("quiet") == 0 && strings.Contains(metrics(), "\nejcloud_tasks_stale 0\n")
	})
}

// ejcloud_tasks_stale is the leader's: an instance that no longer leads reports none, not the
// count of its last term (an alert on it fired on a standby, and a sum counted tasks twice).
func TestAFormerLeaderReportsNoStaleTasks(t *testing.T) {
	t.Parallel()
	s := newSystem(t, 1, func(c *Config) { c.StaleTaskThreshold = time.Second })
	s.register(s.holdJob("quiet", 1, ""))
	s.trigger("quiet")
	old := s.sched.cfg.HTTPAddr
	await.True(t, 30*time.Second, "the leader counts the silent task stale", func() bool {
		return value(scrape(t, old), "ejcloud_tasks_stale") == 1
	})
	cfg := testConfig(t, s.env)
	cfg.MesosURL, cfg.StaleTaskThreshold = s.mesos.URL(), time.Second
	standby := start(t, cfg)
	conn, _, err := zk.Connect(s.env.Servers, 5*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	dir := "/" + s.env.Namespace + "/ha/election"
	await.True(t, 10*time.Second, "the standby joins the election", func() bool {
		kids, _, err := conn.Children(dir)
		return err == nil && len(kids) == 2
	})
	kids, _, err := conn.Children(dir)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(kids) // n_{seq}: the lowest leads
	if err := conn.Delete(dir+"/"+kids[0], -1); err != nil {
		t.Fatal(err)
	}
	await.True(t, 30*time.Second, "the standby leads", func() bool {
		return value(scrape(t, standby.cfg.HTTPAddr), "ejcloud_leader") == 1
	})
	await.True(t, 10*time.Second, "the former leader reports no stale tasks", func() bool {
		f := scrape(t, old)
		_, stale := f["ejcloud_tasks_stale"]
		return value(f, "ejcloud_leader") == 0 && !stale
	})
}
