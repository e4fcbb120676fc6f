package mesoslocal

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"syscall"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/sirupsen/logrus"
)

// Fault injection (MESOS.md §5): what Mesos does when an agent is partitioned, comes back,
// dies, restarts or is marked gone by an operator. Each method answers an error for an
// unknown agent or an action its state does not allow.

// PartitionAgent breaks the agent's link to the master. The agent keeps running its
// executors; the master rescinds its offers at once, fails the tasks of non-checkpointing
// frameworks there, and marks it unreachable after the ping timeouts.
func (c *Cluster) PartitionAgent(id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.agent(id)
	switch {
	case a == nil:
		return fmt.Errorf("no agent %q", id)
	case a.state != agentUp:
		return fmt.Errorf("agent %s is %s", id, a.state)
	}
	a.state = agentPartitioned
	c.agentDisconnected(a)
	return nil
}

// agentDisconnected is the master noticing a broken agent socket (MESOS.md §5.2).
func (c *Cluster) agentDisconnected(a *agent) {
	if a.awaitingRereg {
		// A master that took over has no link to the agent to lose yet: its agent
		// re-registration timeout covers the agent instead of the ping timeouts.
		return
	}
	a.log.Info("agent disconnected from the master")
	c.rescindAgentOffers(a)
	for _, f := range c.frameworks {
		if f.checkpoint() {
			continue
		}
		for _, id := range sortedKeys(f.tasks) {
			if t := f.tasks[id]; t.agent == a {
				delete(f.tasks, id)
				c.masterUpdate(f, id, a.id, t.executorID, mesos.TASK_LOST, mesos.REASON_AGENT_DISCONNECTED,
					"Agent "+a.hostname+" disconnected", nil)
			}
		}
		for _, e := range a.executors { // killed by the agent when it comes back
			if e.frameworkID == f.id {
				e.orphaned = true
			}
		}
	}
	if a.pingTimer != nil {
		a.pingTimer.Stop()
	}
	d := c.opts.AgentPingTimeout * time.Duration(c.opts.MaxAgentPingTimeouts)
	a.pingTimer = c.clock.AfterFunc(d, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if (a.state == agentPartitioned || a.state == agentDown) && !a.awaitingRereg {
			c.markUnreachable(a, "health check timed out")
		}
	})
}

// markUnreachable is the master giving up on an agent (MESOS.md §5.3); why is the message of
// the updates of its tasks.
func (c *Cluster) markUnreachable(a *agent, why string) {
	a.log.WithField("why", why).Info("agent marked unreachable")
	a.state = agentUnreachable
	a.awaitingRereg = false
	a.unreachableAt = c.now()
	// Real Mesos removes the agent's record, and with it the kills it held for the agent
	// while it was disconnected: a KILL is remembered across a disconnection, not across
	// unreachability.
	a.pendingKills = nil
	at := a.unreachableAt
	c.rescindAgentOffers(a)
	for _, fid := range sortedKeys(c.frameworks) {
		f := c.frameworks[fid]
		for _, id := range sortedKeys(f.tasks) {
			t := f.tasks[id]
			if t.agent != a {
				continue
			}
			delete(f.tasks, id)
			f.unreachable[id] = t
			t.unreachedAt = at
			state := lostOr(f.partitionAware(), mesos.TASK_UNREACHABLE)
			t.state = state
			// Master::__removeSlave gives every update the unreachable time, the TASK_LOST of a
			// framework that is not partition-aware too.
			c.masterUpdate(f, id, a.id, t.executorID, state, mesos.REASON_AGENT_REMOVED, why,
				func(s *mesos.TaskStatus) { s.UnreachableTime = &mesos.TimeInfo{Nanoseconds: int64(at * 1e9)} })
		}
		f.send(failureEvent(a.id, "", 0))
	}
}

