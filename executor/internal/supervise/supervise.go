// Package supervise runs a script under a supervisor process.
//
// A script must not outlive its task, even when the executor dies without a chance to clean up
// (SIGKILL, a crash, the OOM killer). Nothing in the kernel does that for a process group, so
// every script runs under a supervisor: the executor binary re-executed, which
//
//   - is told the executor died by a parent-death signal (SIGTERM) and, as a backstop, by the
//     end of its control socket, whose other end only the executor holds;
//   - runs the script (/bin/sh) in a process group of its own and, on a kill request from the
//     executor, gives that group SIGTERM, then SIGKILL after the grace period;
//   - is a child subreaper (PR_SET_CHILD_SUBREAPER), so that every orphaned descendant of the
//     script — one that left the group with setsid or setpgid, or was double-forked — becomes
//     its child instead of init's;
//   - when the script ends on its own, first writes how it ended to the run's end record
//     (package taskend), so that the end is known even if the executor dies before the agent
//     has its report;
//   - when the script ends, is killed, or the executor dies: SIGKILLs the script's group, then
//     every process left under it, and reaps them all; only then reports how the script ended.
//
// The supervisor sits in a process group of its own, apart from the executor's and the
// script's: an agent that kills the executor's group must not take the supervisor with it
// before it cleaned up, and the group SIGTERM of a kill must not reach it.
//
// Why a process and not the executor itself: a parent-death signal reaches only the direct
// child, and the executor, once dead, can do nothing for the rest. A subreaper executor would
// inherit the orphans, but they would outlive it just the same.
//
// The supervisor is started in this package's init, so it works in every executor that links
// it (the stock one and those built with executor.Main). The package imports only the
// standard library: Go initializes packages in the order of their import paths as far as
// their imports allow, so a re-executed binary becomes a supervisor before the executor's
// heavier packages (the Mesos API's protobufs, HTTP) are initialized, which a shard would
// otherwise pay for at every run. That order is not a promise of running no user code: in an
// SDK executor, a package of the user's that imports only the standard library and sorts
// before this one (github.com/acme/…) is initialized first, in every supervisor too; the
// executor/job package comment tells SDK users to keep init functions free of side effects.
package supervise

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ejcloud/ejcloud/taskend"
)

// arg0 is the argv[0] by which a re-executed executor binary knows it is a supervisor.
const arg0 = "ejcloud-script-supervisor"

// prSetChildSubreaper is PR_SET_CHILD_SUBREAPER of linux/prctl.h (Linux 3.4).
const prSetChildSubreaper = 36

func init() {
	if len(os.Args) > 1 && os.Args[0] == arg0 {
		// Not os.Exit: there is nothing to flush, and in a -race build os.Exit first sleeps a
		// second (GORACE atexit_sleep_ms), which would hold every task's end.
		syscall.Exit(supervise(os.Args[1:]))
	}
}

// Exit is how a script ended: its wait status, or why it could not run.
type Exit struct {
	Status syscall.WaitStatus
	Err    error
}

// Script is a script running under its supervisor, seen from the executor.
type Script struct {
	ctl  *os.File // the executor's end of the control socket
	done chan Exit
}

// Done yields how the script ended, once, after its supervisor has cleaned up and exited.
func (s *Script) Done() <-chan Exit { return s.done }

// Start starts argv (the script's command line) under a supervisor, with dir, env and the
// output files of the script. If endRecord is not empty, the supervisor writes the run's end
// record there when the script ends on its own (taskend).
func Start(argv []string, dir string, env []string, stdout, stderr *os.File, endRecord string) (*Script, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("supervisor control socket: %w", err)
	}
	// Close-on-exec: no other child of the executor holds the supervisor's control socket open,
	// so it ends exactly when the executor does.
	ours, theirs := os.NewFile(uintptr(fds[0]), "supervisor control"), os.NewFile(uintptr(fds[1]), "executor control")
	// Not os/exec, which would make this package wait for a later place in the binary's
	// initialization order (see the package comment). The script reads nothing.
	stdin, err := os.Open(os.DevNull)
	if err != nil {
		ours.Close()
		theirs.Close()
		return nil, fmt.Errorf("the script's stdin: %w", err)
	}
	attr := &os.ProcAttr{
		Dir: dir, Env: env, Files: []*os.File{stdin, stdout, stderr, theirs},
		Sys: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM},
	}
	s := &Script{ctl: ours, done: make(chan Exit, 1)}
	started := make(chan error, 1)
	go func() {
		// The parent-death signal comes when the *thread* that forked the child exits, not the
		// process (prctl(2)); Go ends idle threads at will. So this goroutine holds its thread
		// from the fork until the supervisor is reaped, and never unlocks it: the thread ends
		// with the goroutine, after the supervisor.
		runtime.LockOSThread()
		p, err := os.StartProcess("/proc/self/exe", append([]string{arg0, endRecord}, argv...), attr)
		if err != nil {
			started <- err
			return
		}
		started <- nil
		st, werr := p.Wait()
		if werr == nil {
			werr = errors.New(st.String())
		}
		s.done <- s.outcome(werr)
	}()
	err = <-started
	theirs.Close()
	stdin.Close()
	if err != nil {
		ours.Close()
		return nil, fmt.Errorf("start the script's supervisor: %w", err)
	}
	return s, nil
}

