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

// allow reports whether kind may run now, and records it if so. undo gives the slot back, for
// a reconciliation that was not made: a 503 must not turn the operator's retry into a 429.
func (l *limiter) allow(kind string, now time.Time) (undo func(), ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	prev, had := l.last[kind]
	if had && now.Sub(prev) < reconcileGap {
		return nil, false
	}
	l.last[kind] = now
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.last[kind].Equal(now) {
			if had {
				l.last[kind] = prev
			} else {
				delete(l.last, kind)
			}
		}
	}, true
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
		undo, ok := lim.allow(kind, s.cfg.Now())
		if !ok {
			writeError(w, http.StatusTooManyRequests, kind+" reconciliation was asked for less than 10 s ago", "")
			return
		}
		if err := op.Reconcile(r.Context(), kind == "explicit"); err != nil {
			undo()
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
	}).Methods(reads()...)
}
