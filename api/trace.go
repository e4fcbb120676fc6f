package api

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/eventtrace"
)

// Trace is the event trace the history and statistics endpoints read (SPEC §9).
type Trace struct {
	DB *eventtrace.DB
	// Results holds the task results counted since the last statistics row: the totals
	// (online, lastWeek) include them, so that today's runs count before the day's row.
	Results *eventtrace.Results
}

// resultPeriods are the periods of /api/job/statistics/tasks/results/{period}.
var resultPeriods = []string{"online", "lastWeek", "lastHour", "lastMinute", "lastDay"}

// online is the date Elastic-Job-Cloud's statistics count "since online" from.
var online = time.Date(2016, 12, 16, 0, 0, 0, 0, time.UTC)

// The event trace and statistics endpoints of Elastic-Job-Cloud 2.1.5, with its paths, query
// parameters and JSON fields. Without a database they answer its empty shapes, except the
// job counts, which come from the registered configs.
func (s *Server) traceRoutes(r *mux.Router) {
	r.HandleFunc("/api/job/events/executions", func(w http.ResponseWriter, r *http.Request) {
		q, ok := s.traceQuery(w, r, true)
		if !ok {
			return
		}
		if s.cfg.Trace == nil {
			w.Header().Set("Ejcloud-Event-Trace", "none") // the console says so; 2.1.5's body cannot
			writeJSON(w, http.StatusOK, eventtrace.Page[eventtrace.Execution]{Rows: []eventtrace.Execution{}})
			return
		}
		p, err := s.cfg.Trace.DB.Executions(r.Context(), q)
		if err != nil {
			s.fail(w, r, traceDBError{err})
			return
		}
		writeJSON(w, http.StatusOK, p)
	}).Methods(reads()...)
	r.HandleFunc("/api/job/events/statusTraces", func(w http.ResponseWriter, r *http.Request) {
		q, ok := s.traceQuery(w, r, false)
		if !ok {
			return
		}
		if s.cfg.Trace == nil {
			w.Header().Set("Ejcloud-Event-Trace", "none") // the console says so; 2.1.5's body cannot
			writeJSON(w, http.StatusOK, eventtrace.Page[eventtrace.Trace]{Rows: []eventtrace.Trace{}})
			return
		}
		p, err := s.cfg.Trace.DB.StatusTraces(r.Context(), q)
		if err != nil {
			s.fail(w, r, traceDBError{err})
			return
		}
		writeJSON(w, http.StatusOK, p)
	}).Methods(reads()...)

	r.HandleFunc("/api/job/statistics/tasks/results", func(w http.ResponseWriter, r *http.Request) {
		var iv eventtrace.Interval
		var since time.Time
		now := s.cfg.Now()
		switch v := r.URL.Query().Get("since"); v {
		case "":
			writeJSON(w, http.StatusOK, []any{}) // as 2.1.5: no period, no rows
			return
		case "last24hours":
			iv, since = eventtrace.Minute, eventtrace.Hour.Truncate(now).Add(-24*time.Hour)
		case "lastWeek":
			iv, since = eventtrace.Hour, eventtrace.Day.Truncate(now).Add(-7*24*time.Hour)
		default:
			s.fail(w, r, &config.FieldError{Field: "since", Message: "since must be last24hours or lastWeek, got " + strconv.Quote(v)})
			return
		}
		if s.cfg.Trace == nil {
			writeJSON(w, http.StatusOK, []any{})
			return
		}
		rows, err := s.cfg.Trace.DB.TaskResults(r.Context(), iv, since)
		if err != nil {
			s.fail(w, r, traceDBError{err})
			return
		}
		writeJSON(w, http.StatusOK, rows)
	}).Methods(reads()...)
	// The period is checked here rather than by the route's pattern, so that a period that is
	// none of these is a 400 naming it and the valid ones, not the 404 of an unknown endpoint.
	r.HandleFunc("/api/job/statistics/tasks/results/{period}", func(w http.ResponseWriter, r *http.Request) {
		now := s.cfg.Now()
		period := mux.Vars(r)["period"]
		if !slices.Contains(resultPeriods, period) {
			s.fail(w, r, &config.FieldError{Field: "period", Message: "period must be one of " + strings.Join(resultPeriods, ", ") + ", got " + strconv.Quote(period)})
			return
		}
		zero := eventtrace.TaskResult{StatisticInterval: eventtrace.Day, StatisticsTime: now.UnixMilli(), CreationTime: now.UnixMilli()}
		t := s.cfg.Trace
		switch {
		case period == "lastHour" || period == "lastMinute":
			iv := eventtrace.Hour
			if period == "lastMinute" {
				iv = eventtrace.Minute
			}
			if t == nil {
				zero.StatisticInterval = iv
				writeJSON(w, http.StatusOK, zero)
				return
			}
			res, err := t.DB.LatestTaskResult(r.Context(), iv, now)
			if err != nil {
				s.fail(w, r, traceDBError{err})
				return
			}
			writeJSON(w, http.StatusOK, res)
		case t != nil && (period == "online" || period == "lastWeek" || period == "lastDay"):
			// A row stamped T holds the period before T, and the sums take the rows from since
			// on. lastWeek is 2.1.5's: the day rows from 7 days before today's, 8 days of
			// results (plus today's, not yet in a row), kept so for its figures. lastDay, an
			// addition (2.1.5 answers it with zeros, and the console shows it): the 24 hour
			// rows from 23 hours before this hour's, plus this hour's not yet in a row.
			iv, since := eventtrace.Day, online
			switch period {
			case "lastWeek":
				since = eventtrace.Day.Truncate(now).Add(-7 * 24 * time.Hour)
			case "lastDay":
				iv, since = eventtrace.Hour, eventtrace.Hour.Truncate(now).Add(-23*time.Hour)
			}
			succ, fail, err := t.DB.SumTaskResults(r.Context(), iv, since)
			if err != nil {
				s.fail(w, r, traceDBError{err})
				return
			}
			ps, pf := t.Results.Pending(iv)
			zero.SuccessCount, zero.FailedCount = succ+ps, fail+pf
			writeJSON(w, http.StatusOK, zero)
		default: // no database, or a period 2.1.5 answers with zeros
			writeJSON(w, http.StatusOK, zero)
		}
	}).Methods(reads()...)
	for _, p := range []struct {
		path string
		read func(t *Trace, r *http.Request, since time.Time) (any, error)
	}{
		{"/api/job/statistics/tasks/running", func(t *Trace, r *http.Request, since time.Time) (any, error) {
			return t.DB.TaskRunning(r.Context(), since)
		}},
		{"/api/job/statistics/jobs/running", func(t *Trace, r *http.Request, since time.Time) (any, error) {
			return t.DB.JobRunning(r.Context(), since)
		}},
	} {
		r.HandleFunc(p.path, func(w http.ResponseWriter, r *http.Request) {
			v := r.URL.Query().Get("since")
			if v != "" && v != "lastWeek" {
				s.fail(w, r, &config.FieldError{Field: "since", Message: "since must be lastWeek, got " + strconv.Quote(v)})
				return
			}
			if v == "" || s.cfg.Trace == nil {
				writeJSON(w, http.StatusOK, []any{}) // as 2.1.5: no period, no rows
				return
			}
			rows, err := p.read(s.cfg.Trace, r, eventtrace.Day.Truncate(s.cfg.Now()).Add(-7*24*time.Hour))
			if err != nil {
				s.fail(w, r, traceDBError{err})
				return
			}
			writeJSON(w, http.StatusOK, rows)
		}).Methods(reads()...)
	}
	r.HandleFunc("/api/job/statistics/jobs/register", func(w http.ResponseWriter, r *http.Request) {
		if v := r.URL.Query().Get("since"); v != "" && v != "lastWeek" {
			s.fail(w, r, &config.FieldError{Field: "since", Message: "since must be lastWeek, got " + strconv.Quote(v)})
			return
		}
		if s.cfg.Trace == nil {
			writeJSON(w, http.StatusOK, []any{})
			return
		}
		rows, err := s.cfg.Trace.DB.JobRegister(r.Context(), online) // 2.1.5: since online, whatever since says
		if err != nil {
			s.fail(w, r, traceDBError{err})
			return
		}
		writeJSON(w, http.StatusOK, rows)
	}).Methods(reads()...)
	r.HandleFunc("/api/job/statistics/jobs/type", func(w http.ResponseWriter, r *http.Request) {
		jobs, err := s.store.Jobs(r.Context())
		if err != nil {
			s.fail(w, r, err)
			return
		}
		var c struct {
			Script   int `json:"scriptJobCount"`
			Simple   int `json:"simpleJobCount"`
			Dataflow int `json:"dataflowJobCount"`
		}
		for _, j := range jobs {
			switch j.JobType {
			case config.Script:
				c.Script++
			case config.Simple:
				c.Simple++
			case config.Dataflow:
				c.Dataflow++
			}
		}
		writeJSON(w, http.StatusOK, c)
	}).Methods(reads()...)
	r.HandleFunc("/api/job/statistics/jobs/executionType", func(w http.ResponseWriter, r *http.Request) {
		jobs, err := s.store.Jobs(r.Context())
		if err != nil {
			s.fail(w, r, err)
			return
		}
		var c struct {
			Transient int `json:"transientJobCount"`
			Daemon    int `json:"daemonJobCount"`
		}
		for _, j := range jobs {
			switch j.JobExecutionType {
			case config.Transient:
				c.Transient++
			case config.Daemon:
				c.Daemon++
			}
		}
		writeJSON(w, http.StatusOK, c)
	}).Methods(reads()...)
}

