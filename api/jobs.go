package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/scheduler/producer"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/taskid"
)

func (s *Server) jobRoutes(r *mux.Router) {
	r.HandleFunc("/api/job/register", s.registerJob).Methods(http.MethodPost)
	r.HandleFunc("/api/job/update", s.updateJob).Methods(http.MethodPut)
	r.HandleFunc("/api/job/deregister", s.deregisterJob).Methods(http.MethodDelete)
	r.HandleFunc("/api/job/trigger", s.triggerJob).Methods(http.MethodPost)
	r.HandleFunc("/api/job/jobs", s.listJobs).Methods(reads()...)
	r.HandleFunc("/api/job/jobs/{jobName}", s.getJob).Methods(reads()...)
	r.HandleFunc("/api/job/tasks/running", s.runningTasks).Methods(reads()...)
	r.HandleFunc("/api/job/tasks/ready", s.readyTasks).Methods(reads()...)
	r.HandleFunc("/api/job/tasks/failover", s.failoverTasks).Methods(reads()...)
	r.HandleFunc("/api/job/{jobName}/disable", s.jobDisabled).Methods(reads()...)
	r.HandleFunc("/api/job/{jobName}/disable", s.disableJob).Methods(http.MethodPost)
	r.HandleFunc("/api/job/{jobName}/disable", s.enableJob).Methods(http.MethodDelete) // the 2.1.5 form
	r.HandleFunc("/api/job/{jobName}/enable", s.enableJob).Methods(http.MethodPost)
	r.HandleFunc("/api/job/{jobName}/next", s.nextFires).Methods(reads()...)
	r.HandleFunc("/api/job/{jobName}/failure", s.jobFailure).Methods(reads()...)
	r.HandleFunc("/api/job/{jobName}/fires", s.jobFires).Methods(reads()...)
}

func (s *Server) registerJob(w http.ResponseWriter, r *http.Request) {
	j, ok := s.jobBody(w, r)
	if !ok {
		return
	}
	err := config.CheckNewName("jobName", j.JobName)
	if err == nil {
		err = s.store.CreateJob(r.Context(), j)
	}
	if err != nil {
		s.failWrite(w, r, err, j)
		return
	}
	s.sched.JobChanged(r.Context(), j.JobName)
	noContent(w)
}

// updateJob replaces the whole config; the scheduler kills running tasks only when SPEC §3.2
// says so.
func (s *Server) updateJob(w http.ResponseWriter, r *http.Request) {
	j, ok := s.jobBody(w, r)
	if !ok {
		return
	}
	if err := s.sched.UpdateJob(r.Context(), j); err != nil {
		s.failWrite(w, r, err, j)
		return
	}
	noContent(w)
}

// jobBody reads a job config from the request and checks it against the other jobs; when it
// will not do, it has answered (400 naming the field) and ok is false.
func (s *Server) jobBody(w http.ResponseWriter, r *http.Request) (config.Job, bool) {
	b, ok := body(w, r)
	if !ok {
		return config.Job{}, false
	}
	// Its dependsOn is checked against the other jobs by the store, in the write itself.
	j, err := config.DecodeJob(b, s.cfg.Zone)
	if err == nil {
		err = config.CheckStoredSize(j, s.store.MaxConfigBytes())
	}
	if err != nil {
		s.fail(w, r, err)
		return config.Job{}, false
	}
	return j, true
}

// jobName reads a job name given as the raw body or as a JSON string (both 2.1.5 forms). A
// JSON object or array is neither ({"jobName":"x"} is no job's name); anything else is a raw
// name, as 2.1.5 took it, so that the jobs it registered under any name can be deregistered.
func (s *Server) jobName(w http.ResponseWriter, r *http.Request) (string, bool) {
	b, ok := body(w, r)
	if !ok {
		return "", false
	}
	name := strings.TrimSpace(string(b))
	if (strings.HasPrefix(name, "{") || strings.HasPrefix(name, "[")) && json.Valid([]byte(name)) {
		s.fail(w, r, &config.FieldError{Field: "jobName", Message: "jobName must be the whole body, the job's name raw or as a JSON string (\"job\"), not a JSON object or array"})
		return "", false
	}
	if strings.HasPrefix(name, `"`) {
		if err := json.Unmarshal([]byte(name), &name); err != nil {
			s.fail(w, r, &config.FieldError{Field: "jobName", Message: "jobName is not a valid JSON string: " + err.Error()})
			return "", false
		}
	}
	if name == "" {
		s.fail(w, r, &config.FieldError{Field: "jobName", Message: "jobName is required in the body"})
		return "", false
	}
	return name, true
}

