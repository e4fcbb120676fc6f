package api

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/mux"

	"github.com/ejcloud/ejcloud/config"
)

// Operator is the part of the scheduler the operations endpoints use; a Scheduler that does not
// implement it answers those endpoints 501.
type Operator interface {
	Reconcile(ctx context.Context, explicit bool) error
	Sandboxes(ctx context.Context, app string) ([]Sandbox, error)
}

// Sandbox is an executor sandbox of an app: where its logs are.
type Sandbox struct {
	Hostname string `json:"hostname"`
	Path     string `json:"path"`
}

// reconcileGap is how often reconciliation may be asked for (SPEC §5.8).
const reconcileGap = 10 * time.Second

type limiter struct {
	mu   sync.Mutex // guards last
	last map[string]time.Time
}

// allow reports whether kind may run now, and records it if so.
func (l *limiter) allow(kind string, now time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t, ok := l.last[kind]; ok && now.Sub(t) < reconcileGap {
		return false
	}
	l.last[kind] = now
	return true
}

func (s *Server) operateRoutes(r *mux.Router) {
	lim := &limiter{last: map[string]time.Time{}}
	r.HandleFunc("/api/operate/reconcile/{kind:explicit|implicit}", func(w http.ResponseWriter, r *http.Request) {
		op, ok := s.sched.(Operator)
		if !ok {
			writeError(w, http.StatusNotImplemented, "reconciliation is not available here", "")
			return
		}
		kind := mux.Vars(r)["kind"]
		if !lim.allow(kind, s.cfg.Now()) {
			writeError(w, http.StatusTooManyRequests, kind+" reconciliation was asked for less than 10 s ago", "")
			return
		}
		if err := op.Reconcile(r.Context(), kind == "explicit"); err != nil {
			s.fail(w, r, err)
			return
		}
		noContent(w)
	}).Methods(http.MethodPost)
	r.HandleFunc("/api/operate/sandbox", func(w http.ResponseWriter, r *http.Request) {
		app := r.URL.Query().Get("appName")
		if app == "" {
			s.fail(w, r, &config.FieldError{Field: "appName", Message: "appName is required"})
			return
		}
		if _, err := s.store.App(r.Context(), app); err != nil {
			s.fail(w, r, err)
			return
		}
		op, ok := s.sched.(Operator)
		if !ok {
			writeError(w, http.StatusNotImplemented, "sandboxes are not available here", "")
			return
		}
		boxes, err := op.Sandboxes(r.Context(), app)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if boxes == nil {
			boxes = []Sandbox{}
		}
		writeJSON(w, http.StatusOK, boxes)
	}).Methods(http.MethodGet)
}
