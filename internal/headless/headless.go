// Package headless starts Debian's chromium for the console's browser tests: headless, driven
// over a pipe (chromedp's default: it listens on no debugging port), resolving no name but
// loopback's, and gone with every process it started when the test ends.
package headless

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/ejcloud/ejcloud/internal/await"
)

// Start starts the browser and returns its context (the first tab's); it fails the test, with
// the install hint, when chromium cannot start.
func Start(t testing.TB) context.Context {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath("/usr/bin/chromium"),
		chromedp.NoSandbox, // as root, chromium's sandbox cannot start
		// Names other than loopback's resolve to nothing: a stray fetch fails, and a test that
		// records the hosts asked for still sees it.
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.WindowSize(1280, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		cancel()
		cancelAlloc()
		t.Fatalf("start chromium (make test installs Debian's chromium when missing): %v", err)
	}
	dataDir := userDataDir(chromedp.FromContext(ctx).Browser.Process().Pid)
	if dataDir == "" {
		cancel()
		cancelAlloc()
		t.Fatal("chromium's command line names no --user-data-dir: its processes could not be checked")
	}
	t.Cleanup(func() {
		cancel()
		cancelAlloc()
		// chromedp kills the browser and every process of its user data directory: check it.
		await.True(t, 10*time.Second, "chromium's processes are gone", func() bool { return len(processesUsing(dataDir)) == 0 })
	})
	return ctx
}

// Thrown is the text of a tab's event if it is an uncaught exception.
func Thrown(ev any) (string, bool) {
	e, ok := ev.(*runtime.EventExceptionThrown)
	if !ok || e.ExceptionDetails == nil {
		return "", false
	}
	msg := e.ExceptionDetails.Text
	if e.ExceptionDetails.Exception != nil {
		msg += " " + e.ExceptionDetails.Exception.Description
	}
	return msg, true
}

// OnFailure records a tab's uncaught exceptions and, if the test fails, logs the page the tab
// shows, the exceptions and what more returns (nil: nothing more). Call it once per tab, after
// Start: its cleanup runs before the browser's, while the tab is still there.
func OnFailure(t testing.TB, tab context.Context, more func() string) {
	t.Helper()
	var mu sync.Mutex
	var thrown []string
	err := chromedp.Listen(tab, func(ev any) {
		if msg, ok := Thrown(ev); ok {
			mu.Lock()
			defer mu.Unlock()
			thrown = append(thrown, msg)
		}
	})
	if err != nil {
		t.Fatalf("listen to the tab: %v", err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		mu.Lock()
		msg := fmt.Sprintf("%s\nuncaught exceptions: %q", Page(tab), thrown)
		mu.Unlock()
		if more != nil {
			msg += "\n" + more()
		}
		t.Log(msg)
	})
}

// Page is what a tab shows, for failures: its location, the element with the focus and the
// last 3,000 characters of its text.
func Page(tab context.Context) string {
	ctx, cancel := context.WithTimeout(tab, 3*time.Second)
	defer cancel()
	loc, _ := chromedp.Run(ctx, chromedp.Location())
	text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`'focus on: ' + (document.activeElement && document.activeElement.outerHTML.slice(0, 200)) + '\n' + document.body.innerText`))
	if len(text) > 3000 {
		text = "…" + text[len(text)-3000:]
	}
	return "page " + loc + ":\n" + text
}

// userDataDir is the --user-data-dir of the process pid, which each of chromium's processes is
// started with.
func userDataDir(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return ""
	}
	for _, arg := range bytes.Split(b, []byte{0}) {
		if v, ok := bytes.CutPrefix(arg, []byte("--user-data-dir=")); ok {
			return string(v)
		}
	}
	return ""
}

// processesUsing lists the processes started with --user-data-dir=dir.
func processesUsing(dir string) []string {
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && bytes.Contains(b, []byte("--user-data-dir="+dir+"\x00")) {
			out = append(out, e.Name())
		}
	}
	return out
}