func (s *Server) deregisterJob(w http.ResponseWriter, r *http.Request) {
	name, ok := s.jobName(w, r)
	if !ok {
		return
	}
	s.op(w, r, s.sched.DeleteJob, name) // refused (409) while another job depends on it
}

func (s *Server) triggerJob(w http.ResponseWriter, r *http.Request) {
	name, ok := s.jobName(w, r)
	if !ok {
		return
	}
	j, err := s.store.Job(r.Context(), name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if j.JobExecutionType == config.Daemon {
		s.fail(w, r, &config.FieldError{Field: "jobName", Message: fmt.Sprintf("job %q is a DAEMON job; only TRANSIENT jobs can be triggered", name)})
		return
	}
	s.op(w, r, s.sched.Trigger, name)
}

// listJobs answers GET /api/job/jobs from the jobs' cached encodings: encoding 10,000 jobs
// on every request cost 25 ms; joining them costs a copy.
func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) {
	jobs, err := s.store.JobsJSON(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	size := 3
	for _, j := range jobs {
		size += len(j) + 1
	}
	body := make([]byte, 0, size)
	body = append(body, '[')
	for i, j := range jobs {
		if i > 0 {
			body = append(body, ',')
		}
		body = append(body, j...)
	}
	body = append(body, "]\n"...) // as json.Encoder ends a value
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	w.Write(body)
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) {
	j, err := s.store.Job(r.Context(), mux.Vars(r)["jobName"])
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, j)
}

// jobDisabled is true when the job or its app is disabled.
func (s *Server) jobDisabled(w http.ResponseWriter, r *http.Request) {
	j, err := s.store.Job(r.Context(), mux.Vars(r)["jobName"])
	if err != nil {
		s.fail(w, r, err)
		return
	}
	off, err := s.store.JobOrAppDisabled(r.Context(), j)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, off)
}

func (s *Server) disableJob(w http.ResponseWriter, r *http.Request) {
	s.op(w, r, s.sched.DisableJob, mux.Vars(r)["jobName"])
}

func (s *Server) enableJob(w http.ResponseWriter, r *http.Request) {
	s.op(w, r, s.sched.EnableJob, mux.Vars(r)["jobName"])
}

// nextFires lists the job's next fire times in its own zone (?count=5, at most 100).
func (s *Server) nextFires(w http.ResponseWriter, r *http.Request) {
	count := 5
	if c := r.URL.Query().Get("count"); c != "" {
		n, err := strconv.Atoi(c)
		if err != nil || n < 1 || n > 100 {
			s.fail(w, r, &config.FieldError{Field: "count", Message: "count must be an integer from 1 to 100, got " + strconv.Quote(c)})
			return
		}
		count = n
	}
	j, err := s.store.Job(r.Context(), mux.Vars(r)["jobName"])
	if err != nil {
		s.fail(w, r, err)
		return
	}
	// Elastic-Job-Cloud 2.1.5 stored crons it could not schedule (SPEC §12); ejcloud checks them
	// at registration. Such a job's config, not the scheduler, is at fault: 409, until the
	// job is updated.
	if _, err := j.Schedule(); err != nil {
		writeError(w, http.StatusConflict, fmt.Sprintf("job %q's stored cron %q is not a valid Quartz expression (%v): it was stored before"+
			" crons were checked; update the job with a valid cron (PUT /api/job/update)", j.JobName, j.Cron, err), "cron")
		return
	}
	if _, err := j.Location(); err != nil {
		writeError(w, http.StatusConflict, fmt.Sprintf("job %q's stored timeZone %q is not a time zone (%v); update the job with an IANA"+
			" time zone name (PUT /api/job/update)", j.JobName, j.TimeZone, err), "timeZone")
		return
	}
	times, err := producer.Next(j, s.cfg.Now(), count)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := make([]string, len(times))
	for i, t := range times {
		out[i] = t.Format(time.RFC3339)
	}
	writeJSON(w, http.StatusOK, out)
}

