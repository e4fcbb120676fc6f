package console

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/internal/headless"
)

// These tests drive the console's page in Debian's chromium, headless, against an API
// answered by the test (a stand-in on loopback): each answers the way that broke the page.
// integration/console_test.go drives it against a real scheduler.

// standIn serves the console (without authentication) and the API answers the test sets.
type standIn struct {
	mux *http.ServeMux
	srv *httptest.Server
}

func newStandIn(t *testing.T) *standIn {
	t.Helper()
	con, err := New(Config{})
	if err != nil {
		t.Fatal(err)
	}
	s := &standIn{mux: http.NewServeMux()}
	s.mux.Handle("/", con)
	s.srv = httptest.NewServer(s.mux) // on loopback
	t.Cleanup(s.srv.Close)
	return s
}

// reply answers GET path with code and body, as JSON.
func (s *standIn) reply(path string, code int, body string) {
	s.mux.HandleFunc("GET "+path, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		io.WriteString(w, body)
	})
}

// chrome is a headless chromium and one tab of it.
type chrome struct {
	tab    context.Context
	base   string
	opened atomic.Int64
}

// startChrome starts chromium headless (internal/headless) with one tab on base.
func startChrome(t *testing.T, base string) *chrome {
	t.Helper()
	ctx := headless.Start(t)
	headless.OnFailure(t, ctx, nil)
	return &chrome{tab: ctx, base: base + "/"}
}

// beforeEachPage runs script in every page the tab loads from now on, before the page's own.
func (c *chrome) beforeEachPage(t *testing.T, script string) {
	t.Helper()
	if _, err := chromedp.Call(c.tab, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: script}); err != nil {
		t.Fatalf("Page.addScriptToEvaluateOnNewDocument: %v", err)
	}
}

// open loads the console afresh at one of its pages (its hash route).
func (c *chrome) open(t *testing.T, hash string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(c.tab, 20*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(fmt.Sprintf("%s?load=%d%s", c.base, c.opened.Add(1), hash)), chromedp.WaitVisible(chromedp.CSS(`header nav`))); err != nil {
		t.Fatalf("open %s: %v", hash, err)
	}
}

