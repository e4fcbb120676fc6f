package envflag

import (
	"flag"
	"io"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantZK  string
		wantTO  time.Duration
		wantErr string
	}{
		{name: "defaults", wantZK: "127.0.0.1:2181", wantTO: time.Hour},
		{name: "environment sets a flag", env: map[string]string{"EJCLOUD_ZK_SERVERS": "10.0.0.1:2181"}, wantZK: "10.0.0.1:2181", wantTO: time.Hour},
		{name: "command line wins over environment", args: []string{"--zk-servers=a:1"}, env: map[string]string{"EJCLOUD_ZK_SERVERS": "b:2"}, wantZK: "a:1", wantTO: time.Hour},
		{name: "duration from environment", env: map[string]string{"EJCLOUD_FAILOVER_TIMEOUT": "5m"}, wantZK: "127.0.0.1:2181", wantTO: 5 * time.Minute},
		{name: "bad variable is named", env: map[string]string{"EJCLOUD_FAILOVER_TIMEOUT": "soon"}, wantErr: "EJCLOUD_FAILOVER_TIMEOUT"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			zk := fs.String("zk-servers", "127.0.0.1:2181", "")
			to := fs.Duration("failover-timeout", time.Hour, "")
			err := Parse(fs, tc.args, func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Parse error = %v; want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil || *zk != tc.wantZK || *to != tc.wantTO {
				t.Fatalf("Parse(%v, %v) = %q, %v, %v; want %q, %v", tc.args, tc.env, *zk, *to, err, tc.wantZK, tc.wantTO)
			}
		})
	}
}

// A bad flag is returned, not printed with the whole usage (the command reports it on one
// line); --help prints the usage.
func TestParseLeavesTheReportToTheCommand(t *testing.T) {
	for _, tc := range []struct {
		name      string
		args      []string
		wantErr   string
		wantUsage bool
	}{
		{name: "unknown flag", args: []string{"--bogus"}, wantErr: "-bogus"},
		{name: "bad value", args: []string{"--failover-timeout=soon"}, wantErr: "failover-timeout"},
		{name: "help", args: []string{"--help"}, wantErr: flag.ErrHelp.Error(), wantUsage: true},
		// A bool flag's value as the next argument ends the flags: what follows was dropped.
		{name: "a stray argument", args: []string{"--insecure", "false", "--failover-timeout=1s"}, wantErr: `unexpected argument "false"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("x", flag.ContinueOnError)
			var out strings.Builder
			fs.SetOutput(&out)
			fs.Duration("failover-timeout", time.Hour, "")
			fs.Bool("insecure", false, "")
			Usage(fs, "x: a command")
			err := Parse(fs, tc.args, func(string) string { return "" })
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %v; want one saying %q", err, tc.wantErr)
			}
			if got := strings.Contains(out.String(), "x: a command"); got != tc.wantUsage || !tc.wantUsage && out.Len() != 0 {
				t.Fatalf("printed %q; want the usage: %v, else nothing", out.String(), tc.wantUsage)
			}
		})
	}
}
