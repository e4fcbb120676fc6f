package scheduler

import (
	"context"
	"fmt"
	"strings"

	"github.com/ejcloud/ejcloud/api"
	"github.com/ejcloud/ejcloud/taskid"
)

// sandboxes finds the app's executor sandboxes as Elastic-Job-Cloud 2.1.5 does: the master's
// state names the agents running the app's executors; each of those agents' /state (at the
// address of its pid) gives their directories. An agent that cannot be read fails the lookup,
// rather than answering a partial list as if it were whole.
func sandboxes(ctx context.Context, reader mesosReader, doc masterState, fwID, app string) ([]api.Sandbox, error) {
	var agents []string
	seen := map[string]bool{}
	for _, f := range doc.Frameworks {
		if f.ID != fwID {
			continue
		}
		for _, e := range f.Executors {
			if ex, err := taskid.ParseExecutor(e.ExecutorID); err == nil && ex.AppName == app && !seen[e.SlaveID] {
				seen[e.SlaveID] = true
				agents = append(agents, e.SlaveID)
			}
		}
	}
	out := []api.Sandbox{}
	for _, id := range agents {
		addr, err := doc.agentAddr(id)
		if err != nil {
			return nil, &api.MesosError{Which: "the Mesos master", Err: err}
		}
		st, err := readAgentState(ctx, reader, addr)
		if err != nil {
			return nil, &api.MesosError{Which: "Mesos agent " + id, Err: err}
		}
		for _, f := range st.Frameworks {
			if f.ID != fwID {
				continue
			}
			for _, e := range f.Executors {
				if ex, err := taskid.ParseExecutor(e.ID); err == nil && ex.AppName == app {
					out = append(out, api.Sandbox{Hostname: st.Hostname, Path: e.Directory})
				}
			}
		}
	}
	return out, nil
}

// agentAddr is where agent id serves its own endpoints: the address of its pid
// (slave(1)@ip:port).
func (doc masterState) agentAddr(id string) (string, error) {
	var pid string
	for _, sl := range doc.Slaves {
		if sl.ID == id {
			pid = sl.PID
		}
	}
	_, addr, ok := strings.Cut(pid, "@")
	if !ok || addr == "" {
		return "", fmt.Errorf("the master's state gives no address for agent %s (pid %q)", id, pid)
	}
	return addr, nil
}
