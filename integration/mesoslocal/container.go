package mesoslocal

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
)

// Containers, as the Mesos containerizer has them: an executor and every process it starts,
// directly or not, belong to its container, and when the container ends (the executor exits
// or is killed, its agent shuts down or is restarted without recovering it, mesos-local
// closes) every one of those processes is killed. A job's script that its executor started in
// a process group of its own, or a child the script left in the background ignoring SIGTERM,
// does not outlive its container, so a shard relaunched elsewhere never runs beside its
// predecessor.
//
// Every container is a session: the executor is started with setsid(2), and its descendants
// stay in its session unless they call setsid themselves (a daemonizing double fork). Ending
// the container SIGKILLs every live process whose session id is the executor's pid, scanning
// /proc again until none is left, since processes may fork while they are being killed. The
// kernel does not reuse a pid while a process still has it as its session id, so the scan
// cannot hit a stranger. This works everywhere, unprivileged included; it is what Mesos's
// POSIX launcher does.
//
// Where the cgroup v2 hierarchy is writable (as root on most hosts), each container is also a
// cgroup, created under this mesos-local's own cgroup, and the executor is cloned straight into
// it (CLONE_INTO_CGROUP): ending the container kills the cgroup too (cgroup.kill), which also
// catches processes that left the session with setsid. This is what Mesos's Linux launcher
// does with its freezer cgroups.
//
// If mesos-local itself is SIGKILLed, its executors die with it (PR_SET_PDEATHSIG), and its
// container keeper (keeper.go) ends the rest of their sessions; in cgroup mode the next
// mesos-local started on the host also kills the cgroups left by dead instances.

// containerTeardown bounds how long ending a container may take: a process stuck in an
// uninterruptible sleep cannot be killed, and the executor's exit must still be reported.
const containerTeardown = 10 * time.Second

// containment creates a Cluster's containers.
type containment struct {
	cgroups string // this Cluster's cgroup v2 directory; "" when containers are sessions only
	log     logrus.FieldLogger
	keeper  *keeper // ends the containers if mesos-local is SIGKILLed (keeper.go); nil if none
}

// Containment modes for Options.Containment.
const (
	ContainAuto    = "auto"    // cgroups where the hierarchy is writable, else sessions
	ContainSession = "session" // sessions only
	ContainCgroup  = "cgroup"  // cgroups (and sessions); New fails when cgroups are not available
)

func newContainment(mode, name string, log logrus.FieldLogger) (*containment, error) {
	cz := &containment{log: log, keeper: startKeeper(log)}
	if mode == ContainSession {
		return cz, nil
	}
	dir, err := cgroupDir(name)
	switch {
	case err == nil:
		cz.cgroups = dir
		log.WithField("cgroup", dir).Info("containers are cgroups and sessions")
	case mode == ContainCgroup:
		cz.keeper.close()
		return nil, fmt.Errorf("mesoslocal: cgroup containment: %w", err)
	default:
		log.WithError(err).Info("containers are sessions: no writable cgroup v2 hierarchy")
	}
	return cz, nil
}

// cgroupDir creates this Cluster's cgroup under the cgroup mesos-local runs in, after killing
// what dead mesos-local instances left there.
func cgroupDir(name string) (string, error) {
	mount, err := cgroup2Mount()
	if err != nil {
		return "", err
	}
	own, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	var path string
	for _, line := range strings.Split(string(own), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			path = p
		}
	}
	if path == "" {
		return "", errors.New("this process is in no cgroup v2 cgroup")
	}
	parent := filepath.Join(mount, path)
	if _, err := os.Stat(filepath.Join(parent, "cgroup.kill")); err != nil {
		return "", fmt.Errorf("no cgroup.kill (Linux 5.14 or later is needed): %w", err)
	}
	reapStaleCgroups(parent)
	dir := filepath.Join(parent, fmt.Sprintf("mesos-local-%d-%s", os.Getpid(), name))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", err
	}
	return dir, nil
}

// cgroup2Mount finds where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup, or
// /sys/fs/cgroup/unified on a hybrid host).
func cgroup2Mount() (string, error) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f := strings.Fields(pre)
		if ok && len(f) >= 5 && strings.HasPrefix(post, "cgroup2 ") {
			return f[4], nil
		}
	}
	return "", errors.New("no cgroup2 file system mounted")
}

// reapStaleCgroups kills and removes the container cgroups of mesos-local instances that are
// gone (SIGKILLed: nothing ran their teardown).
func reapStaleCgroups(parent string) {
	entries, _ := os.ReadDir(parent)
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "mesos-local-")
		if !ok || !e.IsDir() {
			continue
		}
		pidText, _, _ := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidText)
		if err != nil || pid == os.Getpid() || !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
			continue
		}
		dir := filepath.Join(parent, e.Name())
		subs, _ := os.ReadDir(dir)
		for _, s := range subs {
			if s.IsDir() {
				(&container{cgroup: filepath.Join(dir, s.Name())}).end(time.Now().Add(containerTeardown))
			}
		}
		os.Remove(dir)
	}
}

// close removes the Cluster's cgroup, and ends the keeper, once every container has ended.
func (cz *containment) close() {
	cz.keeper.close()
	if cz.cgroups != "" {
		if err := os.Remove(cz.cgroups); err != nil {
			cz.log.WithError(err).Warn("cannot remove mesos-local's cgroup")
		}
	}
}

// container is one executor's container: its session and, in cgroup mode, its cgroup.
type container struct {
	sid    int    // the executor's pid, which leads the session
	cgroup string // "" in session mode
	fd     int    // the cgroup directory, open until the executor is started
	keeper *keeper
}

