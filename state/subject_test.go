package state

import (
	"errors"
	"testing"
)

func TestOpErrorSubject(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ path, want string }{
		{"/elastic-job-cloud/config/job/c1", `job "c1"`},
		{"/ns/deep/config/app/a.b", `app "a.b"`},
		{"/ns/state/running/j/j@-@0@-@READY@-@S1@-@x", `job "j"`},
		{"/ns/state/failover/j/3", `job "j"`},
		{"/ns/state/disable/app/a", `app "a"`},
		{"/ns/state/disable/job/j", `job "j"`},
		{"/ns/state/ready", "the ready queue"},
		{"/ns/ha/framework_id", ""},
	} {
		if got := (&OpError{Op: "create", Path: tc.path, Err: ErrExists}).Subject(); got != tc.want {
			t.Errorf("Subject of %s = %q; want %q", tc.path, got, tc.want)
		}
	}
	e := &SubjectError{Kind: "job", Name: "c1", Err: ErrNotFound}
	if e.Subject() != `job "c1"` || !errors.Is(e, ErrNotFound) {
		t.Errorf("SubjectError = %q, Is(ErrNotFound) %v", e.Subject(), errors.Is(e, ErrNotFound))
	}
}
