package api

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// fakeStore keeps apps and jobs in memory, with the state layer's error kinds.
type fakeStore struct {
	mu       sync.Mutex
	apps     map[string]config.App
	jobs     map[string]config.Job
	offApps  map[string]bool
	offJobs  map[string]bool
	running  []state.RunningEntry
	ready    []state.ReadyEntry
	failover []state.FailoverEntry
	fault    error // returned by every call when set
	ledgers  map[string]state.Ledger
}

func (f *fakeStore) FireLedger(_ context.Context, job string) (state.Ledger, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.ledgers[job]
	return l, ok, f.fault
}

func newFakeStore() *fakeStore {
	return &fakeStore{apps: map[string]config.App{}, jobs: map[string]config.Job{}, offApps: map[string]bool{}, offJobs: map[string]bool{}}
}

func (f *fakeStore) CreateApp(_ context.Context, a config.App) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fault != nil {
		return f.fault
	}
	if _, ok := f.apps[a.AppName]; ok {
		return fmt.Errorf("create app: %w", &state.SubjectError{Kind: "app", Name: a.AppName, Err: state.ErrExists})
	}
	f.apps[a.AppName] = a
	return nil
}

func (f *fakeStore) App(_ context.Context, name string) (config.App, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, ok := f.apps[name]
	if !ok {
		return a, &state.SubjectError{Kind: "app", Name: name, Err: state.ErrNotFound}
	}
	return a, f.fault
}

func (f *fakeStore) Apps(context.Context) ([]config.App, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []config.App
	for _, a := range f.apps {
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].AppName < out[j].AppName })
	return out, f.fault
}

func (f *fakeStore) UpdateApp(ctx context.Context, name string, change func(config.App) (config.App, error)) (config.App, error) {
	cur, err := f.App(ctx, name)
	if err != nil {
		return cur, err
	}
	next, err := change(cur)
	if err != nil {
		return cur, err
	}
	f.mu.Lock()
	f.apps[name] = next
	f.mu.Unlock()
	return next, nil
}

func (f *fakeStore) AppDisabled(_ context.Context, app string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.offApps[app], f.fault
}

func (f *fakeStore) CreateJob(_ context.Context, j config.Job) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fault != nil {
		return f.fault
	}
	if _, ok := f.apps[j.AppName]; !ok {
		return fmt.Errorf("create job: %w", &state.SubjectError{Kind: "app", Name: j.AppName, Err: state.ErrAppNotFound})
	}
	if _, ok := f.jobs[j.JobName]; ok {
		return fmt.Errorf("create job: %w", &state.SubjectError{Kind: "job", Name: j.JobName, Err: state.ErrExists})
	}
	if err := config.CheckDependsOn(j, slices.Collect(maps.Values(f.jobs))); err != nil { // as the store does
		return fmt.Errorf("create job: %w", err)
	}
	f.jobs[j.JobName] = j
	return nil
}

func (f *fakeStore) Job(_ context.Context, name string) (config.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	j, ok := f.jobs[name]
	if !ok {
		return j, &state.SubjectError{Kind: "job", Name: name, Err: state.ErrNotFound}
	}
	return j, f.fault
}

func (f *fakeStore) Jobs(context.Context) ([]config.Job, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []config.Job
	for _, j := range f.jobs {
		out = append(out, j)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].JobName < out[j].JobName })
	return out, f.fault
}

func (f *fakeStore) JobsJSON(ctx context.Context) ([]json.RawMessage, error) {
	jobs, err := f.Jobs(ctx)
	out := make([]json.RawMessage, len(jobs))
	for i, j := range jobs {
		out[i], _ = json.Marshal(j)
	}
	return out, err
}

func (f *fakeStore) JobOrAppDisabled(_ context.Context, j config.Job) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.offJobs[j.JobName] || f.offApps[j.AppName], f.fault
}

// MaxConfigBytes is about the state layer's bound with ZooKeeper's default jute.maxbuffer.
func (f *fakeStore) MaxConfigBytes() int { return 256 << 10 }

