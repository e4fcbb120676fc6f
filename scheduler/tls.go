package scheduler

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/mesos/mesos-go/api/v1/lib/httpcli"
	"github.com/sirupsen/logrus"
)

// TLS is the scheduler's TLS configuration (issue 15): the CA it verifies https:// masters
// against, the certificate its own API and console serve, and the operator's explicit consent
// to send Basic credentials in clear beyond loopback.
type TLS struct {
	MesosCAFile  string
	TLSCertFile  string
	TLSKeyFile   string
	InsecureHTTP bool

	// mesosTLS verifies the masters: RootCAs is --mesos-ca-file's pool, or nil for the
	// system roots. Set by Validate.
	mesosTLS *tls.Config
	// mesosClient reads the master's and agents' state endpoints with mesosTLS. Set by Validate.
	mesosClient *http.Client
	// serverTLS, when --tls-cert-file is given, makes the API and console HTTPS. Set by Validate.
	serverTLS *tls.Config
}

func (t *TLS) flags(fs *flag.FlagSet) {
	fs.StringVar(&t.MesosCAFile, "mesos-ca-file", "", "PEM file of the CA(s) that https:// masters' certificates are verified against (default: the system roots); masters found through zk:// are then reached over https")
	fs.StringVar(&t.TLSCertFile, "tls-cert-file", "", "PEM certificate (chain) the REST API and console serve HTTPS with; needs --tls-key-file")
	fs.StringVar(&t.TLSKeyFile, "tls-key-file", "", "PEM private key of --tls-cert-file")
	fs.BoolVar(&t.InsecureHTTP, "insecure-http", false, "allow HTTP Basic credentials over plain HTTP on a non-loopback --http-addr (without it, such an address needs --tls-cert-file)")
}

// validateTLS loads the CA and the key pair, and refuses Basic credentials over plain HTTP
// on a non-loopback address (host is --http-addr's) unless the operator said --insecure-http.
func (c *Config) validateTLS(host string) error {
	roots, err := readCAFile(c.MesosCAFile)
	if err != nil {
		return err
	}
	c.mesosTLS = &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}
	c.mesosClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		Proxy: http.ProxyFromEnvironment, TLSClientConfig: c.mesosTLS.Clone(),
		TLSHandshakeTimeout: 10 * time.Second, MaxIdleConnsPerHost: 4, IdleConnTimeout: 90 * time.Second,
	}}
	c.serverTLS = nil
	switch {
	case c.TLSCertFile == "" && c.TLSKeyFile == "":
	case c.TLSCertFile == "" || c.TLSKeyFile == "":
		return fmt.Errorf("--tls-cert-file and --tls-key-file go together: give both or neither")
	default:
		pair, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile)
		if err != nil {
			return fmt.Errorf("--tls-cert-file %s / --tls-key-file %s: %w", c.TLSCertFile, c.TLSKeyFile, err)
		}
		if err := c.checkValidity(pair, time.Now()); err != nil {
			return err
		}
		c.serverTLS = &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
	}
	if c.plainCredentialsExposed(host) && !c.InsecureHTTP {
		return fmt.Errorf("refusing to take HTTP Basic credentials (--auth-root, --auth-guest) in clear on non-loopback address %s: "+
			"serve HTTPS with --tls-cert-file and --tls-key-file, or accept the risk with --insecure-http", c.HTTPAddr)
	}
	return nil
}

// plainCredentialsExposed: the API takes Basic credentials over plain HTTP beyond loopback.
func (c *Config) plainCredentialsExposed(host string) bool {
	return (c.AuthRoot != "" || c.AuthGuest != "") && c.serverTLS == nil && !isLoopback(host)
}

// readCAFile reads a PEM bundle of CA certificates; "" means the system roots (nil).
func readCAFile(path string) (*x509.CertPool, error) {
	if path == "" {
		return nil, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--mesos-ca-file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("--mesos-ca-file %s holds no PEM certificate", path)
	}
	return pool, nil
}

// scheme is how clients reach this scheduler's HTTP server: what it advertises to Mesos
// (FrameworkInfo.webui_url) and what standbys redirect to. Every instance of a deployment is
// assumed to run with the same TLS flags, so a standby's scheme is the leader's.
func (c *Config) scheme() string {
	if c.serverTLS != nil {
		return "https"
	}
	return "http"
}

// serve wraps the API's listener in TLS when --tls-cert-file is given, and warns when the
// operator chose to take credentials in clear beyond loopback (--insecure-http).
func (c *Config) serve(ln net.Listener, log logrus.FieldLogger) net.Listener {
	if c.serverTLS != nil {
		return tls.NewListener(ln, c.serverTLS)
	}
	if host, _, err := net.SplitHostPort(c.HTTPAddr); err == nil && c.plainCredentialsExposed(host) {
		log.WithField("http", c.HTTPAddr).Warn("--insecure-http: HTTP Basic credentials travel in clear on a non-loopback address; " +
			"serve HTTPS with --tls-cert-file and --tls-key-file")
	}
	return ln
}