// HealAgent restores the link: the agent re-registers (MESOS.md §5.4).
func (c *Cluster) HealAgent(id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.agent(id)
	switch {
	case a == nil:
		return fmt.Errorf("no agent %q", id)
	case a.state == agentGone:
		a.killAll()
		return fmt.Errorf("agent %s was marked gone; its re-registration is refused and it shuts down", id)
	case a.state == agentDown:
		return fmt.Errorf("agent %s is down; restart it instead", id)
	case a.state == agentUp && !a.awaitingRereg:
		return nil
	}
	c.reregister(a) // a held or cut-off agent comes back to a master that took over, too
	return nil
}

// reregister is an agent registering again with the master, reporting the tasks it has: tasks
// of frameworks the master has removed are shut down on the agent; tasks it no longer has but
// the master had as unreachable are dropped; the others are (again) the master's, with their
// state on the agent. An agent that was unreachable brings its tasks back with an update each
// (MESOS.md §5.4); one a master that took over has been waiting for brings them back quietly
// (Mesos's Master::__reregisterSlave sends updates for agents it did not recover only). The
// frameworks the master does not know are recovered from the agent's FrameworkInfo; then
// pending kills are re-issued and held updates flow again.
func (c *Cluster) reregister(a *agent) {
	wasUnreachable := a.state == agentUnreachable
	rejoined := a.awaitingRereg
	a.state = agentUp
	a.awaitingRereg = false
	for _, t := range []*Timer{&a.pingTimer, &a.reregTimer} {
		if *t != nil {
			(*t).Stop()
			*t = nil
		}
	}
	a.log.WithFields(logrus.Fields{"was_unreachable": wasUnreachable, "after_master_failover": rejoined}).Info("agent re-registered")
	// A framework removed while the agent was cut off is shut down on it now, if the master
	// still remembers its id (Master::reconcileKnownSlave for an agent it kept,
	// Master::__reregisterSlave for one it had marked unreachable): the removal itself reached
	// only the agents the master could reach (Cluster.removeFramework).
	removed := map[string]bool{}
	for k := range a.executors {
		if c.frameworks[k.framework] == nil && slices.Contains(c.removed, k.framework) {
			removed[k.framework] = true
		}
	}
	for k := range a.streams {
		if c.frameworks[k.framework] == nil && slices.Contains(c.removed, k.framework) {
			removed[k.framework] = true
		}
	}
	for _, id := range sortedKeys(removed) {
		a.log.WithField("framework", id).Info("shutting down a framework removed while the agent was away")
		a.removeFramework(id)
	}
	reported := map[taskKey]*agentTask{}
	for k, e := range a.executors {
		if removed[k.framework] {
			continue // being shut down
		}
		f := c.frameworks[k.framework]
		// An executor that has ended but waits for acknowledgements is still the framework's, and
		// brings it back as a live one does.
		if f == nil && !e.orphaned && e.state != execTerminating {
			if info, ok := a.frameworks[k.framework]; ok {
				f = c.recoverFramework(k.framework, info)
			}
		}
		if e.orphaned || f == nil {
			e.silent = true
			if e.state == execTerminated {
				a.removeExecutor(e)
			} else {
				a.shutdownExecutor(e, false)
			}
			continue
		}
		for id, t := range e.tasks {
			reported[taskKey{k.framework, id}] = t
		}
	}
	for _, fid := range sortedKeys(c.frameworks) {
		f := c.frameworks[fid]
		for _, id := range sortedKeys(f.unreachable) {
			if t := f.unreachable[id]; t.agent == a && reported[taskKey{fid, id}] == nil {
				delete(f.unreachable, id)
				state := lostOr(f.partitionAware(), mesos.TASK_DROPPED)
				a.agentUpdate(fid, id, t.executorID, state, mesos.REASON_RECONCILIATION, "Task is unknown to the agent")
			}
		}
	}
	for _, k := range sortedTaskKeys(reported) {
		f, at := c.frameworks[k.framework], reported[k]
		if f.tasks[k.task] != nil {
			continue // the master has it (a link broken and restored before the agent was unreachable)
		}
		t := f.unreachable[k.task]
		if t != nil && t.agent == a {
			delete(f.unreachable, k.task)
		} else {
			t = newTask(a, at.info)
		}
		t.state = at.state
		f.tasks[k.task] = t
		if wasUnreachable {
			c.masterUpdate(f, k.task, a.id, t.executorID, at.state, mesos.REASON_AGENT_REREGISTERED,
				"Unreachable agent re-reregistered", nil)
		}
	}
	kills := a.pendingKills
	a.pendingKills = nil
	for _, k := range kills {
		if f := c.frameworks[k.framework]; f != nil {
			a.kill(f, k.task, k.policy)
		}
	}
	a.resumeUpdates("")
}