// Terminate asks the supervisor to kill the script: SIGTERM to its group, SIGKILL after grace.
func (s *Script) Terminate(grace time.Duration) {
	fmt.Fprintf(s.ctl, "term %d\n", grace) // fails only if the supervisor is already gone
}

// outcome reads the supervisor's report, written before it exited.
func (s *Script) outcome(werr error) Exit {
	b, _ := io.ReadAll(s.ctl)
	s.ctl.Close()
	verb, arg, _ := strings.Cut(strings.TrimSpace(string(b)), " ")
	switch verb {
	case "exit":
		if n, err := strconv.ParseUint(arg, 10, 32); err == nil {
			return Exit{Status: syscall.WaitStatus(n)}
		}
	case "error":
		return Exit{Err: fmt.Errorf("cannot start the script: %s", arg)}
	}
	return Exit{Err: fmt.Errorf("the script's supervisor ended (%v) without saying how the script ended: %q", werr, b)}
}

// supervise is the supervisor's main: args are the end record's path (or "") and the script's
// command line; fd 3 is the control socket. Its exit code matters to nobody: the report on the
// socket says how the script ended.
func supervise(args []string) int {
	endRecord, argv := args[0], args[1:]
	// The script's shell gets SIGKILL if this process dies (say, SIGKILLed itself); like the
	// executor's, that signal is tied to the forking thread, here the main one, locked.
	runtime.LockOSThread()
	ctl := os.NewFile(3, "executor control")
	syscall.CloseOnExec(3) // the script must not hold the executor's socket
	report := func(format string, args ...any) { fmt.Fprintf(ctl, format+"\n", args...) }
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGCHLD, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		report("error cannot become a child subreaper: %v", errno)
		return 1
	}
	shell, err := syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{
		Env: os.Environ(), Files: []uintptr{0, 1, 2},
		Sys: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	})
	if err != nil {
		report("error %s: %v", argv[0], err)
		return 1
	}
	terms := make(chan time.Duration)
	go readControl(ctl, terms)
	// During a kill, the shell may end at SIGTERM (a non-interactive sh does unless it traps
	// it) while the processes it waited on still clean up: they keep the rest of the grace
	// period (SPEC §6.2), and only what is left of the script when it runs out is SIGKILLed.
	// A later kill may cut the grace (a lease lapse, the agent's shutdown), never lengthen it.
	killing, expired := false, false
	var graceOver <-chan time.Time
	var deadline time.Time
	shellEnded := false
	var shellStatus syscall.WaitStatus
	for {
		select {
		case sig := <-sigs:
			if sig == syscall.SIGCHLD {
				if ws, ended := reap(shell); ended {
					shellEnded, shellStatus = true, ws
					if !killing {
						// A run the executor killed leaves no record (taskend): it did not end
						// on its own, whatever its status.
						recorded(endRecord, ws)
					}
				}
				// Once the grace is over nothing waits: what is left of the script, a process
				// that left the group (setsid, a daemon) included, is SIGKILLed by killTree.
				if shellEnded && (!killing || expired || len(childrenOf(os.Getpid())) == 0) {
					report("exit %d", uint32(killTree(shell, shellStatus)))
					return 0
				}
				continue
			}
			// SIGTERM is the parent-death signal: the executor is gone, and the task with it.
			// (Or someone ends the supervisor: the task is over just the same.) A script that
			// ended just before is still recorded: its SIGCHLD may be queued behind this.
			report("exit %d", uint32(endNow(shell, endRecord, killing, shellEnded, shellStatus)))
			return 0
		case grace, ok := <-terms:
			if !ok { // the executor is gone
				report("exit %d", uint32(endNow(shell, endRecord, killing, shellEnded, shellStatus)))
				return 0
			}
			if !killing {
				killing = true
				syscall.Kill(-shell, syscall.SIGTERM)
			}
			if at := time.Now().Add(grace); !expired && (graceOver == nil || at.Before(deadline)) {
				deadline, graceOver = at, time.After(grace)
			}
		case <-graceOver:
			expired, graceOver = true, nil
			if shellEnded {
				report("exit %d", uint32(killTree(shell, shellStatus)))
				return 0
			}
			syscall.Kill(-shell, syscall.SIGKILL) // its SIGCHLD ends the loop
		}
	}
}

// recorded writes the end record of a shell that ended with ws, if there is a record to write.
// It comes before anything else: from then on the run has happened, whatever
// becomes of this process or the executor.
func recorded(endRecord string, ws syscall.WaitStatus) {
	if endRecord != "" {
		if err := taskend.Write(endRecord, endOf(ws)); err != nil {
			fmt.Fprintln(os.Stderr, "ejcloud supervisor:", err)
		}
	}
}

