package lite_test

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// service is a lite-service process.
type service struct {
	cmd    *exec.Cmd
	id     string
	record string
	exited chan struct{}
}

func buildService(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "lite-service")
	if out, err := exec.Command("go", "build", "-o", bin, "./examples/lite-service").CombinedOutput(); err != nil {
		t.Fatalf("build lite-service: %v\n%s", err, out)
	}
	return bin
}

func startService(t *testing.T, bin string, env statetest.Env, name string, args ...string) *service {
	t.Helper()
	record := filepath.Join(t.TempDir(), name+".log")
	cmd := exec.Command(bin, append([]string{"--zk", env.Servers[0], "--namespace", env.Namespace,
		"--ip", "127.0.0.1", "--session-timeout", sessionTimeout.String(), "--record", record}, args...)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if os.Getenv("LITE_TEST_LOG") == "" {
		cmd.Stdout, cmd.Stderr = nil, nil
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start lite-service: %v", err)
	}
	s := &service{cmd: cmd, id: fmt.Sprintf("127.0.0.1@-@%d", cmd.Process.Pid), record: record, exited: make(chan struct{})}
	go func() {
		defer close(s.exited)
		cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-s.exited
	})
	return s
}

// runs reads the service's record: "start|done item fire instance" lines.
func (s *service) runs(t *testing.T) []run {
	t.Helper()
	f, err := os.Open(s.record)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("read the record: %v", err)
	}
	defer f.Close()
	var out []run
	open := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 4 {
			continue // a line cut by the kill
		}
		item, _ := strconv.Atoi(fields[1])
		fire, _ := strconv.ParseInt(fields[2], 10, 64)
		key := fields[1] + " " + fields[2]
		switch fields[0] {
		case "start":
			open[key] = len(out)
			out = append(out, run{inst: fields[3], item: item, fire: fire})
		case "done":
			if i, ok := open[key]; ok {
				out[i].done = true
			}
		}
	}
	return out
}

func allRuns(t *testing.T, services ...*service) []run {
	var out []run
	for _, s := range services {
		out = append(out, s.runs(t)...)
	}
	return out
}

// Real processes with their own sessions: three share nine items as AVG_ALLOCATION does, a
// process killed (SIGKILL) in the middle of a run loses its items to the others within one
// session timeout, and no item finishes twice for one fire.
func TestProcessesShareItemsAndFailOverAKilledOne(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	tr := inspect(t, env)
	bin := buildService(t)
	args := []string{"--job", "proc", "--cron", "*/3 * * * * ?", "--items", "9", "--work", "800ms"}
	var svcs []*service
	for i := range 3 {
		svcs = append(svcs, startService(t, bin, env, fmt.Sprint("s", i), args...))
	}
	ids := []string{svcs[0].id, svcs[1].id, svcs[2].id}
	sort.Sort(sort.Reverse(sort.StringSlice(ids)))
	want := map[string][]int{ids[0]: {0, 1, 2}, ids[1]: {3, 4, 5}, ids[2]: {6, 7, 8}}
	await.True(t, 15*time.Second, "the AVG_ALLOCATION sharding over three processes", func() bool {
		return reflect.DeepEqual(assignment(t, tr, "proc", 9), want)
	})
	sharded := time.Now().UnixMilli()
	victim, survivors := svcs[2], svcs[:2]
	var fire int64
	await.True(t, 8*time.Second, "the victim runs its items", func() bool {
		for _, x := range victim.runs(t) {
			if x.fire > sharded && !x.done {
				fire = x.fire
				return true
			}
		}
		return false
	})
	victim.cmd.Process.Signal(syscall.SIGKILL)
	killed := time.Now()
	<-victim.exited
	interrupted := map[int]bool{}
	for _, x := range victim.runs(t) {
		if x.fire == fire && !x.done {
			interrupted[x.item] = true
		}
	}
	if len(interrupted) == 0 {
		t.Fatal("the victim finished its items before the kill")
	}
	await.True(t, sessionTimeout+time.Second, "the survivors take the killed process's items", func() bool {
		taken := map[int]bool{}
		for _, x := range allRuns(t, survivors...) {
			if x.fire == fire && interrupted[x.item] {
				taken[x.item] = true
			}
		}
		return len(taken) == len(interrupted)
	})
	t.Logf("the survivors took %d interrupted items %v after the kill", len(interrupted), time.Since(killed).Round(time.Millisecond))
	await.True(t, 12*time.Second, "two more fires on the survivors", func() bool {
		byFire := doneByFire(allRuns(t, survivors...))
		return len(byFire[fire+3000]) == 9 && len(byFire[fire+6000]) == 9
	})
	for _, s := range survivors {
		s.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, s := range survivors {
		select {
		case <-s.exited:
			if code := s.cmd.ProcessState.ExitCode(); code != 0 {
				t.Errorf("%s exited with %d after SIGTERM", s.id, code)
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s did not exit within 10s of SIGTERM", s.id)
		}
	}
	checkOncePerFire(t, allRuns(t, svcs...), 9, fire, fire+6000)
}
