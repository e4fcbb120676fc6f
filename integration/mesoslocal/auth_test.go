package mesoslocal_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/recordio"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"

	"github.com/ejcloud/ejcloud/integration/mesoslocal"
)

// With framework authentication on, a scheduler API request without valid HTTP Basic
// credentials gets 401 and a Basic challenge, one whose principal is not its FrameworkInfo's
// gets 400 (MESOS.md §1.2 step 12), and a matching one subscribes.
func TestFrameworkAuthentication(t *testing.T) {
	t.Parallel()
	c := newCluster(t, func(o *mesoslocal.Options) { o.Credentials = map[string]string{"ejcloud": "s3cret", "other": "x"} })
	url := c.URL() + "/api/v1/scheduler"
	subscribeAs := func(principal string) []byte {
		info := frameworkInfo()
		if principal != "" {
			info.Principal = &principal
		}
		return jsonCall(t, calls.Subscribe(info))
	}
	for _, tc := range []struct {
		name, user, pass, principal string
		code                        int
		body                        string
	}{
		{"no credentials", "", "", "ejcloud", http.StatusUnauthorized, ""},
		{"a wrong secret", "ejcloud", "guess", "ejcloud", http.StatusUnauthorized, ""},
		{"an unknown principal", "nobody", "s3cret", "nobody", http.StatusUnauthorized, ""},
		{"no principal in FrameworkInfo", "ejcloud", "s3cret", "", http.StatusBadRequest, "does not match principal ''"},
		{"another principal in FrameworkInfo", "other", "x", "ejcloud", http.StatusBadRequest, "Authenticated principal 'other' does not match principal 'ejcloud'"},
		{"the principal and its secret", "ejcloud", "s3cret", "ejcloud", http.StatusOK, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(subscribeAs(tc.principal)))
			req.Header.Set("Content-Type", "application/json")
			if tc.user != "" {
				req.SetBasicAuth(tc.user, tc.pass)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != tc.code {
				t.Fatalf("status %d; want %d", resp.StatusCode, tc.code)
			}
			if tc.code == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") != `Basic realm="mesos"` {
				t.Fatalf("WWW-Authenticate %q; want a Basic challenge", resp.Header.Get("WWW-Authenticate"))
			}
			if tc.code == http.StatusOK {
				return // the subscription's stream
			}
			b, _ := io.ReadAll(resp.Body)
			if !strings.Contains(string(b), tc.body) {
				t.Fatalf("body %q; want it to say %q", b, tc.body)
			}
		})
	}
}

// A subscribed framework's calls need its own principal's credentials: another principal's
// get 400 (MESOS.md §1.2 step 12), none get 401, its own get 202.
func TestFrameworkAuthenticationOfCalls(t *testing.T) {
	t.Parallel()
	c := newCluster(t, func(o *mesoslocal.Options) { o.Credentials = map[string]string{"ejcloud": "s3cret", "other": "x"} })
	url := c.URL() + "/api/v1/scheduler"
	post := func(user, pass, streamID string, body []byte) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if streamID != "" {
			req.Header.Set("Mesos-Stream-Id", streamID)
		}
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	info := frameworkInfo()
	info.Principal = ptrTo("ejcloud")
	sub := post("ejcloud", "s3cret", "", jsonCall(t, calls.Subscribe(info)))
	defer sub.Body.Close()
	if sub.StatusCode != http.StatusOK {
		t.Fatalf("SUBSCRIBE: %d", sub.StatusCode)
	}
	ev := readEvent(t, recordio.NewReader(sub.Body), "application/json")
	decline := jsonCall(t, calls.Decline(mesos.OfferID{Value: "x"}).With(calls.Framework(ev.Subscribed.FrameworkID.Value)))
	for _, tc := range []struct {
		name, user, pass string
		want             int
	}{
		{"another principal", "other", "x", http.StatusBadRequest},
		{"no credentials", "", "", http.StatusUnauthorized},
		{"its own principal", "ejcloud", "s3cret", http.StatusAccepted},
	} {
		resp := post(tc.user, tc.pass, sub.Header.Get("Mesos-Stream-Id"), decline)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("DECLINE with %s: %d; want %d", tc.name, resp.StatusCode, tc.want)
		}
	}
}

