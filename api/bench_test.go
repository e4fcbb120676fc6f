package api_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/api"
	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/state/statetest"
)

func TestMain(m *testing.M) { os.Exit(statetest.Main(m)) }

// noScheduler answers the scheduler's part of registrations: the benchmark measures the API
// and the state layer.
type noScheduler struct{}

func (noScheduler) JobChanged(context.Context, string)          {}
func (noScheduler) UpdateJob(context.Context, config.Job) error { return nil }
func (noScheduler) DeleteJob(context.Context, string) error     { return nil }
func (noScheduler) DisableJob(context.Context, string) error    { return nil }
func (noScheduler) EnableJob(context.Context, string) error     { return nil }
func (noScheduler) DisableApp(context.Context, string) error    { return nil }
func (noScheduler) EnableApp(context.Context, string) error     { return nil }
func (noScheduler) DeleteApp(context.Context, string) error     { return nil }
func (noScheduler) Trigger(context.Context, string) error       { return nil }
func (noScheduler) Idle(string) bool                            { return false }
func (noScheduler) Waiting(string) string                       { return "" }
func (noScheduler) AppUpdated(context.Context, string) error    { return nil }
func (noScheduler) Failure(_ context.Context, job string) (api.JobFailure, error) {
	return api.JobFailure{JobName: job}, nil
}

func jobJSON(name string) string {
	return `{"jobName":"` + name + `","appName":"app","jobType":"SCRIPT","jobExecutionType":"TRANSIENT","cron":"0 0/5 * * * ?","shardingTotalCount":4,"cpuCount":0.1,"memoryMB":64,"scriptCommandLine":"true","timeZone":"UTC"}`
}

func benchServer(b *testing.B, jobs int) (*httptest.Server, *state.Store) {
	env := statetest.StartZooKeeper(b)
	log := logrus.New()
	log.SetOutput(io.Discard)
	store, err := state.Connect(context.Background(), state.Config{Servers: env.Servers, Namespace: env.Namespace, Logger: log})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(store.Close)
	app := config.DefaultApp()
	app.AppName, app.AppURL, app.BootstrapScript = "app", "/opt/app", "./run"
	if err := store.CreateApp(context.Background(), app); err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			j, _ := config.DecodeJob([]byte(jobJSON(fmt.Sprintf("job%05d", i))), "UTC")
			if err := store.CreateJob(context.Background(), j); err != nil {
				b.Error(err)
			}
		}()
	}
	wg.Wait()
	// The API is served by the leader, from its model (issue 14), as in production.
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	model, err := store.Mirror(ctx, nil)
	if err != nil {
		b.Fatal(err)
	}
	// As the leader does once it has loaded the jobs (scheduler: loadJobs).
	if _, err := model.JobsJSON(ctx); err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(api.New(model, noScheduler{}, api.Config{Log: log}))
	b.Cleanup(srv.Close)
	return srv, model
}

func report(b *testing.B, lat []time.Duration) {
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	var sum time.Duration
	for _, l := range lat {
		sum += l
	}
	b.ReportMetric(float64(len(lat))/sum.Seconds(), "req/s")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkListJobs is GET /api/job/jobs with 10,000 jobs in ZooKeeper.
func BenchmarkListJobs(b *testing.B) {
	srv, _ := benchServer(b, 10000)
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		resp, err := http.Get(srv.URL + "/api/job/jobs")
		if err != nil {
			b.Fatal(err)
		}
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		lat = append(lat, time.Since(start))
		if resp.StatusCode != 200 || n < 10000*100 {
			b.Fatalf("%d, %d bytes", resp.StatusCode, n)
		}
	}
	report(b, lat)
}

// BenchmarkRegisterJob is POST /api/job/register of new jobs, one at a time.
func BenchmarkRegisterJob(b *testing.B) {
	srv, _ := benchServer(b, 0)
	var lat []time.Duration
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		resp, err := http.Post(srv.URL+"/api/job/register", "application/json", strings.NewReader(jobJSON(fmt.Sprintf("new%07d", i))))
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		lat = append(lat, time.Since(start))
		if resp.StatusCode != 204 {
			b.Fatalf("register: %d", resp.StatusCode)
		}
	}
	report(b, lat)
}
