package scheduler

import (
	"strings"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/internal/await"
)

// A running task whose agent says nothing for longer than --stale-task-threshold is counted
// in ejcloud_tasks_stale until it speaks again (here: it finishes).
func TestASilentTaskIsReportedStale(t *testing.T) {
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
