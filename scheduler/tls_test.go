package scheduler

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/internal/testcert"
	"github.com/ejcloud/ejcloud/state/statetest"
)

func TestTLSConfigValidation(t *testing.T) {
	t.Parallel()
	base := testConfig(t, statetest.Env{Servers: []string{"127.0.0.1:1"}, Namespace: "x"})
	ca := testcert.NewCA(t, "ejcloud test CA")
	cert, key := ca.Issue(t, "127.0.0.1", "localhost")
	otherCert, _ := testcert.NewCA(t, "other CA").Issue(t, "127.0.0.1")
	dir := t.TempDir()
	empty, garbage := filepath.Join(dir, "empty"), filepath.Join(dir, "garbage")
	os.WriteFile(empty, nil, 0o600)
	os.WriteFile(garbage, []byte("not a certificate\n"), 0o600)
	const needTLS = "--tls-cert-file and --tls-key-file, or accept the risk with --insecure-http"
	for _, tc := range []struct {
		name       string
		change     func(*Config)
		wantErr    string
		wantScheme string
	}{
		{"no TLS flag: system roots, plain HTTP", func(c *Config) {}, "", "http"},
		{"a CA file", func(c *Config) { c.MesosCAFile = ca.File }, "", "http"},
		{"a missing CA file", func(c *Config) { c.MesosCAFile = filepath.Join(dir, "nope") }, "--mesos-ca-file", ""},
		{"an empty CA file", func(c *Config) { c.MesosCAFile = empty }, "--mesos-ca-file " + empty + " holds no PEM certificate", ""},
		{"a CA file that is no PEM", func(c *Config) { c.MesosCAFile = garbage }, "--mesos-ca-file " + garbage + " holds no PEM certificate", ""},
		{"a certificate and its key", func(c *Config) { c.TLSCertFile, c.TLSKeyFile = cert, key }, "", "https"},
		{"a certificate without its key", func(c *Config) { c.TLSCertFile = cert }, "--tls-cert-file and --tls-key-file go together", ""},
		{"a key without its certificate", func(c *Config) { c.TLSKeyFile = key }, "--tls-cert-file and --tls-key-file go together", ""},
		{"a certificate that is no PEM", func(c *Config) { c.TLSCertFile, c.TLSKeyFile = garbage, key }, "--tls-cert-file " + garbage, ""},
		{"a missing key file", func(c *Config) { c.TLSCertFile, c.TLSKeyFile = cert, filepath.Join(dir, "nope") }, "--tls-key-file", ""},
		{"a key that is not the certificate's", func(c *Config) { c.TLSCertFile, c.TLSKeyFile = otherCert, key }, "--tls-cert-file " + otherCert, ""},
		{"Basic auth over plain HTTP on 0.0.0.0", func(c *Config) { c.HTTPAddr, c.AuthRoot = "0.0.0.0:8899", "root:pw" }, needTLS, ""},
		{"Basic auth over plain HTTP on [::]", func(c *Config) { c.HTTPAddr, c.AuthRoot = "[::]:8899", "root:pw" }, needTLS, ""},
		{"Basic auth over plain HTTP on a real IP", func(c *Config) { c.HTTPAddr, c.AuthRoot = "10.1.2.3:8899", "root:pw" }, needTLS, ""},
		{"Basic auth over plain HTTP on a host name", func(c *Config) { c.HTTPAddr, c.AuthRoot = "sched.example.com:8899", "root:pw" }, needTLS, ""},
		{"a guest over plain HTTP beyond loopback", func(c *Config) {
			c.HTTPAddr, c.AuthRoot, c.AuthGuest = "0.0.0.0:8899", "root:pw", "guest:pw"
		}, needTLS, ""},
		{"Basic auth over plain HTTP beyond loopback with --insecure-http", func(c *Config) {
			c.HTTPAddr, c.AuthRoot, c.InsecureHTTP = "0.0.0.0:8899", "root:pw", true
		}, "", "http"},
		{"Basic auth over HTTPS beyond loopback", func(c *Config) {
			c.HTTPAddr, c.AuthRoot, c.TLSCertFile, c.TLSKeyFile = "0.0.0.0:8899", "root:pw", cert, key
		}, "", "https"},
		{"Basic auth over plain HTTP on 127.0.0.1", func(c *Config) { c.AuthRoot = "root:pw" }, "", "http"},
		{"Basic auth over plain HTTP on localhost", func(c *Config) { c.HTTPAddr, c.AuthRoot = "localhost:8899", "root:pw" }, "", "http"},
		{"Basic auth over plain HTTP on ::1", func(c *Config) { c.HTTPAddr, c.AuthRoot = "[::1]:8899", "root:pw" }, "", "http"},
		{"no credentials beyond loopback: the older rule names --auth-root", func(c *Config) { c.HTTPAddr, c.InsecureHTTP = "0.0.0.0:8899", true }, "--auth-root", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.change(&c)
			err := c.Validate()
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Validate() = %v; want %q", err, tc.wantErr)
			}
			if err == nil && c.scheme() != tc.wantScheme {
				t.Fatalf("scheme %q; want %q", c.scheme(), tc.wantScheme)
			}
		})
	}
}

