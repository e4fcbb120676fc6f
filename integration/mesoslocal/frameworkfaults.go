package mesoslocal

import (
	"bytes"
	"fmt"
	"io"
	"net/http"

	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
	"github.com/sirupsen/logrus"
)

// A scheduler cut off from the master: a network partition between the two, while the agents
// (and whatever else the scheduler talks to) stay reachable. Neither side is told: the master
// knows only what reaches it, so the framework stays connected in its eyes, and the scheduler
// has only the silence of its event stream to go by (MESOS.md §1.5, §2.4).
//
//   - The subscription stream goes silent: no events, no heartbeats, not even its end. The
//     master goes on queueing events as it goes on writing to a connection nobody reads; if the
//     stream is still open when the partition heals, they arrive then, in order, as TCP
//     delivers what it retransmitted.
//   - Every call to /api/v1/scheduler that names the framework (a SUBSCRIBE with its id
//     included) is black-holed: no answer at all, not even a 307 or a 401, until the partition
//     heals, when it goes through as if it had just arrived, or until the client gives up.
//     Other requests (/master/state, a new framework's SUBSCRIBE) name no framework and go
//     through: one host has no addresses to tell the scheduler's from anyone's.
//   - The scheduler's watchdog (five silent heartbeat intervals, MESOS.md §1.5) closing the
//     stream is seen by the master at once: the framework is disconnected, its offers gone, its
//     failover timeout running, its tasks untouched (MESOS.md §2.4). A real master sees that
//     close later, when a write of its fails or meets a reset: at the heal, or when TCP gives up
//     retransmitting. Seeing it at once changes nothing the scheduler can tell — it gets no
//     event from either, and its re-SUBSCRIBE replaces the old stream in both — and a partition
//     longer than the failover timeout then removes the framework, as a real one eventually does.
//   - On the heal nothing is sent: the scheduler re-subscribes with its FrameworkID, the
//     ordinary re-subscription of MESOS.md §2.3 (held updates re-sent, fresh offers).

// PartitionFramework cuts the scheduler of the framework off from the master.
func (c *Cluster) PartitionFramework(id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	f := c.frameworks[id]
	switch {
	case c.closed:
		return fmt.Errorf("the cluster is closed")
	case c.cutOff[id] != nil:
		return fmt.Errorf("framework %s is partitioned", id)
	case f == nil:
		return fmt.Errorf("no framework %q", id)
	}
	gate := make(chan struct{})
	c.cutOff[id] = gate
	if f.stream != nil {
		f.stream.hold(gate)
	}
	c.log.WithFields(logrus.Fields{"framework": id, "connected": f.stream != nil}).Info("framework cut off from the master")
	return nil
}

// HealFramework ends the partition: what it held goes through.
func (c *Cluster) HealFramework(id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.cutOff[id] != nil:
		c.healFramework(id)
	case c.frameworks[id] == nil:
		return fmt.Errorf("no framework %q", id)
	}
	return nil
}

// healFramework opens the gate of a partition. Caller holds c.mu.
func (c *Cluster) healFramework(id string) {
	close(c.cutOff[id])
	delete(c.cutOff, id)
	c.log.WithField("framework", id).Info("framework's link to the master healed")
}

// blackHoled holds a scheduler call from a framework cut off from the master until the
// partition heals, and reports whether the client gave up meanwhile (then nothing is to be
// answered). It must come before any check that answers: a partition answers nothing. The body
// is read to find the framework and put back for the handler.
func (c *Cluster) blackHoled(r *http.Request) bool {
	c.mu.Lock()
	none := len(c.cutOff) == 0
	c.mu.Unlock()
	if none {
		return false
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(body), r.Body))
	if err != nil {
		return false // the handler reads the body and answers the error
	}
	var call scheduler.Call
	ct := r.Header.Get("Content-Type")
	if ct != mediaJSON && ct != mediaProtobuf || decode(ct, body, &call) != nil {
		return false
	}
	id := call.GetFrameworkID().GetValue()
	if id == "" {
		id = call.GetSubscribe().GetFrameworkInfo().GetID().GetValue()
	}
	c.mu.Lock()
	gate := c.cutOff[id]
	c.mu.Unlock()
	if gate == nil {
		return false
	}
	log := c.log.WithFields(logrus.Fields{"framework": id, "call": call.Type.String()})
	log.Debug("call of a framework cut off from the master held")
	select {
	case <-gate:
		return false
	case <-r.Context().Done():
		log.Debug("call of a framework cut off from the master given up by its client")
		return true
	}
}

// frameworkAction serves POST /local/frameworks/{id}/{partition|heal}.
func (c *Cluster) frameworkAction(w http.ResponseWriter, r *http.Request) {
	id, action := r.PathValue("id"), r.PathValue("action")
	actions := map[string]func(string) error{"partition": c.PartitionFramework, "heal": c.HealFramework}
	do, ok := actions[action]
	if !ok {
		plain(w, http.StatusNotFound, "unknown action "+action+": use partition or heal")
		return
	}
	if err := do(id); err != nil {
		plain(w, http.StatusConflict, err.Error())
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
