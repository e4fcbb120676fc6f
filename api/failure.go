package api

import (
	"net/http"
	"time"

	"github.com/gorilla/mux"

	"github.com/ejcloud/ejcloud/state"
)

// JobFailure is GET /api/job/{jobName}/failure: why the job's shards are not launched at once.
// A new endpoint, so that the job JSON of 2.1.5 (which clients send back to /api/job/update)
// gains no field.
type JobFailure struct {
	JobName string `json:"jobName"`
	// Stopped: a failure that relaunching cannot heal stopped the job; Stop says which. It
	// lasts until an operator updates, enables or triggers the job, or updates or enables its
	// app.
	Stopped bool        `json:"stopped"`
	Stop    *state.Stop `json:"stop,omitempty"`
	// Backoff lists the shards whose failover relaunch waits (empty when none does).
	Backoff []ShardBackoff `json:"backoff"`
}

// ShardBackoff is a shard whose failover relaunch waits for its backoff.
type ShardBackoff struct {
	JobName      string    `json:"jobName"`
	ShardingItem int       `json:"shardingItem"`
	Failures     int       `json:"failures"`     // infrastructure failures in a row
	DelaySeconds float64   `json:"delaySeconds"` // the current backoff
	RetryAt      time.Time `json:"retryAt"`
	LastFailure  string    `json:"lastFailure"` // state, Mesos reason and message
}

func (s *Server) jobFailure(w http.ResponseWriter, r *http.Request) {
	name := mux.Vars(r)["jobName"]
	if _, err := s.store.Job(r.Context(), name); err != nil {
		s.fail(w, r, err)
		return
	}
	f, err := s.sched.Failure(r.Context(), name)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, f)
}
