package mesoslocal

import (
	"fmt"
	"math"
	"net/http"
	"slices"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
	"github.com/sirupsen/logrus"
)

// framework is the master's record of a framework.
type framework struct {
	id         string
	info       mesos.FrameworkInfo
	stream     *stream // nil while disconnected
	suppressed map[string]bool
	filters    []*filter
	tasks      map[string]*task // active, including terminal ones whose update is unacknowledged
	// unreachable holds tasks on unreachable agents; their ids stay reserved.
	unreachable   map[string]*task
	failoverTimer Timer
	heartbeat     Timer
	subscribedAt  time.Time
}

func (f *framework) has(c mesos.FrameworkInfo_Capability_Type) bool {
	for _, cap := range f.info.Capabilities {
		if cap.Type == c {
			return true
		}
	}
	return false
}

func (f *framework) partitionAware() bool {
	return f.has(mesos.FrameworkInfo_Capability_PARTITION_AWARE)
}
func (f *framework) multiRole() bool  { return f.has(mesos.FrameworkInfo_Capability_MULTI_ROLE) }
func (f *framework) checkpoint() bool { return f.info.Checkpoint != nil && *f.info.Checkpoint }

// roles are the framework's roles: `roles` for MULTI_ROLE frameworks, else `role` (default *).
func (f *framework) roles() []string {
	if f.multiRole() {
		return f.info.Roles
	}
	if f.info.Role != nil {
		return []string{*f.info.Role}
	}
	return []string{"*"}
}

func (f *framework) stopTimers() {
	if f.failoverTimer != nil {
		f.failoverTimer.Stop()
		f.failoverTimer = nil
	}
	if f.heartbeat != nil {
		f.heartbeat.Stop()
		f.heartbeat = nil
	}
}

// send queues an event for the framework if it is connected; events for a disconnected
// framework are dropped, as the master drops them.
func (f *framework) send(ev *scheduler.Event) {
	if f.stream != nil {
		f.stream.send(ev)
	}
}

// subscribe answers SUBSCRIBE with 200 and a stream; a refused subscription is an ERROR event
// on that stream (MESOS.md §2.2).
func (c *Cluster) subscribe(w http.ResponseWriter, r *http.Request, call *scheduler.Call, media string) {
	st := newStream(media, newUUID())
	c.mu.Lock()
	f, err := c.admit(call.Subscribe, st)
	if err != nil {
		c.log.WithError(err).Info("subscription refused")
		st.send(&scheduler.Event{Type: scheduler.Event_ERROR, Error: &scheduler.Event_Error{Message: err.Error()}})
		st.close()
	}
	c.mu.Unlock()
	if clientGone := st.serve(w, r); clientGone && f != nil {
		c.mu.Lock()
		c.disconnected(f, st)
		c.mu.Unlock()
	}
}