// fakeTLSMaster is a Mesos master over HTTPS, with a certificate for 127.0.0.1 signed by ca,
// that answers SUBSCRIBE as Mesos does (200, Mesos-Stream-Id, a RecordIO stream of protobuf
// events whose first is SUBSCRIBED, held open) and GET /master/state with an empty state.
func fakeTLSMaster(t *testing.T, ca *testcert.CA) string {
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/master/state" {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"frameworks":[],"slaves":[]}`)
			return
		}
		var call scheduler.Call
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path != "/api/v1/scheduler" || call.Unmarshal(body) != nil || call.Type != scheduler.Call_SUBSCRIBE {
			http.Error(w, "this fake master takes only SUBSCRIBE", http.StatusBadRequest)
			return
		}
		ev := scheduler.Event{Type: scheduler.Event_SUBSCRIBED, Subscribed: &scheduler.Event_Subscribed{
			FrameworkID: &mesos.FrameworkID{Value: "fw-tls"}, HeartbeatIntervalSeconds: ptr(15.0)}}
		frame, _ := ev.Marshal()
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.Header().Set("Mesos-Stream-Id", "stream-tls")
		w.WriteHeader(http.StatusOK)
		w.Write(append(strconv.AppendInt(nil, int64(len(frame)), 10), '\n'))
		w.Write(frame)
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the stream stays open until the scheduler closes it
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Certificate(t, "127.0.0.1")}}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshakes are the point
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL
}

// An https:// master is verified against --mesos-ca-file, by the scheduler API's client and by
// the client that reads /master/state; without that CA the error says the certificate is not
// trusted and names the flag, at once (mesos-go would retry it as a lost master for ≈ 40 s).
func TestSubscribeToAnHTTPSMaster(t *testing.T) {
	t.Parallel()
	ca := testcert.NewCA(t, "ejcloud test CA")
	master := fakeTLSMaster(t, ca)
	config := func(t *testing.T, caFile string) *Config {
		c := testConfig(t, statetest.Env{Servers: []string{"127.0.0.1:1"}, Namespace: "x"})
		c.MesosURL, c.MesosCAFile = master, caFile
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		return &c
	}
	t.Run("with the CA", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c := config(t, ca.File)
		sub, err := c.subscribeAt(ctx, master, subscribeOnly, "", "https://127.0.0.1:1")
		if err != nil {
			t.Fatalf("subscribe with --mesos-ca-file: %v", err)
		}
		sub.resp.Close()
		if sub.frameworkID != "fw-tls" {
			t.Fatalf("FrameworkID %q; want fw-tls", sub.frameworkID)
		}
		resp, err := c.mesosHTTP().Get(master + "/master/state")
		if err != nil {
			t.Fatalf("read /master/state with --mesos-ca-file: %v", err)
		}
		resp.Body.Close()
	})
	for _, tc := range []struct{ name, caFile, want string }{
		{"without a CA", "", "not trusted by the system roots: give the CA that signed it with --mesos-ca-file"},
		{"with another CA", testcert.NewCA(t, "other CA").File, "not trusted by --mesos-ca-file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := config(t, tc.caFile)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			began := time.Now()
			sub, err := c.subscribeAt(ctx, master, subscribeOnly, "", "https://127.0.0.1:1")
			if err == nil {
				sub.resp.Close()
				t.Fatal("subscribed to a master whose certificate is not trusted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("subscribe error %q; want one saying %q", err, tc.want)
			}
			if d := time.Since(began); d > 5*time.Second {
				t.Fatalf("the untrusted master was retried for %v", d)
			}
			if resp, err := c.mesosHTTP().Get(master + "/master/state"); err == nil {
				resp.Body.Close()
				t.Fatal("read /master/state from a master whose certificate is not trusted")
			}
		})
	}
}

