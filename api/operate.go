package api

import (
	"context"
	"net/http"
	"strconv"
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

// The event trace and statistics endpoints (SPEC §9) answer the empty shapes of Elastic-Job-Cloud
// 2.1.5 until the event trace database is built, but already validate their parameters.
func (s *Server) traceRoutes(r *mux.Router) {
	page := func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		for _, name := range []string{"per_page", "page"} {
			if v := q.Get(name); v != "" {
				if n, err := strconv.Atoi(v); err != nil || n < 1 || n > 10000 {
					s.fail(w, r, &config.FieldError{Field: name, Message: name + " must be an integer from 1 to 10000, got " + strconv.Quote(v)})
					return
				}
			}
		}
		if v := q.Get("order"); v != "" && v != "asc" && v != "desc" {
			s.fail(w, r, &config.FieldError{Field: "order", Message: "order must be asc or desc, got " + strconv.Quote(v)})
			return
		}
		var start, end time.Time
		for _, p := range []struct {
			name string
			dst  *time.Time
		}{{"startTime", &start}, {"endTime", &end}} {
			if v := q.Get(p.name); v != "" {
				t, err := parseTime(v)
				if err != nil {
					s.fail(w, r, &config.FieldError{Field: p.name, Message: p.name + " must be a date such as 2026-11-22 10:00:00 or RFC 3339, got " + strconv.Quote(v)})
					return
				}
				*p.dst = t
			}
		}
		if !start.IsZero() && !end.IsZero() && end.Before(start) {
			s.fail(w, r, &config.FieldError{Field: "endTime", Message: "endTime is before startTime"})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"total": 0, "rows": []any{}})
	}
	r.HandleFunc("/api/job/events/executions", page).Methods(http.MethodGet)
	r.HandleFunc("/api/job/events/statusTraces", page).Methods(http.MethodGet)
	r.HandleFunc("/api/job/statistics/tasks/results", func(w http.ResponseWriter, r *http.Request) {
		switch since := r.URL.Query().Get("since"); since {
		case "", "last24hours", "lastWeek":
			writeJSON(w, http.StatusOK, []any{})
		default:
			s.fail(w, r, &config.FieldError{Field: "since", Message: "since must be last24hours or lastWeek, got " + strconv.Quote(since)})
		}
	}).Methods(http.MethodGet)
	r.HandleFunc("/api/job/statistics/tasks/results/{period:lastMinute|lastHour|lastDay|lastWeek}", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"successCount": 0, "failedCount": 0})
	}).Methods(http.MethodGet)
	for _, p := range []string{"/api/job/statistics/tasks/running", "/api/job/statistics/jobs/running", "/api/job/statistics/jobs/register"} {
		r.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			if v := r.URL.Query().Get("since"); v != "" && v != "lastWeek" {
				s.fail(w, r, &config.FieldError{Field: "since", Message: "since must be lastWeek, got " + strconv.Quote(v)})
				return
			}
			writeJSON(w, http.StatusOK, []any{})
		}).Methods(http.MethodGet)
	}
	r.HandleFunc("/api/job/statistics/jobs/executionType", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]int{"transientJobCount": 0, "daemonJobCount": 0})
	}).Methods(http.MethodGet)
}

// parseTime accepts the console's "2006-01-02 15:04:05", a bare date, or RFC 3339.
func parseTime(v string) (time.Time, error) {
	var last error
	for _, layout := range []string{"2006-01-02 15:04:05", "2006-01-02", time.RFC3339} {
		t, err := time.Parse(layout, v)
		if err == nil {
			return t, nil
		}
		last = err
	}
	return time.Time{}, last
}
