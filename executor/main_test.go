package executor

import (
	"bytes"
	"strings"
	"testing"
)

func TestMainOutsideMesosNamesEveryMissingVariable(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	code := main1(nil, func(string) string { return "" }, &out, &errb)
	if code != 2 || !strings.Contains(errb.String(), "MESOS_FRAMEWORK_ID, MESOS_EXECUTOR_ID, MESOS_DIRECTORY, MESOS_SANDBOX, MESOS_AGENT_ENDPOINT, MESOS_EXECUTOR_SHUTDOWN_GRACE_PERIOD") {
		t.Fatalf("exit %d, stderr %q; want 2 and every missing variable named", code, errb.String())
	}
	if strings.Count(strings.TrimSpace(errb.String()), "\n") != 0 {
		t.Fatalf("want one line, got %q", errb.String())
	}
}

func TestVersionAndHelp(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	if code := main1([]string{"--version"}, func(string) string { return "" }, &out, &errb); code != 0 || out.String() != "ejcloud-executor "+Version+"\n" {
		t.Fatalf("--version: exit %d, %q", code, out.String())
	}
	out.Reset()
	if code := main1([]string{"--help"}, func(string) string { return "" }, &out, &errb); code != 0 || !strings.Contains(errb.String(), "MESOS_AGENT_ENDPOINT") {
		t.Fatalf("--help: exit %d, %q", code, errb.String())
	}
	if code := main1([]string{"--bogus"}, func(string) string { return "" }, &out, &errb); code != 2 {
		t.Fatalf("unknown flag: exit %d; want 2", code)
	}
}

// Its flags read EJCLOUD_* variables too, as every ejcloud command's do (SPEC §2); the command
// line wins.
func TestFlagsFromTheEnvironment(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	env := func(k string) string { return map[string]string{"EJCLOUD_VERSION": "true"}[k] }
	if code := main1(nil, env, &out, &errb); code != 0 || out.String() != "ejcloud-executor "+Version+"\n" {
		t.Fatalf("EJCLOUD_VERSION=true: exit %d, %q %q; want the version", code, out.String(), errb.String())
	}
	out.Reset()
	bad := func(k string) string { return map[string]string{"EJCLOUD_VERSION": "maybe"}[k] }
	if code := main1(nil, bad, &out, &errb); code != 2 || !strings.Contains(errb.String(), "EJCLOUD_VERSION") {
		t.Fatalf("EJCLOUD_VERSION=maybe: exit %d, %q; want 2 naming the variable", code, errb.String())
	}
}
