package mesoslocal

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
)

// offer is an outstanding offer: one agent's resources allocated to one role of a framework.
type offer struct {
	id        string
	framework *framework
	agent     *agent
	role      string
	resources mesos.Resources
	timer     Timer // offer timeout, if configured
}

// filter is a refusal filter (MESOS.md §1.9.2): while it lives, the framework is not offered
// resources of the agent that are a subset of refused.
type filter struct {
	agent   *agent
	role    string
	refused mesos.Resources
	until   time.Time
}

// refuseDuration applies the filter rules: absent → 5 s, negative → 5 s, capped at 365
// days, at least one allocation interval; 0 means no filter.
func (c *Cluster) refuseDuration(fs *mesos.Filters) time.Duration {
	secs := 5.0
	if fs != nil && fs.RefuseSeconds != nil {
		secs = *fs.RefuseSeconds
	}
	switch {
	case secs == 0:
		return 0
	case secs < 0 || math.IsNaN(secs):
		secs = 5
	case secs > 365*24*3600:
		secs = 365 * 24 * 3600
	}
	d := time.Duration(secs * float64(time.Second))
	if d < c.opts.AllocationInterval {
		d = c.opts.AllocationInterval
	}
	return d
}

func (c *Cluster) addFilter(f *framework, o *offer, refused mesos.Resources, fs *mesos.Filters) {
	d := c.refuseDuration(fs)
	if d == 0 || len(refused) == 0 {
		return
	}
	f.filters = append(f.filters, &filter{agent: o.agent, role: o.role, refused: refused, until: c.clock.Now().Add(d)})
}

func (c *Cluster) clearFilters(f *framework, role string) {
	f.filters = slices.DeleteFunc(f.filters, func(fl *filter) bool { return fl.role == role })
}

// filtered reports whether a live filter hides available on a from f.
func (c *Cluster) filtered(f *framework, a *agent, role string, available mesos.Resources) bool {
	now := c.clock.Now()
	f.filters = slices.DeleteFunc(f.filters, func(fl *filter) bool { return !now.Before(fl.until) })
	for _, fl := range f.filters {
		if fl.agent == a && fl.role == role && contains(fl.refused, available) {
			return true
		}
	}
	return false
}

// scheduleAllocation runs an allocation every allocation interval. Caller holds c.mu.
func (c *Cluster) scheduleAllocation() {
	if c.closed {
		return
	}
	c.allocTimer = c.clock.AfterFunc(c.opts.AllocationInterval, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.allocate()
		c.scheduleAllocation()
	})
}

// allocateSoon allocates now (REVIVE, subscription): real Mesos allocates on such events
// without waiting for the next tick. Caller holds c.mu.
func (c *Cluster) allocateSoon() { c.allocate() }

// available returns what an agent has that is neither used nor offered.
func (c *Cluster) available(a *agent) mesos.Resources {
	free := a.total.Clone()
	free.Subtract(c.used(a)...)
	for _, o := range c.offers {
		if o.agent == a {
			free.Subtract(o.resources...)
		}
	}
	return free
}

// used sums the resources of the agent's tasks that are not terminal at the master and of its
// live executors.
func (c *Cluster) used(a *agent) mesos.Resources {
	var used mesos.Resources
	for _, f := range c.frameworks {
		for _, t := range f.tasks {
			if t.agent == a && !terminal(t.state) {
				used.Add(t.resources...)
			}
		}
	}
	for _, e := range a.liveExecutors() {
		used.Add(e.resources...)
	}
	return used
}

// allocate makes offers: for each connected framework, one offer per agent with enough
// unused resources, to the framework's first role that is not suppressed. Caller holds c.mu.
func (c *Cluster) allocate() {
	if c.closed {
		return
	}
	ids := make([]string, 0, len(c.frameworks))
	for id := range c.frameworks {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		f := c.frameworks[id]
		if f.stream == nil {
			continue
		}
		role := ""
		for _, r := range f.roles() {
			if !f.suppressed[r] {
				role = r
				break
			}
		}
		if role == "" {
			continue
		}
		var made []mesos.Offer
		for _, a := range c.agents {
			if !a.offerable() {
				continue
			}
			free := c.available(a)
			if !allocatable(free) || c.filtered(f, a, role, free) {
				continue
			}
			made = append(made, c.newOffer(f, a, role, free))
		}
		if len(made) > 0 {
			c.log.WithField("framework", f.id).WithField("offers", len(made)).Debug("offers sent")
			f.send(&scheduler.Event{Type: scheduler.Event_OFFERS, Offers: &scheduler.Event_Offers{Offers: made}})
		}
	}
}