// admit validates a subscription and makes st the framework's stream. Caller holds c.mu.
func (c *Cluster) admit(sub *scheduler.Call_Subscribe, st *stream) (*framework, error) {
	info := *sub.FrameworkInfo
	if c.closed {
		return nil, fmt.Errorf("Master is shutting down")
	}
	if err := validateFrameworkInfo(&info, sub.SuppressedRoles); err != nil {
		return nil, err
	}
	var f *framework
	if info.ID != nil {
		if slices.Contains(c.removed, info.ID.Value) {
			return nil, fmt.Errorf("Framework has been removed")
		}
		f = c.frameworks[info.ID.Value]
	}
	if f != nil {
		old := f.info
		if ptrVal(old.Principal) != ptrVal(info.Principal) {
			return nil, fmt.Errorf("Changing framework's principal is not allowed.")
		}
		// user and checkpoint keep their first values (MESOS.md §2.3).
		info.User, info.Checkpoint = old.User, old.Checkpoint
		f.info = info
		if f.stream != nil {
			f.stream.send(&scheduler.Event{Type: scheduler.Event_ERROR, Error: &scheduler.Event_Error{Message: "Framework failed over"}})
			f.stream.close()
		}
		f.stopTimers()
		c.discardOffers(f)
	} else {
		id := c.masterInfo.ID + fmt.Sprintf("-%04d", c.nextFramework)
		if info.ID != nil { // an id this master never saw: a recovered framework
			id = info.ID.Value
		} else {
			c.nextFramework++
		}
		info.ID = &mesos.FrameworkID{Value: id}
		f = &framework{id: id, info: info, tasks: map[string]*task{}, unreachable: map[string]*task{}}
		c.frameworks[id] = f
	}
	f.stream = st
	if gate := c.cutOff[f.id]; gate != nil {
		// A SUBSCRIBE that got through just before its scheduler was cut off: its stream is
		// behind the partition too.
		st.hold(gate)
	}
	f.subscribedAt = c.clock.Now()
	// The suppressed set is replaced by the subscription's; roles leaving it are revived.
	f.suppressed = map[string]bool{}
	for _, role := range sub.SuppressedRoles {
		f.suppressed[role] = true
	}
	f.filters = nil
	hb := c.opts.HeartbeatInterval.Seconds()
	mi := c.masterInfo
	st.send(&scheduler.Event{Type: scheduler.Event_SUBSCRIBED, Subscribed: &scheduler.Event_Subscribed{
		FrameworkID: &mesos.FrameworkID{Value: f.id}, HeartbeatIntervalSeconds: &hb, MasterInfo: &mi,
	}})
	c.heartbeat(f, st)
	c.log.WithFields(logrus.Fields{"framework": f.id, "name": f.info.Name}).Info("framework subscribed")
	// Every agent re-sends the head of its pending update streams at once (MESOS.md §2.3).
	for _, a := range c.agents {
		a.resumeUpdates(f.id)
	}
	c.allocateSoon()
	return f, nil
}

func ptrVal(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func validateFrameworkInfo(info *mesos.FrameworkInfo, suppressed []string) error {
	if info.User == "" {
		return fmt.Errorf("'FrameworkInfo.user' must be set")
	}
	multi := false
	for _, c := range info.Capabilities {
		if c.Type == mesos.FrameworkInfo_Capability_MULTI_ROLE {
			multi = true
		}
	}
	if multi && info.Role != nil {
		return fmt.Errorf("'FrameworkInfo.role' must not be set when the MULTI_ROLE capability is enabled")
	}
	if !multi && len(info.Roles) > 0 {
		return fmt.Errorf("'FrameworkInfo.roles' must not be set when the MULTI_ROLE capability is disabled")
	}
	seen := map[string]bool{}
	for _, r := range info.Roles {
		if seen[r] {
			return fmt.Errorf("'FrameworkInfo.roles' contains duplicate role '%s'", r)
		}
		seen[r] = true
		if err := validRole(r); err != nil {
			return err
		}
	}
	if info.ID != nil {
		if err := validID(info.ID.Value); err != nil {
			return fmt.Errorf("'FrameworkInfo.id' is invalid: %v", err)
		}
	}
	if ft := info.FailoverTimeout; ft != nil && (*ft < 0 || math.IsNaN(*ft) || math.IsInf(*ft, 0) || *ft > math.MaxInt64/1e9) {
		return fmt.Errorf("Invalid failover_timeout: %v", *ft)
	}
	roles := info.Roles
	if !multi {
		roles = []string{"*"}
		if info.Role != nil {
			roles = []string{*info.Role}
		}
	}
	for _, r := range suppressed {
		if !slices.Contains(roles, r) {
			return fmt.Errorf("Suppressed role '%s' is not contained in the list of roles", r)
		}
	}
	return nil
}

func validRole(r string) error {
	if r == "" || r == "." || r == ".." || r[0] == '-' {
		return fmt.Errorf("Role name '%s' is invalid", r)
	}
	for _, ch := range r {
		if ch <= ' ' || ch == '/' && r != "*" || ch == '\\' || ch == 127 {
			return fmt.Errorf("Role name '%s' contains an invalid character", r)
		}
	}
	return nil
}

// heartbeat sends HEARTBEAT now and every interval while st is the framework's stream.
func (c *Cluster) heartbeat(f *framework, st *stream) {
	if f.stream != st || c.closed {
		return
	}
	st.send(&scheduler.Event{Type: scheduler.Event_HEARTBEAT})
	f.heartbeat = c.clock.AfterFunc(c.opts.HeartbeatInterval, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.heartbeat(f, st)
	})
}