// mesosHTTP is the client for the master's and agents' state endpoints (not the scheduler API,
// which mesos-go's own transport carries with the same TLS settings).
func (c *Config) mesosHTTP() *http.Client {
	if c.mesosClient == nil { // a Config that never went through Validate (some tests)
		return &http.Client{Timeout: 30 * time.Second}
	}
	return c.mesosClient
}

// mesosReader reads the read-only JSON endpoints of the master (/master/state) and of its
// agents (/state, /files/read). With a secret it sends the framework's principal as HTTP
// Basic credentials, for masters and agents that authenticate those endpoints
// (--authenticate_http_readonly; an agent's --http_credentials must then know the principal).
// Agents are asked over https when the master is: Mesos's SSL setting (LIBPROCESS_SSL_ENABLED)
// is the whole cluster's, and the Mesos web UI reaches agents the same way.
type mesosReader struct {
	client            *http.Client
	principal, secret string
	agentsTLS         bool
}

// mesosReader reads the master at master (a URL; "" when none is known yet) and its agents.
func (c *Config) mesosReader(master string) mesosReader {
	return mesosReader{client: c.mesosHTTP(), principal: c.MesosPrincipal, secret: c.mesosSecret,
		agentsTLS: strings.HasPrefix(master, "https://")}
}

// agentURL is the URL of path (with its query) on the agent served at addr (host:port).
func (r mesosReader) agentURL(addr, path string) string {
	if r.agentsTLS {
		return "https://" + addr + path
	}
	return "http://" + addr + path
}

// get GETs u; the caller closes the body.
func (r mesosReader) get(ctx context.Context, u string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	if r.secret != "" {
		req.SetBasicAuth(r.principal, r.secret)
	}
	return r.client.Do(req)
}

// untrustedCert says err is a master's certificate failing verification.
func untrustedCert(err error) bool {
	var verify *tls.CertificateVerificationError
	var unknown x509.UnknownAuthorityError
	var invalid x509.CertificateInvalidError
	var hostname x509.HostnameError
	return errors.As(err, &verify) || errors.As(err, &unknown) || errors.As(err, &invalid) || errors.As(err, &hostname)
}

// untrustedError names the flag that fixes an untrusted master certificate.
func (c *Config) untrustedError(master string, err error) error {
	if c.MesosCAFile == "" {
		return fmt.Errorf("subscribe to Mesos at %s: its TLS certificate is not trusted by the system roots: "+
			"give the CA that signed it with --mesos-ca-file: %w", master, err)
	}
	return fmt.Errorf("subscribe to Mesos at %s: its TLS certificate is not trusted by --mesos-ca-file %s: %w", master, c.MesosCAFile, err)
}

// noteUntrusted sets flag when a request fails on the master's certificate: mesos-go would
// retry it as if the master had moved, and no retry makes the certificate trusted.
func noteUntrusted(do httpcli.DoFunc, flag *atomic.Bool) httpcli.DoFunc {
	return func(req *http.Request) (*http.Response, error) {
		res, err := do(req)
		if err != nil && untrustedCert(err) {
			flag.Store(true)
		}
		return res, err
	}
}

// certWarnBefore is how long before its expiry a served certificate is warned about at start-up.
const certWarnBefore = 14 * 24 * time.Hour

// checkValidity refuses a certificate that is not valid now: served, it would fail every
// client, the agents' fetcher downloading the executor among them, while /healthz says all is
// well. One that expires soon is warned about (Warnings): a renewed one takes a restart.
func (c *Config) checkValidity(pair tls.Certificate, now time.Time) error {
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return fmt.Errorf("--tls-cert-file %s: %w", c.TLSCertFile, err)
	}
	switch {
	case now.After(leaf.NotAfter):
		return fmt.Errorf("--tls-cert-file %s expired on %s", c.TLSCertFile, leaf.NotAfter.UTC().Format(time.RFC3339))
	case now.Before(leaf.NotBefore):
		return fmt.Errorf("--tls-cert-file %s is not valid before %s", c.TLSCertFile, leaf.NotBefore.UTC().Format(time.RFC3339))
	case leaf.NotAfter.Sub(now) < certWarnBefore:
		c.warnings = append(c.warnings, fmt.Sprintf("--tls-cert-file %s expires on %s: renew it, then restart the scheduler",
			c.TLSCertFile, leaf.NotAfter.UTC().Format(time.RFC3339)))
	}
	return nil
}
