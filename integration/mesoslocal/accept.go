package mesoslocal

import (
	"fmt"
	"strings"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
)

// accept is Master::accept (MESOS.md §1.9.3), in order: offer validation, per-operation
// resource checks, sequential task validation against the remaining pool, launch, and an
// implicit decline of whatever is left. Caller holds c.mu.
func (c *Cluster) accept(f *framework, acc *scheduler.Call_Accept) {
	offers, err := c.validateOffers(f, acc.OfferIDs)
	if err != nil {
		for _, id := range acc.OfferIDs { // still-valid offers go back without a filter
			if o := c.offers[id.Value]; o != nil && o.framework == f {
				c.dropOffer(o)
			}
		}
		state := lostOr(f.partitionAware(), mesos.TASK_DROPPED)
		for _, op := range acc.Operations {
			for _, t := range launchTasks(op) {
				c.masterUpdate(f, t.TaskID.Value, t.AgentID.Value, "", state, mesos.REASON_INVALID_OFFERS,
					"Task launched with invalid offers: "+err.Error(), nil)
			}
		}
		return
	}
	a := offers[0].agent
	role := offers[0].role
	pool := mesos.Resources{}
	for _, o := range offers {
		pool.Add(o.resources...)
		c.dropOffer(o)
	}
	if !a.offerable() {
		state, reason := lostOr(f.partitionAware(), mesos.TASK_DROPPED), mesos.REASON_AGENT_DISCONNECTED
		for _, op := range acc.Operations {
			for _, t := range launchTasks(op) {
				c.masterUpdate(f, t.TaskID.Value, a.id, "", state, reason, "Agent is not connected", nil)
			}
		}
		return
	}
	launchedExecutors := map[string]*mesos.ExecutorInfo{} // executors started earlier in this ACCEPT
	seen := map[string]bool{}
	for _, op := range acc.Operations {
		switch op.Type {
		case mesos.Offer_Operation_LAUNCH:
			if op.ID != nil {
				for _, t := range launchTasks(op) {
					c.taskError(f, t, "The `id` field cannot be set on LAUNCH operations")
				}
				continue
			}
			for _, t := range launchTasks(op) {
				t := t
				c.normaliseTask(f, &t, role)
				res, exec, err := c.validateTask(f, a, &t, pool, seen, launchedExecutors)
				if err != nil {
					c.taskError(f, t, err.Error())
					continue
				}
				seen[t.TaskID.Value] = true
				pool.Subtract(res...)
				if exec != nil {
					launchedExecutors[exec.ExecutorID.Value] = exec
				}
				c.launch(f, a, t, exec != nil)
			}
		case mesos.Offer_Operation_LAUNCH_GROUP:
			for _, t := range launchTasks(op) {
				c.masterUpdate(f, t.TaskID.Value, t.AgentID.Value, "", mesos.TASK_ERROR, mesos.REASON_TASK_GROUP_INVALID,
					"mesos-local does not implement LAUNCH_GROUP", nil)
			}
		default:
			c.log.WithField("operation", op.Type.String()).Warn("mesos-local ignores offer operations other than LAUNCH")
		}
	}
	if len(pool) > 0 {
		c.addFilter(f, &offer{agent: a, role: role}, pool, acc.Filters) // implicit decline
	}
}

func launchTasks(op mesos.Offer_Operation) []mesos.TaskInfo {
	switch {
	case op.Launch != nil:
		return op.Launch.TaskInfos
	case op.LaunchGroup != nil:
		return op.LaunchGroup.TaskGroup.Tasks
	}
	return nil
}

// validateOffers is validation::offer::validate; the first failure wins.
func (c *Cluster) validateOffers(f *framework, ids []mesos.OfferID) ([]*offer, error) {
	if len(ids) == 0 {
		return nil, fmt.Errorf("No offers specified")
	}
	seen := map[string]bool{}
	var out []*offer
	for _, id := range ids {
		if seen[id.Value] {
			return nil, fmt.Errorf("Duplicate offer %s in accept", id.Value)
		}
		seen[id.Value] = true
		o := c.offers[id.Value]
		if o == nil {
			return nil, fmt.Errorf("Offer %s is no longer valid", id.Value)
		}
		if o.framework != f {
			return nil, fmt.Errorf("Offer %s has invalid framework %s while framework %s is expected", id.Value, o.framework.id, f.id)
		}
		if len(out) > 0 && o.role != out[0].role {
			return nil, fmt.Errorf("Aggregated offers must be allocated to the same role. Offer %s uses role %s but another is allocated to %s", id.Value, o.role, out[0].role)
		}
		if len(out) > 0 && o.agent != out[0].agent {
			return nil, fmt.Errorf("Aggregated offers must belong to one single agent. Offer %s uses agent %s and agent %s", id.Value, o.agent.id, out[0].agent.id)
		}
		out = append(out, o)
	}
	return out, nil
}

