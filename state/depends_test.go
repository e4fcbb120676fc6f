package state_test

import (
	"context"
	"errors"
	"testing"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/state"
)

// Two writes that each pass the rules of dependsOn on their own reads but break them together
// (two halves of a cycle; a deletion, or a job made one nobody may wait for, beside a new
// dependency on it) are never both written: the one written second reads the jobs again and
// is refused, with the API's error.
func TestWritesThatTogetherBreakDependsOnAreNotBothWritten(t *testing.T) {
	s := newStore(t)
	ctx := ctxT(t)
	must(t, s.CreateApp(ctx, testApp("app")), "CreateApp")
	dependsOn := func(name string, deps ...string) config.Job {
		j := testJob(name, "app")
		j.DependsOn = deps
		return j
	}
	daemon := testJob("", "app")
	daemon.JobExecutionType = config.Daemon
	for _, tc := range []struct {
		name      string
		first     func(ctx context.Context) error // written while second is between its check and its write
		second    func(ctx context.Context) error
		wantField string // of the FieldError second gets, or "" for a DependentError
		wantMsg   string
	}{
		{"two halves of a cycle",
			func(ctx context.Context) error { _, err := s.UpdateJob(ctx, dependsOn("b", "a")); return err },
			func(ctx context.Context) error { _, err := s.UpdateJob(ctx, dependsOn("a", "b")); return err },
			"dependsOn", "dependsOn would close a cycle: a → b → a"},
		{"a deletion beside a new dependency on the job",
			func(ctx context.Context) error { _, err := s.UpdateJob(ctx, dependsOn("b", "a")); return err },
			func(ctx context.Context) error { return s.DeleteJob(ctx, "a") },
			"", `job "b" depends on job "a": take it out of "b"'s dependsOn first`},
		{"a new dependency beside the job's deletion",
			func(ctx context.Context) error { return s.DeleteJob(ctx, "a") },
			func(ctx context.Context) error { return s.CreateJob(ctx, dependsOn("c", "a")) },
			"dependsOn", `dependsOn names job "a", which does not exist`},
		{"a job made a DAEMON beside a new dependency on it",
			func(ctx context.Context) error { _, err := s.UpdateJob(ctx, dependsOn("b", "a")); return err },
			func(ctx context.Context) error {
				j := daemon
				j.JobName = "a"
				_, err := s.UpdateJob(ctx, j)
				return err
			},
			"jobExecutionType", `job "b" depends on this job: a job others depend on must be TRANSIENT`},
		{"an app's deletion beside a new dependency on its job",
			func(ctx context.Context) error {
				must(t, s.CreateApp(ctx, testApp("other")), "CreateApp other")
				j := dependsOn("c", "a")
				j.AppName = "other"
				return s.CreateJob(ctx, j)
			},
			func(ctx context.Context) error { _, err := s.DeleteApp(ctx, "app"); return err },
			"", `job "c" depends on job "a": take it out of "c"'s dependsOn first`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, name := range []string{"c", "b", "a"} { // dependents first
				if err := s.DeleteJob(ctx, name); err != nil && !errors.Is(err, state.ErrNotFound) {
					t.Fatalf("DeleteJob %s: %v", name, err)
				}
			}
			if _, err := s.DeleteApp(ctx, "other"); err != nil && !errors.Is(err, state.ErrNotFound) {
				t.Fatalf("DeleteApp other: %v", err)
			}
			if _, err := s.App(ctx, "app"); errors.Is(err, state.ErrNotFound) {
				must(t, s.CreateApp(ctx, testApp("app")), "CreateApp")
			}
			must(t, s.CreateJob(ctx, testJob("a", "app")), "CreateJob a")
			must(t, s.CreateJob(ctx, testJob("b", "app")), "CreateJob b")
			checks, firstDone := 0, false
			restore := state.SetDependsCheckedHook(func() {
				if checks++; checks == 1 { // second's first check: first is written now
					firstDone = true
					if err := tc.first(ctx); err != nil {
						t.Errorf("the first write: %v", err)
					}
				}
			})
			err := tc.second(ctx)
			restore()
			if !firstDone {
				t.Fatal("the second write checked no dependencies")
			}
			var fe *config.FieldError
			var de *config.DependentError
			switch {
			case tc.wantField != "" && (!errors.As(err, &fe) || fe.Field != tc.wantField || fe.Message != tc.wantMsg):
				t.Fatalf("the second write: %v; want field %s: %s", err, tc.wantField, tc.wantMsg)
			case tc.wantField == "" && (!errors.As(err, &de) || de.Error() != tc.wantMsg):
				t.Fatalf("the second write: %v; want %s", err, tc.wantMsg)
			}
		})
	}
}