// JobFires is the answer of GET /api/job/{jobName}/fires: the fire ledger, newest slot first.
type JobFires struct {
	JobName          string            `json:"jobName"`
	MisfirePolicy    string            `json:"misfirePolicy"`       // in effect (the job's, or its default)
	StartingDeadline int               `json:"startingDeadline"`    // seconds; 0: none
	LastSlot         *time.Time        `json:"lastSlot"`            // the latest cron slot handled; null before the first
	CronSince        *time.Time        `json:"cronSince,omitempty"` // when the job's cron or zone last changed; absent: not since its ledger began
	DependsOn        []string          `json:"dependsOn,omitempty"`
	Waiting          string            `json:"waiting,omitempty"` // why its queued run waits (dependencies)
	Fires            []state.FireEntry `json:"fires"`             // newest first
}

// jobFires lists the job's recent cron slots with their outcome and the task ids they
// produced (?limit=20, at most state.LedgerKeep).
func (s *Server) jobFires(w http.ResponseWriter, r *http.Request) {
	limit := 20
	if c := r.URL.Query().Get("limit"); c != "" {
		n, err := strconv.Atoi(c)
		if err != nil || n < 1 || n > state.LedgerKeep {
			s.fail(w, r, &config.FieldError{Field: "limit", Message: fmt.Sprintf("limit must be an integer from 1 to %d, got %q", state.LedgerKeep, c)})
			return
		}
		limit = n
	}
	j, err := s.store.Job(r.Context(), mux.Vars(r)["jobName"])
	if err != nil {
		s.fail(w, r, err)
		return
	}
	l, _, err := s.store.FireLedger(r.Context(), j.JobName)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := JobFires{JobName: j.JobName, MisfirePolicy: j.EffectiveMisfirePolicy(), StartingDeadline: j.StartingDeadline,
		DependsOn: j.DependsOn, Waiting: s.sched.Waiting(j.JobName), Fires: []state.FireEntry{}}
	if !l.Last.IsZero() {
		out.LastSlot = &l.Last
	}
	if !l.From.IsZero() {
		out.CronSince = &l.From
	}
	for i := len(l.Fires) - 1; i >= 0 && len(out.Fires) < limit; i-- {
		out.Fires = append(out.Fires, l.Fires[i])
	}
	writeJSON(w, http.StatusOK, out)
}

type metaInfo struct {
	JobName       string `json:"jobName"`
	ShardingItems []int  `json:"shardingItems"`
}

func (s *Server) runningTasks(w http.ResponseWriter, r *http.Request) {
	running, err := s.store.Running(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	type task struct {
		ID       string   `json:"id"`
		MetaInfo metaInfo `json:"metaInfo"`
		Type     string   `json:"type"`
		SlaveID  string   `json:"slaveId"`
		Idle     bool     `json:"idle"`
	}
	out := []task{}
	for _, e := range running {
		t := task{ID: e.TaskID, MetaInfo: metaInfo{JobName: e.Meta.JobName, ShardingItems: []int{e.Meta.Item}}, Idle: s.sched.Idle(e.TaskID)}
		if id, err := taskid.Parse(e.TaskID); err == nil {
			t.Type, t.SlaveID = string(id.Type), id.AgentID
		}
		out = append(out, t)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) readyTasks(w http.ResponseWriter, r *http.Request) {
	ready, err := s.store.Ready(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	type entry struct {
		JobName string `json:"jobName"`
		Times   int    `json:"times"`
	}
	out := []entry{}
	for _, e := range ready {
		out = append(out, entry{JobName: e.JobName, Times: e.Count})
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) failoverTasks(w http.ResponseWriter, r *http.Request) {
	fos, err := s.store.Failovers(r.Context())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	type entry struct {
		TaskInfo       metaInfo `json:"taskInfo"`
		OriginalTaskID string   `json:"originalTaskId"`
	}
	out := []entry{}
	for _, e := range fos {
		out = append(out, entry{TaskInfo: metaInfo{JobName: e.Meta.JobName, ShardingItems: []int{e.Meta.Item}}, OriginalTaskID: e.TaskID})
	}
	writeJSON(w, http.StatusOK, out)
}

// op runs a scheduler operation on a name and answers 204, or the error.
func (s *Server) op(w http.ResponseWriter, r *http.Request, f func(context.Context, string) error, name string) {
	if err := f(r.Context(), name); err != nil {
		s.fail(w, r, err)
		return
	}
	noContent(w)
}