// traceQuery reads and checks a search's parameters: per_page, page, sort, order, startTime,
// endTime and the log's filters. A bad one is answered 400 naming it, before any SQL is built.
func (s *Server) traceQuery(w http.ResponseWriter, r *http.Request, executions bool) (eventtrace.Query, bool) {
	q := r.URL.Query()
	out := eventtrace.Query{Sort: q.Get("sort"), Order: q.Get("order"), Filters: map[string]string{}}
	// per_page is bounded; page only needs to be a page (its offset may not overflow).
	for _, p := range []struct {
		name string
		dst  *int
		most int
	}{{"per_page", &out.PerPage, eventtrace.MaxPerPage}, {"page", &out.Page, math.MaxInt32}} {
		if v := q.Get(p.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > p.most {
				s.fail(w, r, &config.FieldError{Field: p.name, Message: fmt.Sprintf("%s must be an integer from 1 to %d, got %q", p.name, p.most, v)})
				return out, false
			}
			*p.dst = n
		}
	}
	for _, p := range []struct {
		name string
		dst  *time.Time
	}{{"startTime", &out.Start}, {"endTime", &out.End}} {
		if v := q.Get(p.name); v != "" {
			t, err := parseTime(v)
			if err != nil {
				s.fail(w, r, &config.FieldError{Field: p.name, Message: p.name + " must be a date such as 2026-11-22 10:00:00 or RFC 3339, got " + strconv.Quote(v)})
				return out, false
			}
			*p.dst = t
		}
	}
	if !out.Start.IsZero() && !out.End.IsZero() && out.End.Before(out.Start) {
		s.fail(w, r, &config.FieldError{Field: "endTime", Message: "endTime is before startTime"})
		return out, false
	}
	for k, v := range q {
		switch k {
		case "per_page", "page", "sort", "order", "startTime", "endTime":
		default:
			out.Filters[k] = v[0]
		}
	}
	if err := eventtrace.CheckQuery(executions, out); err != nil {
		s.fail(w, r, err)
		return out, false
	}
	return out, true
}

// parseTime accepts the console's "2006-01-02 15:04:05", a bare date, or RFC 3339. The first
// two are in the scheduler's zone, as 2.1.5 reads them.
func parseTime(v string) (time.Time, error) {
	var last error
	for _, layout := range []string{"2006-01-02 15:04:05", "2006-01-02", time.RFC3339} {
		t, err := time.ParseInLocation(layout, v, time.Local)
		if err == nil {
			return t, nil
		}
		last = err
	}
	return time.Time{}, last
}

// traceDBError is a failed read of the event trace database: a dependency that cannot serve
// (503, as for ZooKeeper and Mesos), not a fault of this scheduler.
type traceDBError struct{ err error }

func (e traceDBError) Error() string { return "event trace database: " + e.err.Error() }
func (e traceDBError) Unwrap() error { return e.err }
