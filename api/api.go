// Package api is ejcloud's REST API (SPEC §7): the paths and JSON fields of Elastic-Job-Cloud
// 2.1.5, with precise errors. Every write is validated first (400 naming the field) and changes
// nothing when it fails; duplicates are 409, unknown names 404, a full queue 503, a body over
// 1 MiB 413, and 500 only for internal faults, with a message and never a stack trace.
//
//	request → auth (root, read-only guest) → decode and validate (config) → Store / Scheduler → JSON
//
// The scheduler composes it: Store is the state layer (the leader's fenced view), Scheduler the
// leader's operations.
package api

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/gorilla/mux"
	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/state"
)

// MaxBody is the largest request body.
const MaxBody = 1 << 20

// Store is what the handlers read and write directly.
type Store interface {
	CreateApp(ctx context.Context, a config.App) error
	App(ctx context.Context, name string) (config.App, error)
	Apps(ctx context.Context) ([]config.App, error)
	UpdateApp(ctx context.Context, name string, change func(config.App) (config.App, error)) (config.App, error)
	AppDisabled(ctx context.Context, app string) (bool, error)
	CreateJob(ctx context.Context, j config.Job) error
	Job(ctx context.Context, name string) (config.Job, error)
	Jobs(ctx context.Context) ([]config.Job, error)
	// JobsJSON is Jobs already encoded, each job as json.Marshal gives it.
	JobsJSON(ctx context.Context) ([]json.RawMessage, error)
	JobOrAppDisabled(ctx context.Context, j config.Job) (bool, error)
	Running(ctx context.Context) ([]state.RunningEntry, error)
	Ready(ctx context.Context) ([]state.ReadyEntry, error)
	Failovers(ctx context.Context) ([]state.FailoverEntry, error)
	// FireLedger is the job's fire ledger (GET /api/job/{jobName}/fires).
	FireLedger(ctx context.Context, job string) (state.Ledger, bool, error)
	// MaxConfigBytes is the most an app's or a job's config may take as stored JSON: a larger
	// one could not be written (config.CheckStoredSize).
	MaxConfigBytes() int
}

// Scheduler is what the handlers ask of the leader: the operations that also act on Mesos.
type Scheduler interface {
	JobChanged(ctx context.Context, job string)
	UpdateJob(ctx context.Context, j config.Job) error
	DeleteJob(ctx context.Context, job string) error
	DisableJob(ctx context.Context, job string) error
	EnableJob(ctx context.Context, job string) error
	DisableApp(ctx context.Context, app string) error
	EnableApp(ctx context.Context, app string) error
	DeleteApp(ctx context.Context, app string) error
	Trigger(ctx context.Context, job string) error
	Idle(taskID string) bool
	// Failure is the job's stop mark and backoff (GET /api/job/{jobName}/failure).
	Failure(ctx context.Context, job string) (JobFailure, error)
	// AppUpdated tells the leader that an app's config changed: its jobs' stop marks clear.
	AppUpdated(ctx context.Context, app string) error
	// Waiting is why the job's queued run waits (dependencies, a retry's backoff, the last run still running), or "".
	Waiting(job string) string
}

// Config is the API's configuration.
type Config struct {
	Root  string // "user:password" of the administrator; "" disables authentication
	Guest string // "user:password" of the read-only guest
	Zone  string // default time zone of jobs registered without one
	Log   logrus.FieldLogger
	Now   func() time.Time
	// Trace is the event trace database; nil: none, and the history and statistics
	// endpoints answer Elastic-Job-Cloud's empty shapes.
	Trace *Trace
}

// Server serves the API.
type Server struct {
	store Store
	sched Scheduler
	cfg   Config
}

