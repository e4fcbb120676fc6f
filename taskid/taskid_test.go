package taskid

import (
	"errors"
	"regexp"
	"testing"
)

func TestParseTaskID(t *testing.T) {
	tests := []struct {
		name, in string
		want     ID
		wantErr  bool
	}{
		{name: "ready task", in: "job_a@-@3@-@READY@-@d8c3-S0@-@6c1f2e5a", want: ID{Meta: Meta{"job_a", 3}, Type: Ready, AgentID: "d8c3-S0", UUID: "6c1f2e5a"}},
		{name: "failover task with dotted job name", in: "a.b-c@-@0@-@FAILOVER@-@S1@-@u", want: ID{Meta: Meta{"a.b-c", 0}, Type: Failover, AgentID: "S1", UUID: "u"}},
		{name: "four parts", in: "job@-@0@-@READY@-@S0", wantErr: true},
		{name: "six parts", in: "job@-@0@-@READY@-@S0@-@u@-@x", wantErr: true},
		{name: "unknown type", in: "job@-@0@-@DAEMON@-@S0@-@u", wantErr: true},
		{name: "negative item", in: "job@-@-1@-@READY@-@S0@-@u", wantErr: true},
		{name: "item with leading zero", in: "job@-@01@-@READY@-@S0@-@u", wantErr: true},
		{name: "item with plus sign", in: "job@-@+1@-@READY@-@S0@-@u", wantErr: true},
		{name: "huge item", in: "job@-@99999999999@-@READY@-@S0@-@u", wantErr: true},
		{name: "empty job", in: "@-@0@-@READY@-@S0@-@u", wantErr: true},
		{name: "empty agent", in: "job@-@0@-@READY@-@@-@u", wantErr: true},
		{name: "empty uuid", in: "job@-@0@-@READY@-@S0@-@", wantErr: true},
		{name: "empty string", in: "", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse(tc.in)
			if tc.wantErr {
				if err == nil || !errors.Is(err, ErrMalformed) {
					t.Fatalf("Parse(%q) = %+v, %v; want an ErrMalformed error", tc.in, got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("Parse(%q) = %+v, %v; want %+v", tc.in, got, err, tc.want)
			}
			if s := got.String(); s != tc.in {
				t.Fatalf("Parse(%q).String() = %q; want the input back", tc.in, s)
			}
		})
	}
}

func TestParseMetaAndExecutor(t *testing.T) {
	m, err := ParseMeta("job@-@12")
	if err != nil || m != (Meta{"job", 12}) || m.String() != "job@-@12" {
		t.Fatalf("ParseMeta(job@-@12) = %+v, %v", m, err)
	}
	for _, bad := range []string{"job", "job@-@", "job@-@x", "@-@1", "a@-@1@-@2"} {
		if _, err := ParseMeta(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseMeta(%q) error = %v; want ErrMalformed", bad, err)
		}
	}
	e, err := ParseExecutor("app@-@S3")
	if err != nil || e != (Executor{"app", "S3"}) || e.String() != "app@-@S3" {
		t.Fatalf("ParseExecutor(app@-@S3) = %+v, %v", e, err)
	}
	for _, bad := range []string{"app", "app@-@", "@-@S3", "a@-@b@-@c"} {
		if _, err := ParseExecutor(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseExecutor(%q) error = %v; want ErrMalformed", bad, err)
		}
	}
}

func TestNewMakesDistinctParseableIDs(t *testing.T) {
	uuidRE := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	a := New(Meta{"job", 2}, Failover, "S0")
	b := New(Meta{"job", 2}, Failover, "S0")
	if a == b {
		t.Fatalf("New returned the same id twice: %v", a)
	}
	if !uuidRE.MatchString(a.UUID) {
		t.Fatalf("New uuid %q is not a version 4 uuid", a.UUID)
	}
	got, err := Parse(a.String())
	if err != nil || got != a {
		t.Fatalf("Parse(New().String()) = %+v, %v; want %+v", got, err, a)
	}
}

// The tasks of one run, relaunches included, share its run id however many they are; other
// runs' ids differ, and every id stays a distinct version 4 uuid.
func TestNewInRunTellsTheRun(t *testing.T) {
	uuidRE := regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	run, other := NewRun(), NewRun()
	if run == other || len(run) != 8 {
		t.Fatalf("NewRun gave %q and %q; want two distinct 8-digit ids", run, other)
	}
	seen := map[string]bool{}
	for item := range 40 {
		id := NewInRun(Meta{"job", item}, Ready, "S0", run)
		relaunch := NewInRun(id.Meta, Failover, "S1", id.Run())
		for _, x := range []ID{id, relaunch} {
			if x.Run() != run || !uuidRE.MatchString(x.UUID) || seen[x.UUID] {
				t.Fatalf("task %v: run %q, uuid %q (seen before: %v); want run %q in a distinct version 4 uuid", x, x.Run(), x.UUID, seen[x.UUID], run)
			}
			seen[x.UUID] = true
		}
	}
	if id := NewInRun(Meta{"job", 0}, Ready, "S0", other); id.Run() != other || RunIn(id.String()) != other {
		t.Fatalf("run %q (%q from the string); want %q", id.Run(), RunIn(id.String()), other)
	}
	// An agent id that begins like a run is not taken for one.
	if id := New(Meta{"job", 0}, Ready, run+"-S1"); RunIn(id.String()) != id.Run() || id.Run() == run {
		t.Fatalf("task %v: run %q from the string, %q parsed; want its uuid's, not the agent's %q", id, RunIn(id.String()), id.Run(), run)
	}
	for _, s := range []string{"", "x", "@-@", "job@-@0@-@READY@-@S0@-@", "0123abcd-0000"} {
		if r := RunIn(s); r != "" {
			t.Errorf("RunIn(%q) = %q; want none", s, r)
		}
	}
	for _, u := range []string{"u", "x-y", "0123456z-0000", "01234567", "ABCDEF01-2345"} {
		if r := (ID{Meta: Meta{"job", 0}, Type: Ready, AgentID: "S0", UUID: u}).Run(); r != "" {
			t.Errorf("uuid %q: run %q; want none", u, r)
		}
	}
}

// FuzzParse checks that parsing never panics and that anything accepted formats back to the
// exact input (so one shard never has two spellings).
func FuzzParse(f *testing.F) {
	for _, s := range []string{"job@-@0@-@READY@-@S0@-@u", "j@-@10@-@FAILOVER@-@a-S1@-@x-y", "@-@", "a@-@1", "日志@-@0@-@READY@-@S@-@u"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if id, err := Parse(s); err == nil {
			if id.String() != s {
				t.Fatalf("Parse(%q).String() = %q", s, id.String())
			}
			if again, err := Parse(id.String()); err != nil || again != id {
				t.Fatalf("round trip of %q: %+v, %v", s, again, err)
			}
			if RunIn(s) != id.Run() {
				t.Fatalf("RunIn(%q) = %q; Parse gives run %q", s, RunIn(s), id.Run())
			}
		} else {
			RunIn(s) // never panics
		}
		if m, err := ParseMeta(s); err == nil && m.String() != s {
			t.Fatalf("ParseMeta(%q).String() = %q", s, m.String())
		}
		if e, err := ParseExecutor(s); err == nil && e.String() != s {
			t.Fatalf("ParseExecutor(%q).String() = %q", s, e.String())
		}
	})
}
