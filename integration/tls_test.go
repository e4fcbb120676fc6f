package integration

import (
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/internal/testcert"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// The scheduler started with --tls-cert-file/--tls-key-file (a certificate for 127.0.0.1 from a
// test CA) serves its API over HTTPS only, with Basic auth; it advertises an https:// webui_url;
// mesos-local's fetcher, trusting the test CA through SSL_CERT_FILE as the real fetcher trusts
// the system store, downloads the executor from the scheduler over HTTPS, and a job runs.
// (Issue 15, TLS.)
func TestSchedulerServesHTTPS(t *testing.T) {
	ca := testcert.NewCA(t, "ejcloud test CA")
	cert, key := ca.Issue(t, "127.0.0.1")
	// Go's crypto/x509 takes the system roots from SSL_CERT_FILE: mesos-local alone gets it
	// (the scheduler must not need it), so it is unset again once mesos-local has started.
	t.Setenv("SSL_CERT_FILE", ca.File)
	w := newWorld(t, 1)
	os.Unsetenv("SSL_CERT_FILE")

	addr := freeAddr(t)
	start(t, "ejcloud-scheduler", "scheduler started", "--zk-servers", strings.Join(w.zk.Servers, ","),
		"--zk-namespace", w.zk.Namespace, "--mesos-url", w.mesos.url, "--http-addr", addr, "--hostname", "127.0.0.1",
		"--auth-root", creds, "--executor-binary", filepath.Join(bins, "ejcloud-executor"), "--zk-session-timeout", "2s",
		"--tls-cert-file", cert, "--tls-key-file", key)
	base := "https://" + addr
	client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	defer client.CloseIdleConnections()
	call := func(method, path, body string, auth ...string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(body, "{") || strings.HasPrefix(body, `"`) {
			req.Header.Set("Content-Type", "application/json")
		}
		if len(auth) == 2 {
			req.SetBasicAuth(auth[0], auth[1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	user, pass, _ := strings.Cut(creds, ":")
	must := func(want int, method, path, body string) {
		t.Helper()
		if code, msg := call(method, path, body, user, pass); code != want {
			t.Fatalf("%s %s: %d %s; want %d", method, path, code, msg, want)
		}
	}

	await.True(t, 60*time.Second, "the scheduler leads and is subscribed, over HTTPS", func() bool {
		code, _ := call("GET", "/readyz", "")
		return code == http.StatusOK
	})
	if code, body := call("GET", "/api/job/jobs", ""); code != http.StatusUnauthorized {
		t.Fatalf("GET /api/job/jobs without credentials over HTTPS: %d %s; want 401", code, body)
	}
	if code, body := call("GET", "/api/job/jobs", "", user, "wrong"); code != http.StatusUnauthorized {
		t.Fatalf("GET /api/job/jobs with a wrong password over HTTPS: %d %s; want 401", code, body)
	}
	must(204, "POST", "/api/app", w.appJSON(base+"/executor/ejcloud-executor"))
	must(204, "POST", "/api/job/register", w.jobJSON("secure", 2, "", false, ""))
	must(204, "POST", "/api/job/trigger", "secure")
	await.True(t, 60*time.Second, "the job's two shards ran with the executor fetched over HTTPS", func() bool {
		r := w.runs("secure")
		return len(r["0"]) == 1 && len(r["1"]) == 1
	})

	// What Mesos shows operators as the framework's web UI.
	resp, err := http.Get(w.mesos.url + "/master/state")
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Frameworks []struct {
			WebuiURL string `json:"webui_url"`
		} `json:"frameworks"`
	}
	err = json.NewDecoder(resp.Body).Decode(&st)
	resp.Body.Close()
	if err != nil || len(st.Frameworks) != 1 || st.Frameworks[0].WebuiURL != base {
		t.Fatalf("the master shows frameworks %+v (%v); want one with webui_url %s", st.Frameworks, err, base)
	}

	// Plain HTTP to the HTTPS port gets no API: Go's TLS server answers it with a 400.
	plain, err := noRedirect.Get("http://" + addr + "/api/job/jobs")
	if err != nil {
		t.Fatalf("plain HTTP to the HTTPS port: %v", err)
	}
	b, _ := io.ReadAll(plain.Body)
	plain.Body.Close()
	if plain.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "HTTP request to an HTTPS server") {
		t.Fatalf("plain HTTP to the HTTPS port: %d %s; want 400 from the TLS server", plain.StatusCode, b)
	}
	// A client that does not trust the test CA does not get through either.
	if resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(base + "/healthz"); err == nil {
		resp.Body.Close()
		t.Fatal("a client without the test CA trusted the scheduler's certificate")
	}
}

// Basic credentials over plain HTTP on a non-loopback address are refused at start-up unless
// --insecure-http says so: the scheduler exits at once (in Validate, before it connects to
// ZooKeeper or binds) with an error naming the flags. (Issue 15, TLS.)
func TestPlainBasicAuthBeyondLoopbackIsRefused(t *testing.T) {
	t.Parallel()
	zk := statetest.StartZooKeeper(t)
	_, port, _ := strings.Cut(freeAddr(t), ":")
	began := time.Now()
	p := start(t, "ejcloud-scheduler", "--insecure-http", "--zk-servers", strings.Join(zk.Servers, ","),
		"--zk-namespace", zk.Namespace, "--mesos-url", "http://"+freeAddr(t), "--http-addr", "0.0.0.0:"+port,
		"--auth-root", "u:p", "--executor-binary", filepath.Join(bins, "ejcloud-executor"))
	await.True(t, 10*time.Second, "the scheduler exits", func() bool { return exited(p) })
	p.cmd.Wait()
	out := p.log.String()
	for _, want := range []string{"refusing to take HTTP Basic credentials", "0.0.0.0:" + port, "--tls-cert-file", "--insecure-http"} {
		if !strings.Contains(out, want) {
			t.Fatalf("the scheduler's error does not say %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "scheduler started") || p.cmd.ProcessState.ExitCode() != 1 {
		t.Fatalf("the scheduler started or exited with %d (want 1) after %v:\n%s", p.cmd.ProcessState.ExitCode(), time.Since(began), out)
	}
}