// New returns the API's handler, for every path under /api.
func New(store Store, sched Scheduler, cfg Config) http.Handler {
	if cfg.Zone == "" {
		cfg.Zone = config.LocalZone()
	}
	if cfg.Log == nil {
		cfg.Log = logrus.StandardLogger()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Server{store: store, sched: sched, cfg: cfg}
	return sameOrigin(s.auth(s.router()))
}

// reads are the methods of a route that reads: HEAD is served wherever GET is (RFC 9110
// §9.3.2), and the auth layer lets the guest send both. A new slice each time: mux's
// Route.Methods upper-cases its argument in place and keeps it, so a shared one is written by
// every router built, and two built at once (a scheduler's terms, a test's servers) race.
func reads() []string { return []string{http.MethodGet, http.MethodHead} }

// router routes every path under /api.
func (s *Server) router() *mux.Router {
	r := mux.NewRouter()
	r.NotFoundHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path, "")
	})
	r.MethodNotAllowedHandler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		allow := allowed(r, req)
		w.Header().Set("Allow", strings.Join(allow, ", ")) // RFC 9110 §15.5.6: a 405 says what is allowed
		writeError(w, http.StatusMethodNotAllowed, "method "+req.Method+" not allowed on "+req.URL.Path+"; allowed: "+strings.Join(allow, ", "), "")
	})
	s.appRoutes(r)
	s.traceRoutes(r) // before the job routes: /api/job/events/… is not a job named "events"
	s.clusterRoutes(r)
	s.jobRoutes(r)
	s.operateRoutes(r)
	return r
}

// allowed lists the methods that r routes req's path with, in the order of methodOrder.
func allowed(r *mux.Router, req *http.Request) []string {
	methods := map[string]bool{}
	r.Walk(func(route *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		ms, _ := route.GetMethods()
		for _, m := range ms {
			methods[m] = true
		}
		return nil
	})
	var out []string
	for m := range methods {
		probe := req.Clone(req.Context())
		probe.Method = m
		var match mux.RouteMatch
		if r.Match(probe, &match) && match.MatchErr == nil {
			out = append(out, m)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := methodOrder(out[i]), methodOrder(out[j])
		return a < b || a == b && out[i] < out[j]
	})
	return out
}

// methodOrder orders methods as RFC 9110 §9 lists them.
func methodOrder(m string) int {
	for i, o := range []string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodDelete,
		http.MethodConnect, http.MethodOptions, http.MethodTrace, http.MethodPatch} {
		if m == o {
			return i
		}
	}
	return 100
}

// sameOrigin refuses writes that a browser sends on behalf of another site (CSRF): the
// console's credentials are HTTP Basic, which a browser attaches to any request to the
// scheduler's origin, a hostile page's form POST included; and with no root user, any page
// could write to a scheduler on the operator's own loopback. A browser says where a request
// comes from (Sec-Fetch-Site, else Origin); tools such as curl send neither and are served.
// Reads are never refused.
func sameOrigin(next http.Handler) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusForbidden, "cross-origin request refused: a page of another site may not write through the operator's browser", "")
	}))
	return cop.Handler(next)
}

// auth enforces HTTP Basic credentials when a root user is configured: the guest may only read.
func (s *Server) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch Role(s.cfg.Root, s.cfg.Guest, r) {
		case RoleRoot:
			next.ServeHTTP(w, r)
		case RoleGuest:
			if r.Method != http.MethodGet && r.Method != http.MethodHead {
				writeError(w, http.StatusForbidden, "the guest may only read", "")
				return
			}
			next.ServeHTTP(w, r)
		default:
			w.Header().Set("WWW-Authenticate", Realm)
			writeError(w, http.StatusUnauthorized, "credentials required", "")
		}
	})
}

// Realm is the WWW-Authenticate challenge of the API, and of the console, so that a browser
// sends the credentials given once to both.
const Realm = `Basic realm="ejcloud"`

// The roles Role tells apart.
const (
	RoleNone  = ""
	RoleRoot  = "root"
	RoleGuest = "guest"
)

