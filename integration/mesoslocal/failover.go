package mesoslocal

import (
	"fmt"
	"net/http"
	"slices"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/sirupsen/logrus"
)

// Master failover. A Mesos master keeps frameworks, tasks and offers in memory only; what
// survives it is the registry (the agents admitted, unreachable or gone) and the agents
// themselves, with their executors, tasks and pending status updates. The master that takes
// over "recovers" the admitted agents from the registry and waits agent_reregister_timeout for
// them to re-register (Master::recover, recoveredSlavesTimeout); each agent that does brings
// its tasks back, and the frameworks of those tasks too (Master::recoverFramework), which
// become connected again when they re-subscribe with their FrameworkID (MESOS.md §2.3).

// FailoverMaster makes a new master take over from the leading one, inside this process.
//
// The old master's state is lost: every framework's event stream breaks off as a dying
// master's connection does (no ERROR, queued events lost), and with the frameworks go their
// offers, filters, failover timers, the master's view of their tasks, the kills it held for
// disconnected agents and the list of removed frameworks. The new master has an id of its own.
// Agents and their executors keep running; their status updates are held and retried, not
// forwarded, until they re-register (MESOS.md §3.4).
//
// Agents that were registered re-register after Options.AgentReregisterDelay, except those
// named in hold: these are cut off from the new master, as a partitioned agent is, until
// HealAgent. An agent that was already partitioned or down comes back when healed or restarted.
// Until an agent re-registers, the new master answers no explicit reconciliation of a task it
// does not know on that agent, nor of one without an agent id (MESOS.md §4.2, row 2), and makes
// no offers of it. Agents not back within Options.AgentReregisterTimeout are marked unreachable
// (MESOS.md §5.1): connected frameworks get FAILURE for the agent, but no task updates, since
// the new master never knew the agent's tasks; reconciliation then answers TASK_UNREACHABLE
// (TASK_LOST without PARTITION_AWARE) for them, and if the agent comes back later its tasks
// come back with "Unreachable agent re-reregistered" updates (MESOS.md §5.4).
//
// As in Mesos, a framework's failover_timeout does not outlive the master that ran it: a
// framework that never re-subscribes to the new master is never removed, and its tasks run on
// (Mesos's high-availability-framework-guide.md, MESOS-4659).
func (c *Cluster) FailoverMaster(hold ...string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("the cluster is closed")
	}
	for _, id := range hold {
		if c.agent(id) == nil {
			return fmt.Errorf("no agent %q", id)
		}
	}
	c.failovers++
	gen := c.failovers
	old := c.masterInfo.ID
	c.masterInfo.ID = newUUID()
	c.log.WithFields(logrus.Fields{"old_master": old, "new_master": c.masterInfo.ID}).Info("master failover")

	for _, f := range c.frameworks {
		f.stopTimers()
		if f.stream != nil {
			f.stream.abort()
			f.stream = nil
		}
	}
	for _, o := range c.offers {
		c.dropOffer(o)
	}
	c.frameworks = map[string]*framework{}
	c.offers = map[string]*offer{}
	c.removed = nil
	c.nextFramework, c.nextOffer = 0, 0

	for _, a := range c.agents {
		a.pendingKills = nil
		for _, t := range []*Timer{&a.pingTimer, &a.reregTimer} {
			if *t != nil {
				(*t).Stop()
				*t = nil
			}
		}
		switch a.state {
		case agentUnreachable, agentGone:
			continue // so in the registry, too
		}
		a.awaitingRereg = true
		if a.state != agentUp {
			continue // cut off or down: it comes back when healed or restarted
		}
		if slices.Contains(hold, a.id) {
			a.state = agentPartitioned
			continue
		}
		a.reregTimer = c.clock.AfterFunc(c.opts.AgentReregisterDelay, func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if !c.closed && c.failovers == gen && a.awaitingRereg && a.state == agentUp {
				c.reregister(a)
			}
		})
	}

	if c.recoveredTimer != nil {
		c.recoveredTimer.Stop()
	}
	timeout := c.opts.AgentReregisterTimeout
	c.recoveredTimer = c.clock.AfterFunc(timeout, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.closed || c.failovers != gen {
			return
		}
		for _, a := range c.agents {
			if a.awaitingRereg {
				c.markUnreachable(a, "did not reregister within "+StoutDuration(timeout)+" after master failover")
			}
		}
	})
	return nil
}

// awaitingRereg reports whether some agent has not re-registered with the master since it
// took over.
func (c *Cluster) awaitingRereg() bool {
	return slices.ContainsFunc(c.agents, func(a *agent) bool { return a.awaitingRereg })
}

// recoverFramework is the master learning of a framework from an agent that runs its tasks,
// after a master failover: known, not connected, until it re-subscribes. Caller holds c.mu.
func (c *Cluster) recoverFramework(id string, info mesos.FrameworkInfo) *framework {
	info.ID = &mesos.FrameworkID{Value: id}
	f := &framework{id: id, info: info, tasks: map[string]*task{}, unreachable: map[string]*task{}}
	c.frameworks[f.id] = f
	c.log.WithFields(logrus.Fields{"framework": f.id, "name": info.Name}).Info("framework recovered from a re-registering agent")
	return f
}

// masterFailover serves POST /local/master/failover[?hold=<agent id>…].
func (c *Cluster) masterFailover(w http.ResponseWriter, r *http.Request) {
	if err := c.FailoverMaster(r.URL.Query()["hold"]...); err != nil {
		plain(w, http.StatusConflict, err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