func (f *fakeStore) Running(context.Context) ([]state.RunningEntry, error) { return f.running, f.fault }
func (f *fakeStore) Ready(context.Context) ([]state.ReadyEntry, error)     { return f.ready, f.fault }
func (f *fakeStore) Failovers(context.Context) ([]state.FailoverEntry, error) {
	return f.failover, f.fault
}

// fakeSched records the operations asked of the leader.
type fakeSched struct {
	mu    sync.Mutex
	store *fakeStore
	ops   []string
	idle  map[string]bool
	// failures are the answers of Failure, by job.
	failures map[string]JobFailure
	// sandboxErr, if set, is Sandboxes' answer.
	sandboxErr error
	// opErr, if set, is the answer of every operation on an existing job or app, and of
	// Reconcile.
	opErr error
}

func (f *fakeSched) record(op string) {
	f.mu.Lock()
	f.ops = append(f.ops, op)
	f.mu.Unlock()
}

func (f *fakeSched) Ops() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.ops...)
}

// existing fails like the scheduler does for a missing job or app.
func (f *fakeSched) existingJob(ctx context.Context, job string) error {
	_, err := f.store.Job(ctx, job)
	return err
}

func (f *fakeSched) existingApp(ctx context.Context, app string) error {
	_, err := f.store.App(ctx, app)
	return err
}

func (f *fakeSched) JobChanged(_ context.Context, job string) { f.record("changed " + job) }
func (f *fakeSched) UpdateJob(ctx context.Context, j config.Job) error {
	if err := f.existingJob(ctx, j.JobName); err != nil {
		return err
	}
	jobs, _ := f.store.Jobs(ctx)
	if err := config.CheckDependsOn(j, jobs); err != nil { // as the store does
		return err
	}
	f.record("update " + j.JobName)
	return nil
}
func (f *fakeSched) DeleteJob(ctx context.Context, job string) error {
	if err := f.existingJob(ctx, job); err != nil {
		return err
	}
	jobs, _ := f.store.Jobs(ctx)
	if err := config.CheckNoDependents(jobs, func(j string) bool { return j == job }); err != nil { // as the store does
		return err
	}
	return f.jobOp(ctx, "delete", job)
}
func (f *fakeSched) DisableJob(ctx context.Context, job string) error {
	return f.jobOp(ctx, "disable", job)
}
func (f *fakeSched) EnableJob(ctx context.Context, job string) error {
	return f.jobOp(ctx, "enable", job)
}
func (f *fakeSched) Trigger(ctx context.Context, job string) error {
	return f.jobOp(ctx, "trigger", job)
}
func (f *fakeSched) DisableApp(ctx context.Context, app string) error {
	return f.appOp(ctx, "disable-app", app)
}
func (f *fakeSched) EnableApp(ctx context.Context, app string) error {
	return f.appOp(ctx, "enable-app", app)
}
func (f *fakeSched) DeleteApp(ctx context.Context, app string) error {
	if err := f.existingApp(ctx, app); err != nil {
		return err
	}
	jobs, _ := f.store.Jobs(ctx)
	of := map[string]bool{}
	for _, j := range jobs {
		of[j.JobName] = j.AppName == app
	}
	if err := config.CheckNoDependents(jobs, func(j string) bool { return of[j] }); err != nil { // as the store does
		return err
	}
	return f.appOp(ctx, "delete-app", app)
}
func (f *fakeSched) Idle(taskID string) bool { return f.idle[taskID] }
func (f *fakeSched) Waiting(job string) string {
	if job == "dep" {
		return "dependsOn: waiting for \"job\""
	}
	return ""
}
func (f *fakeSched) Failure(ctx context.Context, job string) (JobFailure, error) {
	if err := f.existingJob(ctx, job); err != nil {
		return JobFailure{}, err
	}
	if fl, ok := f.failures[job]; ok {
		return fl, nil
	}
	return JobFailure{JobName: job, Backoff: []ShardBackoff{}}, nil
}
func (f *fakeSched) AppUpdated(ctx context.Context, app string) error {
	return f.appOp(ctx, "app-updated", app)
}

