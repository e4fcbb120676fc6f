package executor

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"
)

// A Go job's run ends its task however the job's goroutine ends: returning, panicking, or
// runtime.Goexit (which recover cannot see: the task stayed RUNNING for good); and a job killed
// before it started is not run at all.
func TestAGoJobsRunEndsHoweverItsGoroutineEnds(t *testing.T) {
	grace := graceOf(time.Second)
	for _, tc := range []struct {
		name   string
		f      func(context.Context) error
		killed bool
		want   string // the job failure's cause; "" for success, "killed" for errKilled
	}{
		{"returns", func(context.Context) error { return nil }, false, ""},
		{"fails", func(context.Context) error { return errors.New("boom") }, false, "boom"},
		{"panics", func(context.Context) error { panic("oops") }, false, "panic: oops"},
		{"calls runtime.Goexit", func(context.Context) error { runtime.Goexit(); return nil }, false, "runtime.Goexit"},
		{"killed before it starts", func(context.Context) error { t.Error("a job killed before it started was run"); return nil }, true, "killed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.killed {
				cancel()
			}
			r := &goRunner{f: tc.f}
			done := make(chan error, 1)
			go func() { done <- r.run(ctx, grace) }()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the run did not end")
			}
			var jf *jobFailure
			switch {
			case tc.want == "":
				if err != nil {
					t.Fatalf("%v; want success", err)
				}
			case tc.want == "killed":
				if !errors.Is(err, errKilled) {
					t.Fatalf("%v; want errKilled", err)
				}
			case !errors.As(err, &jf) || !strings.Contains(jf.cause, tc.want):
				t.Fatalf("%v; want a job failure naming %q", err, tc.want)
			}
		})
	}
}