// Role is whom the request's HTTP Basic credentials name, given the root and guest
// "user:password" pairs: RoleRoot, RoleGuest, or RoleNone. Without a root user every request
// is root's.
func Role(root, guest string, r *http.Request) string {
	if root == "" {
		return RoleRoot
	}
	user, pass, ok := r.BasicAuth()
	given := user + ":" + pass
	switch {
	case ok && equal(given, root):
		return RoleRoot
	case ok && guest != "" && equal(given, guest):
		return RoleGuest
	}
	return RoleNone
}

// equal compares credentials in constant time.
func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

// body reads a request body of at most MaxBody bytes.
func body(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	var tooBig *http.MaxBytesError
	switch {
	case errors.As(err, &tooBig):
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body over %d bytes", MaxBody), "")
		return nil, false
	case err != nil:
		writeError(w, http.StatusBadRequest, "cannot read the request body: "+err.Error(), "")
		return nil, false
	}
	return b, true
}

// fail answers an error with the status its kind calls for. Bodies speak of the app, job or
// queue concerned, never of ZooKeeper paths or client errors: those go to the log.
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	var fe *config.FieldError
	var me *MesosError
	var dep *config.DependentError
	subject := subjectOf(err)
	switch {
	case errors.As(err, &fe):
		writeError(w, http.StatusBadRequest, fe.Message, fe.Field)
	case errors.Is(err, state.ErrAppNotFound):
		writeError(w, http.StatusBadRequest, "appName: "+or(subject, "the app")+" does not exist", "appName")
	case errors.Is(err, state.ErrExists):
		writeError(w, http.StatusConflict, or(subject, "it")+" already exists", "")
	case errors.Is(err, state.ErrNotFound):
		writeError(w, http.StatusNotFound, or(subject, "what was asked for")+" does not exist", "")
	case errors.Is(err, state.ErrQueueFull):
		writeError(w, http.StatusServiceUnavailable, or(subject, "the queue")+" is full (--job-state-queue-size); retry later", "")
	case errors.Is(err, state.ErrTooLarge): // SPEC §7's 409: the state is too large for the change
		writeError(w, http.StatusConflict, "the change to "+or(subject, "it")+
			" touches more than ZooKeeper writes at once (one request, jute.maxbuffer), and it must be one write: nothing changed;"+
			" make it smaller (an app's jobs can be deleted or disabled first, a few at a time)", "")
	case errors.As(err, &dep):
		writeError(w, http.StatusConflict, dep.Error(), "")
	case errors.Is(err, ErrConflictingState):
		writeError(w, http.StatusConflict, strings.TrimPrefix(err.Error(), ErrConflictingState.Error()+": "), "")
	case errors.Is(err, ErrNoSubscription):
		writeError(w, http.StatusServiceUnavailable, "the scheduler is not subscribed to Mesos (it is reconnecting); nothing changed; retry later", "")
	case errors.Is(err, state.ErrUnavailable):
		writeError(w, http.StatusServiceUnavailable, "ZooKeeper is unavailable; retry later", "")
	case errors.As(err, &me):
		// Mesos, not this scheduler, failed: 503, SPEC §7's answer for a Mesos that cannot
		// serve (as without a subscription), not an internal fault. What failed is named;
		// how (URLs, client errors) goes to the log.
		id := errorID()
		s.cfg.Log.WithError(err).WithFields(logrus.Fields{"path": r.URL.Path, "error_id": id}).Warn("Mesos could not be read")
		writeError(w, http.StatusServiceUnavailable, me.Which+" could not be read; retry later (the scheduler's log has the details under error_id="+id+")", "")
	case errors.As(err, new(traceDBError)):
		id := errorID()
		s.cfg.Log.WithError(err).WithFields(logrus.Fields{"path": r.URL.Path, "error_id": id}).Warn("the event trace database could not be read")
		writeError(w, http.StatusServiceUnavailable, "the event trace database could not be read; retry later (the scheduler's log has the details under error_id="+id+")", "")
	case errors.Is(err, context.Canceled) && r.Context().Err() != nil:
		// The client went away: there is no one to answer, and nothing went wrong here.
		s.cfg.Log.WithError(err).WithField("path", r.URL.Path).Debug("request given up by its client")
	case errors.Is(err, state.ErrNotLeader), errors.Is(err, ErrUnavailable), errors.Is(err, state.ErrSessionExpired),
		errors.Is(err, context.Canceled): // the leader's own work was stopped: its leadership ended
		s.cfg.Log.WithError(err).WithField("path", r.URL.Path).Info("request ended by the end of this instance's leadership")
		writeError(w, http.StatusServiceUnavailable, "this scheduler instance is not (or no longer) the leader; retry, and follow the redirect to the leader", "")
	case errors.Is(err, context.DeadlineExceeded):
		id := errorID()
		s.cfg.Log.WithError(err).WithFields(logrus.Fields{"path": r.URL.Path, "error_id": id}).Warn("request not answered in time")
		writeError(w, http.StatusServiceUnavailable, "the scheduler could not answer in time (ZooKeeper is slow or unreachable); retry later (the scheduler's log has the details under error_id="+id+")", "")
	default:
		id := errorID()
		s.cfg.Log.WithError(err).WithFields(logrus.Fields{"path": r.URL.Path, "error_id": id}).Error("internal error")
		writeError(w, http.StatusInternalServerError, "internal error "+id+": the scheduler's log has the details under error_id="+id, "")
	}
}

