package state_test

import (
	"maps"
	"testing"
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