func (c *Cluster) newOffer(f *framework, a *agent, role string, rs mesos.Resources) mesos.Offer {
	o := &offer{id: fmt.Sprintf("%s-O%d", c.masterInfo.ID, c.nextOffer), framework: f, agent: a, role: role, resources: rs}
	c.nextOffer++
	c.offers[o.id] = o
	if c.opts.OfferTimeout > 0 {
		o.timer = c.clock.AfterFunc(c.opts.OfferTimeout, func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.offers[o.id] == o {
				c.rescind(o)
			}
		})
	}
	var execIDs []mesos.ExecutorID
	for _, e := range a.liveExecutors() {
		// The master does not track the built-in command executor (master.cpp adds only a
		// task's own ExecutorInfo), so a command task's executor is not listed.
		if e.frameworkID == f.id && e.command == nil {
			execIDs = append(execIDs, mesos.ExecutorID{Value: e.id})
		}
	}
	sort.Slice(execIDs, func(i, j int) bool { return execIDs[i].Value < execIDs[j].Value })
	mo := mesos.Offer{
		ID: mesos.OfferID{Value: o.id}, FrameworkID: mesos.FrameworkID{Value: f.id},
		AgentID: mesos.AgentID{Value: a.id}, Hostname: a.hostname,
		URL:         &mesos.URL{Scheme: "http", Address: mesos.Address{Hostname: ptr(a.hostname), IP: ptr(a.ip), Port: int32(a.port)}, Path: ptr("/slave(1)")},
		Resources:   allocated(rs, role, f.multiRole()),
		ExecutorIDs: execIDs,
	}
	if f.multiRole() {
		mo.AllocationInfo = &mesos.Resource_AllocationInfo{Role: ptr(role)}
	}
	return mo
}

// dropOffer removes an offer without telling the framework.
func (c *Cluster) dropOffer(o *offer) {
	if o.timer != nil {
		o.timer.Stop()
	}
	delete(c.offers, o.id)
}

// rescind removes an offer and tells the framework.
func (c *Cluster) rescind(o *offer) {
	c.dropOffer(o)
	o.framework.send(&scheduler.Event{Type: scheduler.Event_RESCIND, Rescind: &scheduler.Event_Rescind{OfferID: mesos.OfferID{Value: o.id}}})
}

// discardOffers drops a framework's offers without RESCIND (re-subscription, disconnection,
// removal).
func (c *Cluster) discardOffers(f *framework) {
	for _, o := range c.offers {
		if o.framework == f {
			c.dropOffer(o)
		}
	}
}

// rescindAgentOffers rescinds every offer of an agent (agent lost, deactivated or gone).
func (c *Cluster) rescindAgentOffers(a *agent) {
	for _, o := range c.offers {
		if o.agent == a {
			c.rescind(o)
		}
	}
}

// decline returns offers with a filter; unknown ids are ignored.
func (c *Cluster) decline(f *framework, ids []mesos.OfferID, fs *mesos.Filters) {
	for _, id := range ids {
		o := c.offers[id.Value]
		if o == nil || o.framework != f {
			continue
		}
		c.dropOffer(o)
		c.addFilter(f, o, o.resources, fs)
	}
}

// revive clears the roles' filters, un-suppresses them and allocates now. A role that is not
// the framework's makes the whole call a no-op.
func (c *Cluster) revive(f *framework, roles []string) {
	if roles = c.callRoles(f, roles); roles == nil {
		return
	}
	for _, r := range roles {
		delete(f.suppressed, r)
		c.clearFilters(f, r)
	}
	c.log.WithField("framework", f.id).WithField("roles", roles).Debug("REVIVE")
	c.allocateSoon()
}

// suppress stops offers for the roles; outstanding offers stay valid.
func (c *Cluster) suppress(f *framework, roles []string) {
	if roles = c.callRoles(f, roles); roles == nil {
		return
	}
	for _, r := range roles {
		f.suppressed[r] = true
	}
	c.log.WithField("framework", f.id).WithField("roles", roles).Debug("SUPPRESS")
}

// callRoles returns the roles a REVIVE/SUPPRESS applies to (empty: all the framework's), or
// nil when one of them is not a framework role.
func (c *Cluster) callRoles(f *framework, roles []string) []string {
	mine := f.roles()
	if len(roles) == 0 {
		return append([]string{}, mine...)
	}
	for _, r := range roles {
		if !slices.Contains(mine, r) {
			c.log.WithField("role", r).Warn("REVIVE/SUPPRESS names a role that is not the framework's; ignoring the call")
			return nil
		}
	}
	return roles
}