// MarkAgentGone is the operator's MARK_AGENT_GONE (MESOS.md §5.5).
func (c *Cluster) MarkAgentGone(id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	a := c.agent(id)
	switch {
	case a == nil:
		return fmt.Errorf("no agent %q", id)
	case a.state == agentGone:
		return nil
	}
	// An agent a master that took over has not heard from yet is not registered with it: that
	// master knows none of its tasks (Mesos's Master::markGone, MESOS-9739).
	wasRegistered := (a.state == agentUp || a.state == agentPartitioned) && !a.awaitingRereg
	a.state = agentGone
	a.awaitingRereg = false
	for _, t := range []Timer{a.pingTimer, a.reregTimer} {
		if t != nil {
			t.Stop()
		}
	}
	c.rescindAgentOffers(a)
	a.killAll()
	for _, fid := range sortedKeys(c.frameworks) {
		f := c.frameworks[fid]
		state, reason := mesos.TASK_LOST, mesos.REASON_AGENT_REMOVED
		if f.partitionAware() {
			state, reason = mesos.TASK_GONE_BY_OPERATOR, mesos.REASON_AGENT_REMOVED_BY_OPERATOR
		}
		for _, set := range []map[string]*task{f.tasks, f.unreachable} {
			for _, tid := range sortedKeys(set) {
				if t := set[tid]; t.agent == a {
					delete(set, tid)
					c.masterUpdate(f, tid, a.id, t.executorID, state, reason, "Agent "+a.hostname+" was marked as gone", nil)
				}
			}
		}
		if wasRegistered {
			f.send(failureEvent(a.id, "", 0))
		}
	}
	return nil
}

// killAll destroys every executor of the agent without status updates (the agent shuts down,
// and removes even the executors that wait for acknowledgements).
func (a *agent) killAll() {
	for _, e := range a.executors {
		e.silent = true
		if e.state == execTerminated {
			a.removeExecutor(e)
		} else {
			e.destroy(nil, "")
		}
	}
	for k, s := range a.streams {
		s.stop()
		delete(a.streams, k)
	}
}

// KillAgent stops the agent process: its executor endpoint closes, executors lose their
// connections (and keep running), and the master notices as for a partition.
func (c *Cluster) KillAgent(id string) error {
	c.mu.Lock()
	a := c.agent(id)
	switch {
	case a == nil:
		c.mu.Unlock()
		return fmt.Errorf("no agent %q", id)
	case a.state == agentDown || a.state == agentGone:
		c.mu.Unlock()
		return fmt.Errorf("agent %s is %s", id, a.state)
	}
	wasLinked := a.state == agentUp
	a.state = agentDown
	srv := a.srv
	a.srv = nil
	for _, e := range a.executors {
		if e.regTimer != nil && e.state == execRegistering {
			e.regTimer.Stop()
		}
		if e.stream != nil {
			e.stream.close()
			e.stream = nil
		}
	}
	for _, s := range a.streams {
		s.stop()
	}
	if wasLinked {
		c.agentDisconnected(a)
	}
	c.mu.Unlock()
	a.stopServer(srv)
	return nil
}

