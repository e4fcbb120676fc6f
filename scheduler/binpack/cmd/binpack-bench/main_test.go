package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRunReportsThePacking(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.json")
	os.WriteFile(path, []byte(`{"hosts":[{"name":"h","cpus":8,"memoryMB":32768,"count":10}],"tasks":[{"id":"t","cpus":1,"memoryMB":1024,"count":20},{"id":"big","cpus":4,"memoryMB":1024}]}`), 0o644)
	rep, err := run(path, 3, 1, "BINPACK")
	if err != nil {
		t.Fatal(err)
	}
	// 24 cpus on 8-cpu hosts: 3 hosts, full.
	if rep.TasksAssigned != 21 || rep.HostsUsed != 3 || rep.CPUUtilisationOfUsedHosts != 1 || rep.MinMs > rep.MedianMs || rep.MedianMs > rep.MaxMs {
		t.Fatalf("report %+v; want 21 tasks on 3 full hosts", rep)
	}
	if _, err := run(filepath.Join(t.TempDir(), "missing.json"), 1, 0, "BINPACK"); err == nil {
		t.Fatal("a missing workload file must be an error")
	}
}