// prepare makes the container of the executor cmd is about to start: its SysProcAttr puts the
// executor in a new session (and into the container's cgroup), killed if mesos-local dies.
// Call started after cmd.Start, whatever it returned.
func (cz *containment) prepare(attr *syscall.SysProcAttr, id string) *container {
	ct := &container{fd: -1}
	attr.Setsid, attr.Setpgid, attr.Pdeathsig = true, false, syscall.SIGKILL
	if cz.cgroups == "" {
		return ct
	}
	dir := filepath.Join(cz.cgroups, id)
	if err := os.Mkdir(dir, 0o755); err != nil {
		cz.log.WithError(err).Warn("cannot create the container's cgroup; it is a session only")
		return ct
	}
	fd, err := syscall.Open(dir, syscall.O_DIRECTORY|syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		os.Remove(dir)
		cz.log.WithError(err).Warn("cannot open the container's cgroup; it is a session only")
		return ct
	}
	ct.cgroup, ct.fd = dir, fd
	attr.UseCgroupFD, attr.CgroupFD = true, fd
	return ct
}

// started records the executor's pid (0 if it did not start).
func (ct *container) started(pid int) {
	if ct.fd >= 0 {
		syscall.Close(ct.fd)
		ct.fd = -1
	}
	ct.sid = pid
	if pid == 0 && ct.cgroup != "" {
		os.Remove(ct.cgroup)
		ct.cgroup = ""
	}
}

// kill sends SIGKILL to every live process of the container, once, and reports how many
// there were. It is quick enough to be called with the cluster locked.
func (ct *container) kill() int {
	n := 0
	if ct.cgroup != "" {
		for _, pid := range cgroupPIDs(ct.cgroup) {
			if st, ok := readStat(pid); ok && st.live() {
				n++
			}
		}
		if n > 0 {
			if err := os.WriteFile(filepath.Join(ct.cgroup, "cgroup.kill"), []byte("1"), 0); err != nil {
				for _, pid := range cgroupPIDs(ct.cgroup) {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
	}
	if ct.sid > 0 {
		for _, pid := range procPIDs() {
			if st, ok := readStat(pid); ok && st.session == ct.sid && st.live() {
				syscall.Kill(pid, syscall.SIGKILL)
				n++
			}
		}
	}
	return n
}

// end kills the container until none of its processes is left, then removes its cgroup. It
// polls, so it must not be called with the cluster locked.
func (ct *container) end(deadline time.Time) error {
	for ct.kill() > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("processes of session %d / cgroup %q still alive after SIGKILL", ct.sid, ct.cgroup)
		}
		time.Sleep(5 * time.Millisecond) // the killed processes are being torn down by the kernel
	}
	for ct.cgroup != "" {
		// rmdir fails with EBUSY until the kernel has finished the last exit.
		if err := os.Remove(ct.cgroup); err == nil || errors.Is(err, os.ErrNotExist) {
			break
		} else if time.Now().After(deadline) {
			return fmt.Errorf("remove the container's cgroup: %w", err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return nil
}

// procStat is what /proc/<pid>/stat says of a process that the containers need.
type procStat struct {
	state   byte
	session int
}

// live is false for a zombie (dead, waiting for its parent) or a process being reaped.
func (s procStat) live() bool { return s.state != 'Z' && s.state != 'X' && s.state != 'x' }

// readStat parses /proc/<pid>/stat: "pid (comm) state ppid pgrp session …"; comm may hold
// spaces and parentheses, so the fields are counted from the last ')'.
func readStat(pid int) (procStat, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procStat{}, false
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 4 || len(f[0]) != 1 {
		return procStat{}, false
	}
	sid, err := strconv.Atoi(f[3])
	if err != nil {
		return procStat{}, false
	}
	return procStat{state: f[0][0], session: sid}, true
}

func procPIDs() []int {
	d, err := os.Open("/proc")
	if err != nil {
		return nil
	}
	defer d.Close()
	names, _ := d.Readdirnames(-1)
	pids := make([]int, 0, len(names))
	for _, n := range names {
		if pid, err := strconv.Atoi(n); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

func cgroupPIDs(dir string) []int {
	b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// start starts the process build makes (its stdout and stderr set) as the executor of a new
// container. If the kernel refuses to clone it into its cgroup, it starts it again in a
// session-only container.
func (cz *containment) start(id string, build func() (*exec.Cmd, error)) (*exec.Cmd, *container, error) {
	cmd, err := build()
	if err != nil {
		return nil, nil, err
	}
	attr := &syscall.SysProcAttr{}
	ct := cz.prepare(attr, id)
	cmd.SysProcAttr = attr
	err = cmd.Start()
	if err != nil && ct.cgroup != "" {
		ct.started(0)
		cz.log.WithError(err).Warn("cannot start the executor in its cgroup; its container is a session only")
		if cmd, err = build(); err != nil {
			return nil, nil, err
		}
		ct = &container{fd: -1}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
		err = cmd.Start()
	}
	if err != nil {
		ct.started(0)
		return nil, nil, err
	}
	ct.started(cmd.Process.Pid)
	ct.keeper = cz.keeper
	cz.keeper.watch(ct.sid)
	return cmd, ct, nil
}

// wait waits for the executor, then ends its container: its exit is reported only once
// nothing of it is left, as the containerizer reports an executor's end only after destroying
// its container.
func (ct *container) wait(cmd *exec.Cmd, log logrus.FieldLogger) int32 {
	cmd.Wait()
	if err := ct.end(time.Now().Add(containerTeardown)); err != nil {
		log.WithError(err).Warn("container not fully destroyed")
	}
	ct.keeper.forget(ct.sid)
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
		return int32(ws) // the raw wait(2) status word, as Mesos reports it
	}
	return -1
}
