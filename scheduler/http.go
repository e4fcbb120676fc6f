package scheduler

import (
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// serverTimeouts bound how long a connection may hold the server's resources: a client that
// sends nothing, or reads nothing, cannot keep connections (and their goroutines) open for
// good. Whole requests are small (1 MiB bodies); the longest answer is the stock executor
// binary, which agents may fetch over a slow link.
type serverTimeouts struct {
	header, read, write, idle time.Duration
}

var httpTimeouts = serverTimeouts{header: 10 * time.Second, read: time.Minute, write: 10 * time.Minute, idle: 2 * time.Minute}

func newHTTPServer(h http.Handler, t serverTimeouts) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: t.header, ReadTimeout: t.read, WriteTimeout: t.write, IdleTimeout: t.idle}
}

func (s *instance) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", s.metricsHandler())
	// Every instance serves the stock executor: agents fetch it from the URL the app names.
	mux.HandleFunc("GET /executor/ejcloud-executor", s.executorBinary)
	mux.HandleFunc("/api/", s.notLeaderOr(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		h := s.api
		s.mu.Unlock()
		if h == nil { // the leadership ended while the request came in
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "leadership changing; try again"})
			return
		}
		h.ServeHTTP(w, r)
	}))
	// The console is static and only calls the API, so standbys serve it too; its API calls then
	// meet the standby's 307, and it links to /console/leader, which a standby redirects.
	mux.Handle("GET /{$}", s.console)
	mux.Handle("GET /console/", s.console)
	mux.HandleFunc("GET /console/leader", s.notLeaderOr(func(w http.ResponseWriter, r *http.Request) { http.Redirect(w, r, "/", http.StatusFound) }))
	mux.HandleFunc("/", s.notLeaderOr(func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such endpoint: " + r.URL.Path})
	}))
	return mux
}

// readyz is 200 only on a leader subscribed to Mesos (SPEC §5.1).
func (s *instance) readyz(w http.ResponseWriter, r *http.Request) {
	leader, subscribed := s.status()
	switch {
	case !leader:
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"leader": false, "subscribed": false, "error": "standby: not the leader"})
	case !subscribed:
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"leader": true, "subscribed": false, "error": "not subscribed to Mesos"})
	default:
		writeJSON(w, http.StatusOK, map[string]any{"leader": true, "subscribed": true})
	}
}

// notLeaderOr serves next on the leader; a standby answers 307 to the leader's URL.
func (s *instance) notLeaderOr(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if leader, _ := s.status(); leader {
			next(w, r)
			return
		}
		addr, err := s.store.Leader(r.Context())
		if err != nil || addr == s.advertised {
			writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": "no leader elected"})
			return
		}
		u := *r.URL
		u.Scheme, u.Host = s.cfg.scheme(), addr
		http.Redirect(w, r, u.String(), http.StatusTemporaryRedirect)
	}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func (s *instance) executorBinary(w http.ResponseWriter, r *http.Request) {
	if _, err := os.Stat(s.cfg.ExecutorBinary); err != nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"error": "executor binary not available: " + err.Error()})
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	if !strings.HasSuffix(s.cfg.ExecutorBinary, ".gz") {
		http.ServeFile(w, r, s.cfg.ExecutorBinary)
		return
	}
	// A gzipped executor is served as the binary itself: the scheduler image carries it
	// compressed (a third of its size), and the agents' fetchers get what they run.
	f, err := os.Open(s.cfg.ExecutorBinary)
	if err == nil {
		defer f.Close()
		var zr *gzip.Reader
		if zr, err = gzip.NewReader(f); err == nil {
			_, err = io.Copy(w, zr)
		}
	}
	if err != nil {
		s.log.WithError(err).Error("cannot serve the gzipped executor binary")
		panic(http.ErrAbortHandler) // the fetcher must not take a truncated binary for a whole one
	}
}
