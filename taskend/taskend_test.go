package taskend

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Record
		ok   bool
	}{
		{"exited 0\n", Record{Exited: true}, true},
		{"exited 3", Record{Exited: true, Code: 3}, true},
		{"signaled 9\n", Record{Code: 9}, true},
		{"", Record{}, false},
		{"exited", Record{}, false},
		{"exited -1", Record{}, false},
		{"exited x", Record{}, false},
		{"finished 0", Record{}, false},
		{"exit 0", Record{}, false}, // the supervisor's report to the executor is not a record
	} {
		got, err := Parse([]byte(tc.in))
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
		if tc.ok && strings.TrimSpace(tc.in) != got.String() {
			t.Errorf("%+v.String() = %q; want %q", got, got.String(), strings.TrimSpace(tc.in))
		}
	}
}

func TestNameIsAFileNameOfItsOwnForEveryTask(t *testing.T) {
	long := strings.Repeat("j", 300) + "@-@0@-@READY@-@agent@-@uuid"
	names := map[string]string{}
	for _, id := range []string{"job@-@0@-@READY@-@S1@-@u1", "job@-@1@-@READY@-@S1@-@u1", "a/b", "..", ".", "", long, long + "x"} {
		n := Name(id)
		if n == "" || n == "." || n == ".." || strings.ContainsAny(n, "/\x00") || len(n) > 255 {
			t.Errorf("Name(%q) = %q: not a file name", id, n)
		}
		if other, dup := names[n]; dup {
			t.Errorf("Name(%q) = Name(%q) = %q", id, other, n)
		}
		names[n] = id
	}
	if got := Path("/sandbox/", "t1"); got != "/sandbox/"+Dir+"/t1" {
		t.Errorf("Path = %q", got)
	}
}

func TestWriteLeavesTheWholeRecordAndNoTemporaryFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "t1")
	if err := Write(path, Record{Exited: true, Code: 3}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if r, err := Parse(b); err != nil || r != (Record{Exited: true, Code: 3}) {
		t.Fatalf("read back %q: %+v, %v", b, r, err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*")); len(m) != 1 {
		t.Fatalf("files left: %v", m)
	}
	if err := Write(filepath.Join(dir, "missing", "t2"), Record{}); err == nil {
		t.Fatal("a record in a missing folder was written")
	}
}