// failWrite answers the error of a write of the config c (an App or a Job). A write ZooKeeper
// could not take is the config's size, which the request can change: 400 naming its largest
// field (config.TooLargeToWrite), not the 409 of a change to the state that is too large.
func (s *Server) failWrite(w http.ResponseWriter, r *http.Request, err error, c any) {
	if errors.Is(err, state.ErrTooLarge) {
		err = config.TooLargeToWrite(c)
	}
	s.fail(w, r, err)
}

// subjectOf is what the error says it was about (state.SubjectError, state.OpError), or "".
func subjectOf(err error) string {
	var sub interface{ Subject() string }
	for e := err; errors.As(e, &sub); {
		if s := sub.Subject(); s != "" {
			return s
		}
		e = errors.Unwrap(sub.(error))
	}
	return ""
}

// errorID ties a 500 answer to its log line.
func errorID() string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func or(s, fallback string) string {
	if s == "" {
		return fallback
	}
	return s
}

// MesosError is a Scheduler's error that means Mesos did not answer what it was asked: its
// master's or an agent's state or files could not be read. The API answers it 503.
type MesosError struct {
	Which string // "the Mesos master", "Mesos agent S0"
	Err   error
}

func (e *MesosError) Error() string { return e.Which + ": " + e.Err.Error() }
func (e *MesosError) Unwrap() error { return e.Err }

// ErrConflictingState is wrapped by a Scheduler's errors that refuse an operation the
// object's state does not allow (a disabled job triggered). The API answers them 409 with the
// error's text after the sentinel's.
var ErrConflictingState = errors.New("conflicting state")

// ErrNoSubscription is wrapped by a Scheduler's errors that refuse an operation needing Mesos
// while the leader is not subscribed. The API answers them 503.
var ErrNoSubscription = errors.New("no Mesos subscription")

// ErrUnavailable is wrapped by a Scheduler's errors that mean "try again, perhaps elsewhere":
// the instance stopped leading while it answered. The API answers them 503.
var ErrUnavailable = errors.New("api: unavailable")

func writeError(w http.ResponseWriter, code int, msg, field string) {
	body := map[string]string{"error": msg}
	if field != "" {
		body["field"] = field
	}
	writeJSON(w, code, body)
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

func noContent(w http.ResponseWriter) { w.WriteHeader(http.StatusNoContent) }