// webuiMesos records the webui_url the leader subscribes with and never subscribes.
type webuiMesos struct {
	mu    sync.Mutex
	webui string
}

func (m *webuiMesos) subscribe(_ context.Context, _, webui string) (*subscription, error) {
	m.mu.Lock()
	m.webui = webui
	m.mu.Unlock()
	return nil, errors.New("test: no Mesos")
}

func (m *webuiMesos) seen() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.webui
}

// With --tls-cert-file the API serves HTTPS only, the leader advertises an https:// webui_url
// to Mesos, and a standby redirects to the leader's https:// URL.
func TestHTTPSServerAndStandbyRedirect(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	ca := testcert.NewCA(t, "ejcloud test CA")
	cert, key := ca.Issue(t, "127.0.0.1")
	config := func() Config {
		c := testConfig(t, env)
		c.TLSCertFile, c.TLSKeyFile = cert, key
		return c
	}
	client := &http.Client{
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Timeout:       5 * time.Second,
	}
	defer client.CloseIdleConnections()
	status := func(url string) int {
		resp, err := client.Get(url)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}

	fake := &webuiMesos{}
	a := startWith(t, config(), hooks{mesos: fake})
	await.True(t, 20*time.Second, "a leads, over HTTPS", func() bool {
		return status("https://"+a.cfg.HTTPAddr+"/readyz") == http.StatusServiceUnavailable && fake.seen() != ""
	})
	if want := "https://" + a.cfg.HTTPAddr; fake.seen() != want {
		t.Fatalf("webui_url %q; want %q", fake.seen(), want)
	}
	b := start(t, config())
	await.True(t, 20*time.Second, "b serves /healthz over HTTPS", func() bool {
		return status("https://"+b.cfg.HTTPAddr+"/healthz") == http.StatusOK
	})
	resp, err := client.Get("https://" + b.cfg.HTTPAddr + "/api/job/jobs?x=1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if want := "https://" + a.cfg.HTTPAddr + "/api/job/jobs?x=1"; resp.StatusCode != http.StatusTemporaryRedirect || resp.Header.Get("Location") != want {
		t.Fatalf("standby answered %d Location %q; want 307 to %s", resp.StatusCode, resp.Header.Get("Location"), want)
	}

	plain, err := noRedirect.Get("http://" + a.cfg.HTTPAddr + "/healthz")
	if err != nil {
		t.Fatalf("plain HTTP to the HTTPS port: %v", err)
	}
	body, _ := io.ReadAll(plain.Body)
	plain.Body.Close()
	if plain.StatusCode != http.StatusBadRequest || !strings.Contains(string(body), "HTTP request to an HTTPS server") {
		t.Fatalf("plain HTTP to the HTTPS port: %d %s; want 400 from the TLS server", plain.StatusCode, body)
	}
}