// endNow ends the script at once (its executor is gone), recording its end if it had ended on
// its own, and returns its status. killing: the executor had asked for the kill (no record);
// ended and status: the shell was already reaped, with status (recorded then if it was to be).
func endNow(shell int, endRecord string, killing, ended bool, status syscall.WaitStatus) syscall.WaitStatus {
	if ended {
		return killTree(shell, status)
	}
	if ws, ended := reap(shell); ended {
		if !killing {
			recorded(endRecord, ws)
		}
		return killTree(shell, ws)
	}
	return killTree(shell, 0)
}

// endOf is the end record of a shell that ended with ws.
func endOf(ws syscall.WaitStatus) taskend.Record {
	if ws.Signaled() {
		return taskend.Record{Code: int(ws.Signal())}
	}
	return taskend.Record{Exited: true, Code: ws.ExitStatus()}
}

// readControl passes on the executor's kill requests (their grace periods) and closes terms
// when the executor's end of the socket closes.
func readControl(ctl io.Reader, terms chan<- time.Duration) {
	defer close(terms)
	sc := bufio.NewScanner(ctl)
	for sc.Scan() {
		if g, ok := strings.CutPrefix(sc.Text(), "term "); ok {
			if ns, err := strconv.ParseInt(g, 10, 64); err == nil {
				terms <- time.Duration(ns)
			}
		}
	}
}

// reap reaps every child that has ended; it reports the shell's status if the shell was one.
func reap(shell int) (syscall.WaitStatus, bool) {
	var status syscall.WaitStatus
	ended := false
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, syscall.WNOHANG, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil || pid <= 0 {
			return status, ended
		}
		if pid == shell {
			status, ended = ws, true
		}
	}
}

// killTree SIGKILLs the script's group, then, round after round, every child of the supervisor
// (the shell, and the orphans it inherits as a subreaper as their parents die), reaping them,
// until it has no child left. It returns the shell's status: status if the shell was already
// reaped, else what it died of.
//
// Once the shell is reaped its pid, the group's id, stays reserved while any process of the
// group lives, so -shell cannot name a stranger's group while there is anyone to kill in it.
func killTree(shell int, status syscall.WaitStatus) syscall.WaitStatus {
	syscall.Kill(-shell, syscall.SIGKILL)
	self := os.Getpid()
	look := false // kill the children, then wait for one; else reap what has ended
	for {
		flags := syscall.WNOHANG
		if look {
			for _, pid := range childrenOf(self) {
				syscall.Kill(pid, syscall.SIGKILL)
			}
			flags = 0
		}
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, flags, nil)
		switch {
		case err == syscall.EINTR:
		case err != nil: // ECHILD: nothing left
			return status
		case pid == 0:
			// Children live and none has ended. Only then are they looked for: a script
			// whose processes all ended with it (the common end) leaves none, and a look
			// through /proc costs milliseconds on a busy host.
			look = true
		default:
			if pid == shell {
				status = ws
			}
			look = false
		}
	}
}

// childrenOf lists the processes whose parent is ppid: from its threads' children lists where
// the kernel keeps them (CONFIG_PROC_CHILDREN), else from every process's stat in /proc, which
// costs milliseconds on a busy host.
func childrenOf(ppid int) []int {
	if kids, ok := threadChildren(ppid); ok {
		return kids
	}
	var out []int
	for _, pid := range numbered("/proc") {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue // ended meanwhile
		}
		// "pid (comm) state ppid ...": comm may hold spaces and parentheses.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) < 2 {
			continue
		}
		if pp, err := strconv.Atoi(f[1]); err == nil && pp == ppid {
			out = append(out, pid)
		}
	}
	return out
}

// threadChildren reads /proc/PID/task/*/children: an orphan a subreaper inherits may be
// listed under any of its threads. ok is false where the kernel has no such lists: then no
// thread has one, not even the main thread (tid = pid), which lives as long as the process.
func threadChildren(pid int) (kids []int, ok bool) {
	tids := numbered(fmt.Sprintf("/proc/%d/task", pid))
	if len(tids) == 0 {
		return nil, false
	}
	for _, tid := range tids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, tid))
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && tid != pid {
				continue // a thread that ended meanwhile
			}
			return nil, false
		}
		for _, f := range strings.Fields(string(b)) {
			if kid, err := strconv.Atoi(f); err == nil {
				kids = append(kids, kid)
			}
		}
	}
	return kids, true
}

// numbered lists the entries of dir named by a number (the processes of /proc, the threads of
// a process's task directory). It does not use path/filepath, which would make this package
// wait for a later place in the binary's initialization order (see the package comment).
func numbered(dir string) []int {
	entries, _ := os.ReadDir(dir)
	var out []int
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	return out
}