// The read-only endpoints: the master's with AuthenticateReadonly, the agents' with
// AuthenticateAgentReadonly, each needing the credentials (401 and a Basic challenge without
// them) only when its option is on.
func TestAuthenticatedReadonlyEndpoints(t *testing.T) {
	t.Parallel()
	creds := map[string]string{"ejcloud": "s3cret"}
	for _, tc := range []struct {
		name                  string
		master, agents        bool
		wantMaster, wantAgent int // the status without credentials
	}{
		{"master and agents", true, true, http.StatusUnauthorized, http.StatusUnauthorized},
		{"the master only", true, false, http.StatusUnauthorized, http.StatusOK},
		{"the agents only", false, true, http.StatusOK, http.StatusUnauthorized},
		{"neither", false, false, http.StatusOK, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(t, func(o *mesoslocal.Options) {
				o.Credentials, o.AuthenticateReadonly, o.AuthenticateAgentReadonly = creds, tc.master, tc.agents
			})
			status := func(u string, withCreds bool) (int, []byte) {
				t.Helper()
				req, _ := http.NewRequest(http.MethodGet, u, nil)
				if withCreds {
					req.SetBasicAuth("ejcloud", "s3cret")
				}
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				defer resp.Body.Close()
				b, _ := io.ReadAll(resp.Body)
				if resp.StatusCode == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") != `Basic realm="mesos"` {
					t.Fatalf("GET %s: 401 without a Basic challenge", u)
				}
				return resp.StatusCode, b
			}
			code, body := status(c.URL()+"/master/state", true)
			var doc struct {
				Slaves []struct{ PID string } `json:"slaves"`
			}
			if err := json.Unmarshal(body, &doc); code != http.StatusOK || err != nil || len(doc.Slaves) == 0 {
				t.Fatalf("/master/state with credentials: %d %s", code, body)
			}
			if code, _ := status(c.URL()+"/master/state", false); code != tc.wantMaster {
				t.Fatalf("/master/state without credentials: %d; want %d", code, tc.wantMaster)
			}
			_, addr, _ := strings.Cut(doc.Slaves[0].PID, "@")
			agent := "http://" + addr
			for _, ep := range []struct {
				path      string
				withCreds int // a missing file is a 404 once past authentication
			}{
				{"/state", http.StatusOK},
				{"/slave(1)/state", http.StatusOK},
				{"/files/read?path=/no/such/file&offset=0", http.StatusNotFound},
				{"/files/read.json?path=/no/such/file&offset=0", http.StatusNotFound},
			} {
				if code, body := status(agent+ep.path, true); code != ep.withCreds {
					t.Fatalf("agent %s with credentials: %d %s; want %d", ep.path, code, body, ep.withCreds)
				}
				want := tc.wantAgent
				if want == http.StatusOK {
					want = ep.withCreds
				}
				if code, _ := status(agent+ep.path, false); code != want {
					t.Fatalf("agent %s without credentials: %d; want %d", ep.path, code, want)
				}
			}
		})
	}
}

func TestReadCredentials(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, tc := range []struct {
		name, text string
		want       map[string]string
		err        bool
	}{
		{"json", `{"credentials":[{"principal":"a","secret":"1"},{"principal":"b","secret":"2"}]}`, map[string]string{"a": "1", "b": "2"}, false},
		{"lines", "a 1\n\nb 2\n", map[string]string{"a": "1", "b": "2"}, false},
		{"a line without a secret", "a\n", nil, true},
		{"empty", "", nil, true},
		{"bad json", `{"credentials":`, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, tc.name)
			os.WriteFile(p, []byte(tc.text), 0o600)
			got, err := mesoslocal.ReadCredentials(p)
			if (err != nil) != tc.err || !tc.err && !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ReadCredentials = %v, %v; want %v (error: %v)", got, err, tc.want, tc.err)
			}
		})
	}
}
