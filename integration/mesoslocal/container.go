package mesoslocal

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// killSession SIGKILLs every process left in session sid: what the POSIX launcher of Mesos
// does when it destroys a container (os::killtree with sessions). The pass repeats until it
// finds none, since a process may fork while the pass runs.
func killSession(sid int) {
	for pass := 0; pass < 10; pass++ {
		killed := false
		stats, _ := filepath.Glob("/proc/[0-9]*/stat")
		for _, p := range stats {
			b, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			// pid (comm) state ppid pgrp session ...: comm may hold spaces and parentheses.
			i := bytes.LastIndexByte(b, ')')
			if i < 0 {
				continue
			}
			f := bytes.Fields(b[i+1:])
			if len(f) < 4 {
				continue
			}
			if s, _ := strconv.Atoi(string(f[3])); s != sid {
				continue
			}
			pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(p)))
			if f[0][0] != 'Z' && syscall.Kill(pid, syscall.SIGKILL) == nil {
				killed = true
			}
		}
		if !killed {
			return
		}
	}
}