// normaliseTask fills in what the master fills in: the framework id of the executor.
func (c *Cluster) normaliseTask(f *framework, t *mesos.TaskInfo, role string) {
	if t.Executor != nil && t.Executor.FrameworkID == nil {
		e := *t.Executor
		e.FrameworkID = &mesos.FrameworkID{Value: f.id}
		t.Executor = &e
	}
}

// validateTask is the task validation of MESOS.md §1.9.3 step 5; it returns the resources
// the task consumes (its own, plus its executor's if the executor starts now) and the
// executor it starts, if any.
func (c *Cluster) validateTask(f *framework, a *agent, t *mesos.TaskInfo, pool mesos.Resources,
	seen map[string]bool, launched map[string]*mesos.ExecutorInfo) (mesos.Resources, *mesos.ExecutorInfo, error) {
	id := t.TaskID.Value
	if err := validID(id); err != nil {
		return nil, nil, fmt.Errorf("Task ID '%s' is invalid: %v", id, err)
	}
	if seen[id] || f.tasks[id] != nil {
		return nil, nil, fmt.Errorf("Task has duplicate ID: %s", id)
	}
	if f.unreachable[id] != nil {
		return nil, nil, fmt.Errorf("Task reuses the ID of an unreachable task: %s", id)
	}
	if t.AgentID.Value != a.id {
		return nil, nil, fmt.Errorf("Task uses invalid agent: %s", t.AgentID.Value)
	}
	if kp := t.KillPolicy; kp != nil && kp.GracePeriod != nil && kp.GracePeriod.Nanoseconds < 0 {
		return nil, nil, fmt.Errorf("Task's 'kill_policy.grace_period' must be non-negative")
	}
	if len(t.Resources) == 0 {
		return nil, nil, fmt.Errorf("Task uses no resources")
	}
	if err := validResources(t.Resources); err != nil {
		return nil, nil, fmt.Errorf("Task uses invalid resources: %v", err)
	}
	if (t.Command == nil) == (t.Executor == nil) {
		return nil, nil, fmt.Errorf("Task should have at least one (but not both) of CommandInfo or ExecutorInfo present")
	}
	need := normalise(t.Resources)
	var starts *mesos.ExecutorInfo
	if e := t.Executor; e != nil {
		if err := validID(e.ExecutorID.Value); err != nil {
			return nil, nil, fmt.Errorf("ExecutorID '%s' is invalid: %v", e.ExecutorID.Value, err)
		}
		if e.Type != mesos.ExecutorInfo_UNKNOWN && e.Type != mesos.ExecutorInfo_CUSTOM {
			return nil, nil, fmt.Errorf("'ExecutorInfo.type' must be 'CUSTOM' for LAUNCH")
		}
		if e.Command == nil {
			return nil, nil, fmt.Errorf("'ExecutorInfo.command' must be set for 'CUSTOM' executor")
		}
		if e.FrameworkID.Value != f.id {
			return nil, nil, fmt.Errorf("ExecutorInfo has an invalid FrameworkID (Actual: %s vs Expected: %s)", e.FrameworkID.Value, f.id)
		}
		if err := validResources(e.Resources); err != nil {
			return nil, nil, fmt.Errorf("Executor uses invalid resources: %v", err)
		}
		existing := a.executorInfo(f.id, e.ExecutorID.Value)
		if existing == nil {
			existing = launched[e.ExecutorID.Value]
		}
		switch {
		case existing == nil:
			starts = e
			need.Add(normalise(e.Resources)...)
		case !sameExecutor(existing, e):
			return nil, nil, fmt.Errorf("ExecutorInfo is not compatible with existing ExecutorInfo with same ExecutorID")
		}
	}
	if !contains(pool, need) {
		return nil, nil, fmt.Errorf("Total resources %s required by task and its executor is more than available %s", need, pool)
	}
	return need, starts, nil
}

// sameExecutor compares two ExecutorInfos as Mesos does: byte for byte after normalisation.
func sameExecutor(a, b *mesos.ExecutorInfo) bool {
	x, y := *a, *b
	x.Resources, y.Resources = normalise(x.Resources), normalise(y.Resources)
	return x.Equal(&y)
}

// validID is the id rule of MESOS.md §1.9.3 task validation 1.
func validID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("ID must not be empty")
	case len(id) > 255:
		return fmt.Errorf("ID must be at most 255 characters")
	case id == "." || id == "..":
		return fmt.Errorf("'%s' is disallowed", id)
	case strings.ContainsAny(id, "/\\"):
		return fmt.Errorf("'/' and '\\' are disallowed")
	}
	for _, r := range id {
		if r < 0x20 || r == 0x7f {
			return fmt.Errorf("control characters are disallowed")
		}
	}
	return nil
}

// taskError answers an invalid task with TASK_ERROR / REASON_TASK_INVALID, no uuid.
func (c *Cluster) taskError(f *framework, t mesos.TaskInfo, msg string) {
	c.masterUpdate(f, t.TaskID.Value, t.AgentID.Value, "", mesos.TASK_ERROR, mesos.REASON_TASK_INVALID, msg, nil)
}
