package lite

import (
	"testing"
	"time"
)

// A job without a timeZone runs its cron in the process's zone, as the comment of TimeZone and
// Elastic-Job-Lite (the JVM's default zone) say; one with a timeZone, in that zone.
func TestAJobWithoutATimeZoneRunsInTheProcesssZone(t *testing.T) {
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		t.Fatal(err)
	}
	was := time.Local
	time.Local = shanghai
	defer func() { time.Local = was }()
	c := JobConfig{JobName: "j", JobType: Simple, Cron: "0 0 2 * * ?", ShardingTotalCount: 1}
	p, err := c.parse()
	if err != nil {
		t.Fatal(err)
	}
	if p.loc != time.Local {
		t.Fatalf("zone %v; want the process's, %v", p.loc, time.Local)
	}
	c.TimeZone = "Europe/Paris"
	if p, err = c.parse(); err != nil || p.loc.String() != "Europe/Paris" {
		t.Fatalf("zone %v (%v); want Europe/Paris", p.loc, err)
	}
}
