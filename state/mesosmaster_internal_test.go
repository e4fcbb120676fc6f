package state

import (
	"strings"
	"testing"
)

func TestParseMesosZK(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		want    MesosZK
		wantErr string
	}{
		{in: "zk://127.0.0.1:2181/mesos", want: MesosZK{Servers: []string{"127.0.0.1:2181"}, Path: "/mesos"}},
		{in: "zk://u:p@zk1:2181,zk2:2182/a/mesos/", want: MesosZK{Servers: []string{"zk1:2181", "zk2:2182"}, Auth: "u:p", Path: "/a/mesos"}},
		{in: "zk://[::1]:2181/mesos", want: MesosZK{Servers: []string{"[::1]:2181"}, Path: "/mesos"}},
		{in: "http://127.0.0.1:5050", wantErr: "not a zk:// URL"},
		{in: "zk://127.0.0.1:2181", wantErr: "the path must name"},
		{in: "zk://127.0.0.1:2181/", wantErr: "the path must name"},
		{in: "zk://127.0.0.1:2181/a//b", wantErr: "the path must name"},
		{in: "zk://127.0.0.1/mesos", wantErr: `server "127.0.0.1" is not host:port`},
		{in: "zk://127.0.0.1:x/mesos", wantErr: "no valid port"},
		{in: "zk://u@127.0.0.1:2181/mesos", wantErr: "user:password"},
		{in: "zk://127.0.0.1:2181,/mesos", wantErr: "is not host:port"},
	} {
		got, err := ParseMesosZK(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("ParseMesosZK(%q) = %+v, %v; want an error with %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || strings.Join(got.Servers, ",") != strings.Join(tc.want.Servers, ",") || got.Auth != tc.want.Auth || got.Path != tc.want.Path {
			t.Errorf("ParseMesosZK(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	if s := (MesosZK{Servers: []string{"h:1"}, Auth: "u:secret", Path: "/m"}).String(); strings.Contains(s, "secret") {
		t.Errorf("String() shows the password: %s", s)
	}
}

func TestParseMasterInfo(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, json, want, wantErr string
	}{
		// As Mesos 1.11 writes it (JSON::protobuf of MasterInfo).
		{name: "mesos 1.x", json: `{"address":{"hostname":"master-1.example","ip":"10.0.0.1","port":5050},"hostname":"master-1.example","id":"a0ee7c17-0000","ip":16777226,"pid":"master@10.0.0.1:5050","port":5050,"version":"1.11.0"}`, want: "master-1.example:5050"},
		{name: "address without host name", json: `{"address":{"ip":"10.0.0.1","port":5051},"id":"x","ip":16777226,"port":5051}`, want: "10.0.0.1:5051"},
		{name: "ip only (old masters)", json: `{"id":"x","ip":16777226,"port":5050}`, want: "10.0.0.1:5050"},
		{name: "not JSON", json: "\x0a\x02id", wantErr: "not JSON"},
		{name: "no port", json: `{"id":"x","hostname":"h"}`, wantErr: "names no host and port"},
	} {
		m, err := parseMasterInfo([]byte(tc.json))
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("%s: got %+v, %v; want an error with %q", tc.name, m, err, tc.wantErr)
			}
			continue
		}
		if err != nil || m.Address != tc.want {
			t.Errorf("%s: got %+v, %v; want %s", tc.name, m, err, tc.want)
		}
	}
}

func TestLowestMasterNode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		children []string
		want     string
	}{
		{nil, ""},
		{[]string{"log_replicas", "info_0000000001"}, ""},
		{[]string{"json.info_0000000012", "info_0000000001", "json.info_0000000003", "log_replicas"}, "json.info_0000000003"},
		{[]string{"json.info_9999999999", "json.info_10000000000"}, "json.info_9999999999"},
	} {
		if got := lowestMasterNode(tc.children); got != tc.want {
			t.Errorf("lowestMasterNode(%v) = %q, want %q", tc.children, got, tc.want)
		}
	}
}
