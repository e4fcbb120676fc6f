package config

import (
	"errors"
	"slices"
	"testing"
)

func TestCycle(t *testing.T) {
	cases := []struct {
		name string
		deps map[string][]string
		job  string
		want []string
	}{
		{"none", map[string][]string{"d": {"b", "c"}, "b": {"a"}, "c": {"a"}}, "d", nil},
		{"self", map[string][]string{"a": {"a"}}, "a", []string{"a", "a"}},
		{"three", map[string][]string{"a": {"b"}, "b": {"c"}, "c": {"a"}}, "a", []string{"a", "b", "c", "a"}},
		{"through a diamond", map[string][]string{"a": {"b", "c"}, "b": {"d"}, "c": {"d"}, "d": {"a"}}, "a", []string{"a", "b", "d", "a"}},
		{"a cycle elsewhere is not this job's", map[string][]string{"x": {"y"}, "y": {"x"}, "a": {"x"}}, "a", nil},
		{"unknown dependencies", map[string][]string{"a": {"ghost"}}, "a", nil},
	}
	for _, c := range cases {
		if got := Cycle(c.deps, c.job); !slices.Equal(got, c.want) {
			t.Errorf("%s: %v; want %v", c.name, got, c.want)
		}
	}
}

func TestCheckDependsOn(t *testing.T) {
	job := func(name, kind, cron, policy string, deps ...string) Job {
		return Job{JobName: name, JobExecutionType: kind, Cron: cron, ConcurrencyPolicy: policy, DependsOn: deps}
	}
	every := "0 * * * * ?"
	stored := []Job{
		job("up", Transient, every, Forbid),
		job("down", Transient, every, Forbid, "up"),
		job("daemon", Daemon, every, ""),
		job("par", Transient, every, Allow),
		job("manual", Transient, "", Forbid),
	}
	cases := []struct {
		name      string
		j         Job
		wantField string // "" for no error
		wantMsg   string
	}{
		{"depends on a waitable job", job("new", Transient, every, Forbid, "up"), "", ""},
		{"on a missing job", job("new", Transient, every, Forbid, "ghost"), "dependsOn", `dependsOn names job "ghost", which does not exist`},
		{"on a DAEMON", job("new", Transient, every, Forbid, "daemon"), "dependsOn", `dependsOn names job "daemon", which is not a TRANSIENT job with a cron`},
		{"on a job without a cron", job("new", Transient, every, Forbid, "manual"), "dependsOn", `dependsOn names job "manual", which is not a TRANSIENT job with a cron`},
		{"on an Allow job", job("new", Transient, every, Forbid, "par"), "dependsOn", `dependsOn names job "par", whose concurrencyPolicy is Allow (its runs overlap: a logical time has no single run to wait for)`},
		{"closing a cycle", job("up", Transient, every, Forbid, "down"), "dependsOn", "dependsOn would close a cycle: up → down → up"},
		{"on itself", job("new", Transient, every, Forbid, "new"), "dependsOn", "dependsOn would close a cycle: new → new"},
		{"a depended-on job made Allow", job("up", Transient, every, Allow), "concurrencyPolicy", `job "down" depends on this job: a job others depend on cannot have concurrencyPolicy Allow`},
		{"made a DAEMON", job("up", Daemon, every, ""), "jobExecutionType", `job "down" depends on this job: a job others depend on must be TRANSIENT`},
		{"left without a cron", job("up", Transient, "", Forbid), "cron", `job "down" depends on this job: a job others depend on must have a cron`},
		{"a job nobody depends on made a DAEMON", job("down", Daemon, every, ""), "", ""},
	}
	for _, c := range cases {
		err := CheckDependsOn(c.j, stored)
		var fe *FieldError
		switch {
		case c.wantField == "" && err != nil:
			t.Errorf("%s: %v; want none", c.name, err)
		case c.wantField != "" && (!errors.As(err, &fe) || fe.Field != c.wantField || fe.Message != c.wantMsg):
			t.Errorf("%s: %v; want field %s: %s", c.name, err, c.wantField, c.wantMsg)
		}
	}
}

func TestCheckNoDependents(t *testing.T) {
	jobs := []Job{{JobName: "up"}, {JobName: "down", DependsOn: []string{"up"}}, {JobName: "other"}}
	err := CheckNoDependents(jobs, func(j string) bool { return j == "up" })
	var de *DependentError
	if !errors.As(err, &de) || *de != (DependentError{Job: "down", DependsOn: "up"}) {
		t.Fatalf("deleting up: %v; want down depending on it", err)
	}
	if err := CheckNoDependents(jobs, func(j string) bool { return j == "up" || j == "down" }); err != nil {
		t.Fatalf("deleting up with down: %v; want none (they go together)", err)
	}
	if err := CheckNoDependents(jobs, func(j string) bool { return j == "other" }); err != nil {
		t.Fatalf("deleting other: %v; want none", err)
	}
}