// updateFramework applies UPDATE_FRAMEWORK (MESOS.md §1.7). Caller holds c.mu.
func (c *Cluster) updateFramework(f *framework, u *scheduler.Call_UpdateFramework) error {
	info := u.FrameworkInfo
	if err := validateFrameworkInfo(&info, u.SuppressedRoles); err != nil {
		return err
	}
	if info.User != f.info.User || ptrVal(info.Principal) != ptrVal(f.info.Principal) ||
		(info.Checkpoint != nil && *info.Checkpoint) != f.checkpoint() {
		return fmt.Errorf("Updating 'FrameworkInfo.user', 'principal' or 'checkpoint' is unsupported")
	}
	f.info = info
	for _, o := range c.offers {
		if o.framework == f && !slices.Contains(f.roles(), o.role) {
			c.rescind(o)
		}
	}
	old := f.suppressed
	f.suppressed = map[string]bool{}
	for _, r := range u.SuppressedRoles {
		f.suppressed[r] = true
	}
	for r := range old {
		if !f.suppressed[r] {
			c.clearFilters(f, r)
		}
	}
	c.allocateSoon()
	return nil
}

// disconnected handles the loss of a framework's subscription connection (MESOS.md §2.4).
func (c *Cluster) disconnected(f *framework, st *stream) {
	if f.stream != st || c.frameworks[f.id] != f {
		return // replaced by a newer subscription, or removed
	}
	f.stream = nil
	f.stopTimers()
	c.discardOffers(f)
	timeout := time.Duration(0)
	if f.info.FailoverTimeout != nil {
		timeout = time.Duration(*f.info.FailoverTimeout * float64(time.Second))
	}
	c.log.WithFields(logrus.Fields{"framework": f.id, "failover_timeout": timeout}).Info("framework disconnected")
	if timeout <= 0 {
		c.removeFramework(f, "framework disconnected with failover_timeout 0")
		return
	}
	subscribedAt := f.subscribedAt
	f.failoverTimer = c.clock.AfterFunc(timeout, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.frameworks[f.id] == f && f.stream == nil && f.subscribedAt.Equal(subscribedAt) {
			c.removeFramework(f, "failover timeout expired")
		}
	})
}

// removeFramework is TEARDOWN and failover-timeout expiry: offers discarded without RESCIND,
// tasks forgotten without updates, executors shut down, the id remembered as removed.
// Master::removeFramework tells only the agents it can reach (an agent ignores the message
// while disconnected, Slave::shutdownFramework); the others are told when they re-register, if
// the master still remembers the id then (reregister).
func (c *Cluster) removeFramework(f *framework, why string) {
	c.log.WithFields(logrus.Fields{"framework": f.id, "why": why}).Info("removing framework")
	f.stopTimers()
	c.discardOffers(f)
	if f.stream != nil {
		f.stream.close()
		f.stream = nil
	}
	delete(c.frameworks, f.id)
	c.removed = append(c.removed, f.id)
	if n := len(c.removed) - c.opts.MaxCompletedFrameworks; n > 0 {
		c.removed = c.removed[n:]
	}
	for _, a := range c.agents {
		if a.linked() {
			a.removeFramework(f.id)
		}
	}
}
