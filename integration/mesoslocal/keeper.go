package mesoslocal

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/sirupsen/logrus"
)

// A SIGKILLed mesos-local takes its agents with it, but not its containers: its executors get
// a parent-death signal, and the rest of each container (the processes an executor started,
// such as a job's script still running) would live on with nobody to end it. Its successor
// (a new mesos-local, or another master taking over in ZooKeeper) knows nothing of them, so a
// framework would relaunch their tasks beside them. In real Mesos the agents outlive the master
// and report their tasks; here they cannot, so their containers must end with them.
//
// The keeper does that: this binary re-executed, with a parent-death signal of its own and a
// pipe whose other end only mesos-local holds. mesos-local tells it every container (session)
// that starts and ends; when mesos-local dies — the signal, or the pipe's end — the keeper
// ends every container still listed, as container.end does, and exits. The re-execution is
// caught in init, so it works in every binary that links this package (mesos-local and tests).

const keeperArg0 = "mesos-local-container-keeper"

func init() {
	if len(os.Args) == 1 && os.Args[0] == keeperArg0 {
		os.Exit(keep(os.NewFile(3, "mesos-local's end")))
	}
}

// keeper is mesos-local's side of its keeper process.
type keeper struct {
	mu   sync.Mutex // serializes writes to w
	w    *os.File
	done chan struct{} // closed when the keeper process has been reaped
}

// startKeeper starts the keeper, or returns nil (with a warning) when it cannot: containers
// then end only with a clean shutdown, as before.
func startKeeper(log logrus.FieldLogger) *keeper {
	r, w, err := os.Pipe()
	if err != nil {
		log.WithError(err).Warn("no container keeper: a SIGKILLed mesos-local will leave its containers' processes running")
		return nil
	}
	k := &keeper{w: w, done: make(chan struct{})}
	cmd := &exec.Cmd{Path: "/proc/self/exe", Args: []string{keeperArg0}, ExtraFiles: []*os.File{r},
		// Its own process group: a Ctrl-C meant for mesos-local must not end it first.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}}
	started := make(chan error, 1)
	go func() {
		defer close(k.done)
		// The parent-death signal comes when the thread that forked the child exits (prctl(2)):
		// hold this one until the keeper is reaped. Then let it go back to the runtime: a
		// goroutine that ends locked takes its thread with it, and that thread may also have
		// forked other children with a parent-death signal (another Cluster's executors, a
		// test's ZooKeeper), which would then be killed.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		cmd.Wait()
	}()
	err = <-started
	r.Close()
	if err != nil {
		w.Close()
		log.WithError(err).Warn("no container keeper: a SIGKILLed mesos-local will leave its containers' processes running")
		return nil
	}
	return k
}

func (k *keeper) tell(sign byte, sid int) {
	if k == nil || sid <= 0 {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	fmt.Fprintf(k.w, "%c%d\n", sign, sid)
}

// watch lists a container's session; forget takes it off once the container has ended.
func (k *keeper) watch(sid int)  { k.tell('+', sid) }
func (k *keeper) forget(sid int) { k.tell('-', sid) }

// close ends the keeper after a clean shutdown (every container has ended).
func (k *keeper) close() {
	if k == nil {
		return
	}
	k.mu.Lock()
	k.w.Close()
	k.mu.Unlock()
	select {
	case <-k.done:
	case <-time.After(containerTeardown):
	}
}

// keep is the keeper process: it follows the sessions mesos-local lists on r and, when
// mesos-local is gone, ends those still listed.
func keep(r *os.File) int {
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	var mu sync.Mutex
	sessions := map[int]bool{}
	eof := make(chan struct{})
	go func() {
		defer close(eof)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			line := sc.Text()
			if len(line) < 2 {
				continue
			}
			sid, err := strconv.Atoi(line[1:])
			if err != nil {
				continue
			}
			mu.Lock()
			if line[0] == '+' {
				sessions[sid] = true
			} else {
				delete(sessions, sid)
			}
			mu.Unlock()
		}
	}()
	select {
	case <-eof:
	case <-sigs:
		// mesos-local died (or someone ends the keeper): its last words may still be in the
		// pipe, whose end follows at once if it is gone.
		select {
		case <-eof:
		case <-time.After(time.Second):
		}
	}
	mu.Lock()
	defer mu.Unlock()
	deadline := time.Now().Add(containerTeardown)
	for sid := range sessions {
		ct := &container{sid: sid, fd: -1}
		if err := ct.end(deadline); err != nil {
			fmt.Fprintln(os.Stderr, "mesos-local container keeper:", err)
		}
	}
	return 0
}
