package state_test

import (
	"maps"
	"testing"
	"time"
)

// The ExecutorInfos a leader records come back to the next; a record is replaced by a later
// one of the same executor and goes once forgotten.
func TestExecutorsAreRecordedAndForgotten(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	must(t, s.SaveExecutors(ctx, map[string][]byte{"app@-@S0": []byte("a0"), "app@-@S1": []byte("a1")}), "SaveExecutors")
	must(t, s.SaveExecutors(ctx, map[string][]byte{"app@-@S0": []byte("a0 again")}), "SaveExecutors again")
	got, err := s.Executors(ctx)
	must(t, err, "Executors")
	if want := map[string][]byte{"app@-@S0": []byte("a0 again"), "app@-@S1": []byte("a1")}; !maps.EqualFunc(got, want, func(a, b []byte) bool { return string(a) == string(b) }) {
		t.Fatalf("recorded %q; want %q", got, want)
	}
	must(t, s.ForgetExecutors(ctx, "app@-@S0", "app@-@S9"), "ForgetExecutors")
	if got, err := s.Executors(ctx); err != nil || len(got) != 1 || string(got["app@-@S1"]) != "a1" {
		t.Fatalf("recorded %q (%v) after forgetting S0's; want S1's only", got, err)
	}
}

// An agent's unlisted mark keeps the time it was first made: marking it again changes nothing,
// so that the records' clock never starts over; it goes once unmarked.
func TestUnlistedMarksKeepTheirFirstTime(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	t0 := time.Date(2026, 11, 28, 10, 0, 0, 123456789, time.UTC)
	must(t, s.MarkUnlisted(ctx, map[string]time.Time{"S0": t0, "S1": t0.Add(time.Hour)}), "MarkUnlisted")
	must(t, s.MarkUnlisted(ctx, map[string]time.Time{"S0": t0.Add(2 * time.Hour)}), "MarkUnlisted again")
	got, err := s.UnlistedAgents(ctx)
	must(t, err, "UnlistedAgents")
	if want := map[string]time.Time{"S0": t0, "S1": t0.Add(time.Hour)}; !maps.EqualFunc(got, want, time.Time.Equal) {
		t.Fatalf("marks %v; want %v", got, want)
	}
	must(t, s.UnmarkUnlisted(ctx, "S0", "S9"), "UnmarkUnlisted")
	if got, err := s.UnlistedAgents(ctx); err != nil || len(got) != 1 || !got["S1"].Equal(t0.Add(time.Hour)) {
		t.Fatalf("marks %v (%v) after unmarking S0; want S1's only", got, err)
	}
}