// RestartAgent restarts a killed (or running) agent on the same address (MESOS.md §5.6):
// executors of checkpointing frameworks may re-subscribe within the re-registration timeout,
// the others are killed; then the agent re-registers with the master.
func (c *Cluster) RestartAgent(id string) error {
	c.mu.Lock()
	a := c.agent(id)
	if a == nil {
		c.mu.Unlock()
		return fmt.Errorf("no agent %q", id)
	}
	state := a.state
	c.mu.Unlock()
	if state == agentGone {
		return fmt.Errorf("agent %s was marked gone", id)
	}
	if state != agentDown {
		if err := c.KillAgent(id); err != nil {
			return err
		}
	}
	ln, err := listenAgain(a.endpoint())
	if err != nil {
		return fmt.Errorf("restart agent %s: %w", id, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	a.ln = ln
	a.recovering = true
	for _, e := range a.executors {
		if !e.checkpoint {
			e.silent, e.forgotten = true, true
			if e.state == execTerminated {
				a.removeExecutor(e) // not recovered: the restarted agent knows nothing of it
				continue
			}
			e.destroy(nil, "")
		}
		e.reregistered = false
	}
	a.forgetUncheckpointed()
	a.startServer()
	a.log.Info("agent restarted; waiting for executors to re-subscribe")
	a.recoverTimer = c.clock.AfterFunc(c.opts.ExecutorReregistrationTimeout, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.recovered(a)
	})
	return nil
}

// recovered ends an agent's recovery: executors that did not re-subscribe are destroyed, and
// once their containers are empty their live tasks are gone (as Mesos's agent does: it
// destroys the container first and reports the tasks from the termination, so that no task
// is reported gone while a process of it may still run); then the agent re-registers.
func (c *Cluster) recovered(a *agent) {
	if !a.recovering {
		return
	}
	for _, e := range a.executors {
		if e.reregistered || e.state == execTerminated || e.command != nil {
			continue
		}
		e.state = execTerminating // a late SUBSCRIBE gets SHUTDOWN
		e.failState = lostOr(e.pa, mesos.TASK_GONE).Enum()
		e.destroy(mesos.REASON_EXECUTOR_REREGISTRATION_TIMEOUT.Enum(),
			"Executor did not re-register within "+StoutDuration(c.opts.ExecutorReregistrationTimeout))
	}
	a.recovering = false
	if a.state == agentDown {
		a.state = agentPartitioned // re-registering from here
	}
	c.reregister(a)
}

// agentAction serves POST /local/agents/{id}/{partition|heal|kill|restart|gone}.
func (c *Cluster) agentAction(w http.ResponseWriter, r *http.Request) {
	id, action := r.PathValue("id"), r.PathValue("action")
	actions := map[string]func(string) error{
		"partition": c.PartitionAgent, "heal": c.HealAgent, "kill": c.KillAgent,
		"restart": c.RestartAgent, "gone": c.MarkAgentGone,
	}
	do, ok := actions[action]
	if !ok {
		plain(w, http.StatusNotFound, "unknown action "+action+": use partition, heal, kill, restart or gone")
		return
	}
	if err := do(id); err != nil {
		plain(w, http.StatusConflict, err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// listenAgain binds a killed agent's address again. The kernel can refuse it for a moment
// right after the kill: "address already in use", though by the time ss looks only TIME-WAIT
// sockets of the old agent's connections are left on the port, and a bind 5 ms later works
// (seen side by side under -race, about one package run in four). Which socket refused it
// was not pinned down; the bind is tried again for a few seconds, as a supervisor restarting
// an agent process would.
func listenAgain(addr string) (net.Listener, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		ln, err := net.Listen("tcp", addr)
		if err == nil || !errors.Is(err, syscall.EADDRINUSE) || time.Now().After(deadline) {
			return ln, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}