func (f *fakeSched) jobOp(ctx context.Context, op, job string) error {
	if err := f.existingJob(ctx, job); err != nil {
		return err
	}
	if f.opErr != nil {
		return f.opErr
	}
	f.record(op + " " + job)
	return nil
}

func (f *fakeSched) appOp(ctx context.Context, op, app string) error {
	if err := f.existingApp(ctx, app); err != nil {
		return err
	}
	if f.opErr != nil {
		return f.opErr
	}
	f.record(op + " " + app)
	return nil
}

func (f *fakeSched) Reconcile(_ context.Context, explicit bool) error {
	if f.opErr != nil {
		return f.opErr
	}
	f.record(fmt.Sprintf("reconcile explicit=%v", explicit))
	return nil
}

func (f *fakeSched) Sandboxes(_ context.Context, app string) ([]Sandbox, error) {
	if f.sandboxErr != nil {
		return nil, f.sandboxErr
	}
	return []Sandbox{{Hostname: "127.0.0.2", Path: "/work/slaves/S0/frameworks/F/executors/" + app + "@-@S0/runs/latest"}}, nil
}

// fakeOverseer is a fakeSched that also answers the cluster view and the unplaced reasons.
type fakeOverseer struct {
	*fakeSched
	cluster  Cluster
	unplaced map[string]map[string]int
}

func (f *fakeOverseer) Cluster(context.Context) (Cluster, error) { return f.cluster, nil }
func (f *fakeOverseer) Unplaced() map[string]map[string]int      { return f.unplaced }

// realSched is the Scheduler's ZooKeeper part on the real state layer (the leader's Mesos part
// is left out): the API then writes what production writes.
type realSched struct {
	noMesos
	st *state.Store
}

type noMesos struct{}

func (noMesos) JobChanged(context.Context, string)       {}
func (noMesos) Trigger(context.Context, string) error    { return nil }
func (noMesos) Idle(string) bool                         { return false }
func (noMesos) Waiting(string) string                    { return "" }
func (noMesos) AppUpdated(context.Context, string) error { return nil }
func (noMesos) Failure(_ context.Context, job string) (JobFailure, error) {
	return JobFailure{JobName: job}, nil
}

func (r realSched) UpdateJob(ctx context.Context, j config.Job) error {
	_, err := r.st.UpdateJob(ctx, j)
	return err
}
func (r realSched) DeleteJob(ctx context.Context, j string) error  { return r.st.DeleteJob(ctx, j) }
func (r realSched) DisableJob(ctx context.Context, j string) error { return r.st.DisableJob(ctx, j) }
func (r realSched) EnableJob(ctx context.Context, j string) error {
	_, err := r.st.EnableJob(ctx, j)
	return err
}
func (r realSched) DisableApp(ctx context.Context, a string) error { return r.st.DisableApp(ctx, a) }
func (r realSched) EnableApp(ctx context.Context, a string) error {
	_, err := r.st.EnableApp(ctx, a)
	return err
}
func (r realSched) DeleteApp(ctx context.Context, a string) error {
	_, err := r.st.DeleteApp(ctx, a)
	return err
}

// realFixture serves the API from a leader's model of a real ZooKeeper, as production does,
// with the app "app" and the job "job" registered. It returns the request function and a dump
// of the namespace's nodes.
func realFixture(t *testing.T) (do func(method, path, body string) *httptest.ResponseRecorder, dump func() map[string]string) {
	t.Helper()
	env := statetest.StartZooKeeper(t)
	log := logrus.New()
	log.SetOutput(io.Discard)
	store, err := state.Connect(context.Background(), state.Config{Servers: env.Servers, Namespace: env.Namespace, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(store.Close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	model, err := store.Mirror(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	h := New(model, realSched{st: model}, Config{Log: log, Zone: "UTC"})
	do = func(method, path, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	if rec := do("POST", "/api/app", appBody); rec.Code != 204 {
		t.Fatalf("app: %d %s", rec.Code, rec.Body)
	}
	if rec := do("POST", "/api/job/register", jobBody); rec.Code != 204 {
		t.Fatalf("job: %d %s", rec.Code, rec.Body)
	}
	return do, func() map[string]string { return statetest.Dump(t, env) }
}
