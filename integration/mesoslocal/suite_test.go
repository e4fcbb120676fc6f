package mesoslocal_test

import (
	"flag"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestWholeSuiteUnderProtobuf runs every test of this package again with schedulers and
// executors speaking protobuf (MESOS.md §9 item 1: the whole suite once per codec).
func TestWholeSuiteUnderProtobuf(t *testing.T) {
	t.Parallel()
	if codec != "application/json" {
		t.Fatalf("this test starts the protobuf run and must not run inside it (codec %s)", codec)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// As parallel as this run (-parallel): with more than one, the two codecs' runs overlap,
	// each its tests side by side (they mostly wait on processes and timers).
	cmd := exec.Command(exe, "-test.count=1", "-test.timeout=8m", "-test.skip=^TestWholeSuiteUnderProtobuf$",
		"-test.parallel="+flag.Lookup("test.parallel").Value.String())
	cmd.Env = append(os.Environ(), "MESOSLOCAL_TEST_CODEC=application/x-protobuf")
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "PASS") {
		t.Fatalf("the suite under protobuf failed: %v\n%s", err, out)
	}
}