// eval evaluates a JavaScript expression whose value is a string.
func (c *chrome) eval(t *testing.T, expr string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(c.tab, 20*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
	if err != nil {
		t.Fatalf("browser: %s: %v", expr, err)
	}
	return v
}

// until waits until the JavaScript expression, a string, holds want; it fails the test with
// what was seen instead.
func (c *chrome) until(t *testing.T, what, expr string, want func(string) bool) string {
	t.Helper()
	var got string
	await.Explained(t, 20*time.Second, what, func() bool {
		ctx, cancel := context.WithTimeout(c.tab, 2*time.Second)
		defer cancel()
		v, err := chromedp.Run(ctx, chromedp.Evaluate[string](expr))
		got = v
		return err == nil && want(v)
	}, func() string { return fmt.Sprintf("saw %q", got) })
	return got
}

// waitText waits until the first element matching the CSS selector contains text.
func (c *chrome) waitText(t *testing.T, sel, text string) string {
	t.Helper()
	return c.until(t, fmt.Sprintf("%s shows %q", sel, text), fmt.Sprintf(`(document.querySelector(%q) || {}).innerText || ''`, sel),
		func(s string) bool { return strings.Contains(s, text) })
}

// row is the text and the buttons of the first table row of the page that names name, as
// "text | button,button".
func row(name string) string {
	return fmt.Sprintf(`(() => {
		const r = [...document.querySelectorAll('main table tbody tr')].find((r) => r.cells[0] && r.cells[0].innerText === %q);
		return r ? r.innerText.replace(/\s+/g, ' ') + ' | ' + [...r.querySelectorAll('button')].map((b) => b.textContent).join(',') : '';
	})()`, name)
}

// fill sets a form field as typing would: its value, then the input and change events.
func (c *chrome) fill(t *testing.T, name, value string) {
	t.Helper()
	sel := `form [name="` + name + `"]`
	c.until(t, sel+" is shown", fmt.Sprintf(`document.querySelector(%q) ? 'yes' : ''`, sel), func(s string) bool { return s == "yes" })
	c.eval(t, fmt.Sprintf(`(() => {
		const el = document.querySelector(%q);
		el.value = %q;
		el.dispatchEvent(new Event('input', {bubbles: true}));
		el.dispatchEvent(new Event('change', {bubbles: true}));
		return el.value;
	})()`, sel, value))
}

// One path of a batch that fails must not blank the others, and a state that is not known is
// shown as unknown: a job whose state read fails is not shown "enabled" with a Disable button
// (it may be disabled), a job with an invalid stored cron (its /next answers 409) shows its own
// error while the other jobs keep their next fire times, and a job page whose app's state
// cannot be read does not say the job is enabled.
func TestConsoleShowsWhatEachReadSaysOnItsOwn(t *testing.T) {
	s := newStandIn(t)
	job := func(name, app, cron string) string {
		return fmt.Sprintf(`{"jobName":%q,"appName":%q,"jobType":"SCRIPT","jobExecutionType":"TRANSIENT","cron":%q,"shardingTotalCount":1}`, name, app, cron)
	}
	s.reply("/api/job/jobs", 200, "["+strings.Join([]string{
		job("job-a", "app-a", "0 0 0 1 1 ?"), job("job-b", "app-a", "0 0 0 31 2 ? bad"), job("job-c", "app-a", ""), job("job-d", "app-b", ""),
	}, ",")+"]")
	s.reply("/api/job/unplaced", 200, `{}`)
	s.reply("/api/job/job-a/disable", 200, `false`)
	s.reply("/api/job/job-b/disable", 200, `false`)
	s.reply("/api/job/job-c/disable", 503, `{"error":"ZooKeeper cannot be reached"}`)
	s.reply("/api/job/job-d/disable", 200, `false`)
	s.reply("/api/app/app-a/disable", 200, `false`)
	s.reply("/api/app/app-b/disable", 503, `{"error":"ZooKeeper cannot be reached"}`)
	s.reply("/api/job/job-a/next", 200, `["2027-01-01T00:00:00Z"]`)
	s.reply("/api/job/job-b/next", 409, `{"error":"the stored cron of job-b is invalid"}`)
	s.reply("/api/app/list", 200, `[{"appName":"app-a","appURL":"/opt/a","cpuCount":1,"memoryMB":128},{"appName":"app-b","appURL":"/opt/b","cpuCount":1,"memoryMB":128}]`)
	s.reply("/api/job/jobs/job-d", 200, job("job-d", "app-b", ""))
	s.reply("/api/job/job-d/failure", 200, `{}`)
	for _, q := range []string{"running", "ready", "failover"} {
		s.reply("/api/job/tasks/"+q, 200, `[]`)
	}
	b := startChrome(t, s.srv.URL)

	b.open(t, "#/jobs")
	b.until(t, "job-a's row shows its next fire time", fmt.Sprintf(`(document.evaluate(%q, document, null, XPathResult.FIRST_ORDERED_NODE_TYPE, null).singleNodeValue || {}).outerHTML || ''`,
		`//tr[td/a[text()="job-a"]]//time`), func(s string) bool { return strings.Contains(s, `datetime="2027-01-01T00:00:00Z"`) })
	b.until(t, "job-b's row shows its own /next error", row("job-b"), func(s string) bool { return strings.Contains(s, "the stored cron of job-b is invalid") })
	if got := b.eval(t, row("job-a")); strings.Contains(got, "invalid") || !strings.Contains(got, "enabled") || !strings.HasSuffix(got, "Disable,Delete") {
		t.Fatalf("job-a's row is %q: want its state enabled, a Disable button, and no other job's error", got)
	}
	if banner := b.eval(t, `[...document.querySelectorAll('main .banner')].map((e) => e.innerText).join(' / ')`); strings.Contains(banner, "invalid") {
		t.Fatalf("one job's /next error is the page's banner %q: it belongs to its row", banner)
	}
	for _, name := range []string{"job-c", "job-d"} { // its own state, then its app's, cannot be read
		got := b.eval(t, row(name))
		if strings.Contains(got, "enabled") || strings.Contains(got, "Disable") || strings.Contains(got, "Enable") || !strings.Contains(got, "…") {
			t.Fatalf("%s's row is %q while its state cannot be read: want \"…\", and neither Enable nor Disable", name, got)
		}
	}

	b.open(t, "#/jobs/job-d")
	b.waitText(t, "main h1", "Job job-d")
	b.waitText(t, "main .banner", "ZooKeeper cannot be reached")
	if got := b.eval(t, `document.querySelector('main .toolbar').innerText + ' | ' + [...document.querySelectorAll('main .actions button')].map((e) => e.textContent).join(',')`); strings.Contains(got, "enabled") ||
		strings.Contains(got, "Disable") || !strings.Contains(got, "…") {
		t.Fatalf("job-d's page shows %q while its app's state cannot be read: want \"…\", and no Disable", got)
	}

	b.open(t, "#/apps")
	b.until(t, "app-a's row is enabled", row("app-a"), func(s string) bool { return strings.Contains(s, "enabled") })
	if got := b.eval(t, row("app-b")); strings.Contains(got, "enabled") || strings.Contains(got, "Disable") || !strings.Contains(got, "…") {
		t.Fatalf("app-b's row is %q while its state cannot be read: want \"…\", and no Disable", got)
	}
}

// The standby banner goes once this instance answers the API itself: it won the leadership.
func TestConsoleStandbyBannerClearsWhenThisInstanceLeads(t *testing.T) {
	s := newStandIn(t)
	var leading atomic.Bool
	leader := httptest.NewServer(http.NotFoundHandler()) // the other instance: never reached, the redirect is not followed
	defer leader.Close()
	s.mux.HandleFunc("/api/", func(w http.ResponseWriter, r *http.Request) {
		if !leading.Load() {
			http.Redirect(w, r, leader.URL+r.URL.Path, http.StatusTemporaryRedirect)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `[]`)
	})
	b := startChrome(t, s.srv.URL)
	const banner = "This scheduler instance is a standby: the API is served by the leader"
	b.open(t, "#/status") // polls every 2 s
	b.waitText(t, "main", banner)
	leading.Store(true)
	b.until(t, "the standby banner is gone", `document.querySelector('main').innerText`, func(s string) bool {
		return !strings.Contains(s, banner) && strings.Contains(s, "The running queue is empty")
	})
}

// A browser without AbortSignal.any (Chromium before 116, Firefox before 124, Safari before
// 17.4) still learns who it is signed in as, instead of showing "Loading…" for good.
func TestConsoleSessionWithoutAbortSignalAny(t *testing.T) {
	s := newStandIn(t)
	s.reply("/api/job/jobs", 200, `[]`)
	s.reply("/api/job/unplaced", 200, `{}`)
	b := startChrome(t, s.srv.URL)
	b.beforeEachPage(t, `delete AbortSignal.any`)
	b.open(t, "#/jobs")
	if got := b.eval(t, `typeof AbortSignal.any`); got != "undefined" {
		t.Fatalf("the page has AbortSignal.any (%s): the test would not test its absence", got)
	}
	b.waitText(t, "header nav .role", "no authentication")
	b.waitText(t, "main", "No jobs registered")
}

// A session that keeps being refused is said, not asked for in silence for good.
func TestConsoleSessionRefusedIsShown(t *testing.T) {
	s := newStandIn(t)
	s.reply("/console/session", 401, `{"error":"credentials required"}`)
	b := startChrome(t, s.srv.URL)
	b.open(t, "#/jobs")
	b.waitText(t, "main .banner", "401")
}

// The job form without the app list (a 503 here) says so, and its Save says why no app can
// be picked, not that none is registered.
func TestConsoleJobFormSaysTheAppsCannotBeRead(t *testing.T) {
	s := newStandIn(t)
	s.reply("/api/app/list", 503, `{"error":"ZooKeeper cannot be reached"}`)
	b := startChrome(t, s.srv.URL)
	b.open(t, "#/jobs/+new")
	b.waitText(t, "main .banner", "ZooKeeper cannot be reached")
	if got := b.eval(t, `document.querySelector('select[name=appName]').innerText`); strings.Contains(got, "no app registered") {
		t.Fatalf("the App list says %q while the apps cannot be read", got)
	}
	b.fill(t, "jobName", "job")
	b.fill(t, "scriptCommandLine", "true")
	b.eval(t, `(document.querySelector('form button[type=submit]').click(), '')`)
	b.waitText(t, `select[name=appName] ~ small`, "the apps cannot be read: ZooKeeper cannot be reached")
}

// Without an event trace database the history is not "none for these filters": the console
// says the event trace is not configured, as the API's header tells it.
func TestConsoleSaysTheEventTraceIsNotConfigured(t *testing.T) {
	s := newStandIn(t)
	for _, kind := range []string{"executions", "statusTraces"} {
		s.mux.HandleFunc("GET /api/job/events/"+kind, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Ejcloud-Event-Trace", "none")
			io.WriteString(w, `{"total":0,"rows":[]}`)
		})
	}
	b := startChrome(t, s.srv.URL)
	b.open(t, "#/history")
	b.waitText(t, "#history", "The event trace is not configured")
	if got := b.eval(t, `document.querySelector('#history').innerText`); strings.Contains(got, "recorded for these filters") {
		t.Fatalf("the history says %q: as if a search had found nothing", got)
	}
}
