package scheduler

import (
	"context"
	"errors"
	"fmt"

	"github.com/ejcloud/ejcloud/api"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/taskid"
)

// Cluster is the leader's view of Mesos for the console's Operations page
// (GET /api/operate/cluster). A master whose state cannot be read leaves the agents out and
// says why: the subscription and framework id are still worth showing then.
func (s *instance) Cluster(ctx context.Context) (api.Cluster, error) {
	ld, err := s.leaderState()
	if err != nil {
		return api.Cluster{}, err
	}
	_, subscribed := s.status()
	c := api.Cluster{Leader: s.advertised, Subscribed: subscribed}
	// A leader that has never subscribed has no FrameworkID yet: that is when the page is
	// needed most, so it answers with the id empty rather than the store's not-found.
	if c.FrameworkID, err = ld.store.FrameworkID(ctx); err != nil && !errors.Is(err, state.ErrNotFound) {
		return c, fmt.Errorf("read the FrameworkID: %w", err)
	}
	if m := ld.master.Load(); m != nil {
		c.Master = *m
	}
	doc, err := ld.masterState(ctx)
	if err != nil {
		c.AgentsError = err.Error()
		return c, nil
	}
	c.Agents = clusterAgents(doc, c.FrameworkID)
	return c, nil
}

// clusterAgents lists the master's agents with this framework's executors on each.
func clusterAgents(doc masterState, fwID string) []api.Agent {
	agents := make([]api.Agent, 0, len(doc.Slaves))
	at := map[string]int{}
	for _, sl := range doc.Slaves {
		a := api.Agent{ID: sl.ID, Hostname: sl.Hostname, Active: sl.Active,
			Total: stateScalars(sl.Resources), Used: stateScalars(sl.UsedResources), Offered: stateScalars(sl.OfferedResources)}
		a.Free = api.Resources{CPUs: a.Total.CPUs - a.Used.CPUs, MemMB: a.Total.MemMB - a.Used.MemMB, DiskMB: a.Total.DiskMB - a.Used.DiskMB}
		at[sl.ID] = len(agents)
		agents = append(agents, a)
	}
	for _, f := range doc.Frameworks {
		if f.ID != fwID {
			continue
		}
		tasks := map[string]int{}
		for _, t := range f.Tasks {
			tasks[t.SlaveID+"/"+t.ExecutorID]++
		}
		for _, e := range f.Executors {
			i, ok := at[e.SlaveID]
			if !ok {
				continue
			}
			ex := api.Executor{ID: e.ExecutorID, Tasks: tasks[e.SlaveID+"/"+e.ExecutorID]}
			if id, err := taskid.ParseExecutor(e.ExecutorID); err == nil {
				ex.AppName = id.AppName
			}
			agents[i].Executors = append(agents[i].Executors, ex)
		}
	}
	return agents
}

// stateScalars reads the scalar resources of a /master/state resource object.
func stateScalars(doc map[string]any) api.Resources {
	f := func(name string) float64 { v, _ := doc[name].(float64); return v }
	return api.Resources{CPUs: f("cpus"), MemMB: f("mem"), DiskMB: f("disk")}
}