// --insecure-http lets the scheduler take credentials in clear beyond loopback, and says so in
// the log; on loopback, or over HTTPS, nothing is said.
func TestInsecureHTTPIsLogged(t *testing.T) {
	t.Parallel()
	base := testConfig(t, statetest.Env{Servers: []string{"127.0.0.1:1"}, Namespace: "x"})
	for _, tc := range []struct {
		name, addr string
		warn       bool
	}{
		{"beyond loopback", "0.0.0.0:8899", true},
		{"on loopback", "127.0.0.1:8899", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			c.HTTPAddr, c.AuthRoot, c.InsecureHTTP = tc.addr, "root:pw", true
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			log, hook := test.NewNullLogger()
			ln := c.serve(nopListener{}, log)
			if _, ok := ln.(nopListener); !ok {
				t.Fatalf("plain HTTP got listener %T", ln)
			}
			warned := len(hook.AllEntries()) == 1 && strings.Contains(hook.LastEntry().Message, "--insecure-http")
			if warned != tc.warn {
				t.Fatalf("log %v; want a warning naming --insecure-http: %v", hook.AllEntries(), tc.warn)
			}
		})
	}
}

// nopListener stands for the API's listener: serve only wraps it.
type nopListener struct{ net.Listener }

// A served certificate that is not valid now is refused at start-up (it would fail every client,
// the agents' fetcher among them, while /healthz says all is well); one about to expire is a
// start-up warning.
func TestTheServedCertificateMustBeValidNow(t *testing.T) {
	t.Parallel()
	pair := testcert.NewCA(t, "ejcloud test CA").Certificate(t, "127.0.0.1")
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		now     time.Time
		wantErr string
		warned  bool
	}{
		{"valid", leaf.NotAfter.Add(-2 * certWarnBefore), "", false},
		{"expiring within the warning period", leaf.NotAfter.Add(-24 * time.Hour), "", true},
		{"expired", leaf.NotAfter.Add(time.Hour), "expired on", false},
		{"not valid yet", leaf.NotBefore.Add(-time.Hour), "is not valid before", false},
	} {
		c := Config{TLS: TLS{TLSCertFile: "cert.pem"}}
		err := c.checkValidity(pair, tc.now)
		if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
			t.Errorf("%s: %v; want an error containing %q", tc.name, err, tc.wantErr)
		}
		if warned := len(c.Warnings()) > 0; warned != tc.warned {
			t.Errorf("%s: warnings %q; want warned %v", tc.name, c.Warnings(), tc.warned)
		}
	}
}

// A framework secret that would travel over plain HTTP is a start-up warning.
func TestAMesosSecretOverPlainHTTPIsWarnedAbout(t *testing.T) {
	t.Parallel()
	secret := filepath.Join(t.TempDir(), "secret")
	os.WriteFile(secret, []byte("s3cret\n"), 0o600)
	for _, tc := range []struct {
		url    string
		ca     bool
		warned bool
	}{
		{"http://127.0.0.1:5050", false, true},
		{"https://127.0.0.1:5050", false, false},
		{"zk://127.0.0.1:2181/mesos", false, true},
		{"zk://127.0.0.1:2181/mesos", true, false},
	} {
		c := testConfig(t, statetest.Env{Servers: []string{"127.0.0.1:1"}, Namespace: "x"})
		c.MesosURL, c.MesosPrincipal, c.MesosSecretFile = tc.url, "ejcloud", secret
		if tc.ca {
			c.MesosCAFile = testcert.NewCA(t, "mesos CA").File
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("%s: %v", tc.url, err)
		}
		if warned := slices.ContainsFunc(c.Warnings(), func(w string) bool { return strings.Contains(w, "plain HTTP") }); warned != tc.warned {
			t.Errorf("%s (CA file %v): warnings %q; want warned %v", tc.url, tc.ca, c.Warnings(), tc.warned)
		}
	}
}
