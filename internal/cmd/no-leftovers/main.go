// Command no-leftovers runs a command (`make test` runs `go test` under it) and fails when any
// process the command started is still alive after it ended: tests must own their world, and
// a script, executor or server left running by one is a bug in that test or in the code under
// it. It makes itself a child subreaper (PR_SET_CHILD_SUBREAPER), so every orphaned
// descendant — an executor's script whose executor died, say — is re-parented to it rather
// than to init and can still be found. After the command ends, survivors get a grace period
// to exit on their own; those still alive are listed, SIGKILLed, and the exit status is 1.
//
//	no-leftovers [-grace 5s] command [args...]
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

func main() {
	grace := flag.Duration("grace", 5*time.Second, "how long survivors may take to exit on their own")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: no-leftovers [-grace 5s] command [args...]")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	os.Exit(run(flag.Args(), *grace))
}

func run(args []string, grace time.Duration) int {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		fmt.Fprintf(os.Stderr, "no-leftovers: cannot become a child subreaper: %v\n", err)
		return 1
	}
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "no-leftovers: %v\n", err)
		return 1
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	go func() {
		for s := range sigs {
			cmd.Process.Signal(s)
		}
	}()
	status := reapUntil(cmd.Process.Pid)
	signal.Stop(sigs)
	close(sigs)

	left := descendants(os.Getpid())
	for deadline := time.Now().Add(grace); len(left) > 0 && time.Now().Before(deadline); left = descendants(os.Getpid()) {
		reapAll()
		time.Sleep(50 * time.Millisecond) // polling the process table: there is nothing to wait on
	}
	if len(left) == 0 {
		return status
	}
	fmt.Fprintf(os.Stderr, "no-leftovers: %d process(es) started by %q outlived it by %v; killing them:\n", len(left), args[0], grace)
	for _, p := range left {
		fmt.Fprintf(os.Stderr, "  pid %d: %s\n", p.pid, p.cmdline)
		syscall.Kill(p.pid, syscall.SIGKILL)
	}
	// SIGKILL is delivered asynchronously: wait (bounded) until they are gone and reaped.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		reapAll()
		if len(descendants(os.Getpid())) == 0 && !hasZombieChildren() {
			break
		}
	}
	return 1
}

// reapUntil waits for every child that exits — orphans re-parented to us included — until
// pid exits, and returns pid's exit status as a shell would.
func reapUntil(pid int) int {
	for {
		var ws syscall.WaitStatus
		got, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return 1
		}
		if got != pid {
			continue
		}
		switch {
		case ws.Exited():
			return ws.ExitStatus()
		case ws.Signaled():
			return 128 + int(ws.Signal())
		}
	}
}

func reapAll() {
	for {
		var ws syscall.WaitStatus
		if got, _ := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil); got <= 0 {
			return
		}
	}
}

// hasZombieChildren says a child of ours has exited but is not reaped yet.
func hasZombieChildren() bool {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		if ppid, state, ok := stat(pid); ok && ppid == os.Getpid() && state == 'Z' {
			return true
		}
	}
	return false
}

type proc struct {
	pid     int
	cmdline string
}

// descendants lists the live (not zombie) processes below root in the process tree.
func descendants(root int) []proc {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	children := map[int][]int{}
	zombie := map[int]bool{}
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil {
			continue
		}
		ppid, state, ok := stat(pid)
		if !ok {
			continue
		}
		children[ppid] = append(children[ppid], pid)
		zombie[pid] = state == 'Z'
	}
	var out []proc
	var walk func(int)
	walk = func(p int) {
		for _, c := range children[p] {
			if !zombie[c] {
				out = append(out, proc{pid: c, cmdline: cmdline(c)})
			}
			walk(c)
		}
	}
	walk(root)
	return out
}

// stat reads a process's parent and state from /proc/<pid>/stat: "pid (comm) S ppid ...";
// comm may hold spaces and parentheses, so parse from the last ')'.
func stat(pid int) (ppid int, state byte, ok bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, 0, false
	}
	s := string(b)
	i := len(s) - 1
	for i >= 0 && s[i] != ')' {
		i--
	}
	if i < 0 {
		return 0, 0, false
	}
	if _, err := fmt.Sscanf(s[i+1:], " %c %d", &state, &ppid); err != nil {
		return 0, 0, false
	}
	return ppid, state, true
}

func cmdline(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	for i := range b {
		if b[i] == 0 {
			b[i] = ' '
		}
	}
	return string(b)
}
