package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRunReportsThePacking(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.json")
	os.WriteFile(path, []byte(`{"hosts":[{"name":"h","cpus":8,"memoryMB":32768,"count":10}],"tasks":[{"id":"t","cpus":1,"memoryMB":1024,"count":20},{"id":"big","cpus":4,"memoryMB":1024}]}`), 0o644)
	w, err := read(path)
	if err != nil {
		t.Fatal(err)
	}
	rep := run(w, 3, 1, "BINPACK")
	// 24 cpus on 8-cpu hosts: 3 hosts, full; 21 GB of their 96.
	if rep.TasksAssigned != 21 || rep.HostsUsed != 3 || rep.CPUUtilisationOfUsedHosts != 1 || rep.MemUtilisationOfUsedHosts != 21.0/96 || rep.MinMs > rep.MedianMs || rep.MedianMs > rep.MaxMs {
		t.Fatalf("report %+v; want 21 tasks on 3 full hosts", rep)
	}
	if _, err := read(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Fatal("a missing workload file must be an error")
	}
}

// A generated kind packs as the file it dumps to does.
func TestGeneratedKinds(t *testing.T) {
	w, err := generated("small-hosts-overflow")
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Hosts) != 60 || len(w.Tasks) != 300 {
		t.Fatalf("small-hosts-overflow has %d hosts and %d tasks; want 60 and 300", len(w.Hosts), len(w.Tasks))
	}
	rep := run(w, 1, 0, "BINPACK")
	if rep.HostsUsed != 60 || rep.TasksAssigned == 0 || rep.TasksAssigned >= 300 {
		t.Fatalf("report %+v; want some of the 300 tasks on all 60 hosts", rep)
	}
	if _, err := generated("no-such-kind"); err == nil {
		t.Fatal("an unknown kind must be an error")
	}
}
