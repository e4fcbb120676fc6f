package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/integration/audit"
	"github.com/ejcloud/ejcloud/internal/await"
)

// procStat is the state and process group of a process; ok is false once it is gone.
func procStat(pid int) (state byte, pgid int, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, false
	}
	// "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 3 {
		return 0, 0, false
	}
	pgid, _ = strconv.Atoi(f[2])
	return f[0][0], pgid, true
}

// running says pid has not ended (a zombie has).
func running(pid int) bool {
	state, _, ok := procStat(pid)
	return ok && state != 'Z'
}

// record is one line of the scripts' own record: "start|child|end <task id> <pid or time>".
type record struct{ what, task, arg string }

func records(file string) []record {
	b, _ := os.ReadFile(file)
	var out []record
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if f := strings.Fields(line); len(f) == 3 {
			out = append(out, record{f[0], f[1], f[2]})
		}
	}
	return out
}

// Issue 13.1: SIGKILL of an executor during a long shard of a failover job. The shard's script
// and the child it left in the background are gone within 1 s — so the failover relaunch is
// the only run of the shard that completes, as the scripts' own records show.
//
// Nothing but the executor's own mechanism (its script supervisor) can have killed them: the
// script runs in a process group apart from the executor's, and mesos-local, when an executor
// dies, kills no process. (executor/supervise_test.go shows the same with no agent at all.)
func TestScriptsDieWithTheirExecutor(t *testing.T) {
	t.Parallel()
	w, s := startWorld(t, 1)
	rec := filepath.Join(w.dir, "records.txt")
	script := `echo "start $EJCLOUD_TASK_ID $$" >> ` + rec + `; sleep 30 & echo "child $EJCLOUD_TASK_ID $!" >> ` + rec +
		`; ` + w.hold("long") + `; echo "end $EJCLOUD_TASK_ID $(date +%s.%N)" >> ` + rec
	s.must(t, 204, "POST", "/api/job/register", w.jobJSON("long", 1, "", true, script))
	s.must(t, 204, "POST", "/api/job/trigger", "long")
	var first []record
	await.True(t, 30*time.Second, "the shard's script and its background child started", func() bool {
		first = records(rec)
		return len(first) == 2
	})
	if first[0].what != "start" || first[1].what != "child" || first[0].task != first[1].task {
		t.Fatalf("records %v; want the start and child of one task", first)
	}
	var pids []int
	for _, r := range first {
		pid, err := strconv.Atoi(r.arg)
		if err != nil {
			t.Fatalf("record %v: %v", r, err)
		}
		pids = append(pids, pid)
	}
	executors := w.mesos.executorPIDs(w.mesos.agents[0])
	if len(executors) != 1 {
		t.Fatalf("executors %v; want one", executors)
	}
	_, execGroup, _ := procStat(executors[0])
	for _, pid := range pids {
		if _, g, ok := procStat(pid); !ok || !running(pid) || g == execGroup {
			t.Fatalf("process %d (group %d, running %v) before the kill; want it running in a group apart from the executor's (%d)", pid, g, running(pid), execGroup)
		}
	}

	if err := syscall.Kill(executors[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	await.True(t, time.Second, "the old script and its background child gone within 1 s of the executor's SIGKILL", func() bool {
		return !running(pids[0]) && !running(pids[1])
	})
	t.Logf("the old script's processes gone %v after the executor's SIGKILL", time.Since(killed).Round(time.Microsecond))

	await.True(t, 30*time.Second, "the shard relaunched", func() bool {
		n := 0
		for _, r := range records(rec) {
			if r.what == "start" {
				n++
			}
		}
		return n == 2
	})
	w.release("long")
	quiet(t, s, "long")
	var ends []string
	relaunch := ""
	for _, r := range records(rec) {
		switch {
		case r.what == "end":
			ends = append(ends, r.task)
		case r.what == "start" && r.task != first[0].task:
			relaunch = r.task
		}
	}
	if len(ends) != 1 || ends[0] != relaunch {
		t.Fatalf("runs that completed: %v; want only the relaunch %s (the killed executor's was %s)", ends, relaunch, first[0].task)
	}
	if rep := mustAudit(t, w, audit.Job{Name: "long", Shards: 1}); rep.Relaunches != 1 {
		t.Fatalf("%d failover relaunches; want 1", rep.Relaunches)
	}
}
