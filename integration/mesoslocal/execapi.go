package mesoslocal

import (
	"fmt"
	"net/http"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	executorapi "github.com/mesos/mesos-go/api/v1/lib/executor"
	"github.com/sirupsen/logrus"
)

// executorAPI serves POST /api/v1/executor with the checks of MESOS.md §6.1, in order.
func (a *agent) executorAPI(w http.ResponseWriter, r *http.Request) {
	var call executorapi.Call
	media, body := readCallBody(w, r, &call)
	if media == "" {
		return
	}
	if err := validateExecutorCall(&call, callHasType(media, body, executorCallType)); err != nil {
		plain(w, http.StatusBadRequest, "Failed to validate Executor::Call: "+err.Error())
		return
	}
	media = ""
	if call.Type == executorapi.Call_SUBSCRIBE {
		if media = negotiate(r.Header.Get("Accept")); media == "" {
			plain(w, http.StatusNotAcceptable, "Expecting 'Accept' to allow application/json or application/x-protobuf")
			return
		}
	}
	if call.Type == executorapi.Call_HEARTBEAT {
		w.WriteHeader(http.StatusAccepted)
		return
	}
	c := a.c
	c.mu.Lock()
	if a.recovering && call.Type != executorapi.Call_SUBSCRIBE {
		c.mu.Unlock()
		plain(w, http.StatusServiceUnavailable, "Agent has not finished recovery")
		return
	}
	if _, ok := a.frameworks[call.FrameworkID.Value]; !ok {
		c.mu.Unlock()
		plain(w, http.StatusBadRequest, "Framework cannot be found")
		return
	}
	e := a.executors[execKey{call.FrameworkID.Value, call.ExecutorID.Value}]
	if e == nil {
		c.mu.Unlock()
		plain(w, http.StatusBadRequest, "Executor cannot be found")
		return
	}
	// Only an executor that never subscribed is refused; one whose connection closed stays
	// RUNNING at the agent and may still send updates (Mesos keeps its state).
	if call.Type != executorapi.Call_SUBSCRIBE && e.state == execRegistering {
		c.mu.Unlock()
		plain(w, http.StatusForbidden, "Executor is not subscribed")
		return
	}
	switch call.Type {
	case executorapi.Call_SUBSCRIBE:
		st := newStream(media, "")
		a.executorSubscribed(e, call.Subscribe, st)
		c.mu.Unlock()
		st.serve(w, r)
		c.mu.Lock()
		if e.stream == st {
			// The connection is gone; the executor stays RUNNING and may re-subscribe. What is
			// sent to it meanwhile is lost, as Mesos's sends into the closed connection are.
			e.stream = nil
			e.log().Info("executor disconnected")
		}
		c.mu.Unlock()
		return
	case executorapi.Call_UPDATE:
		st := call.Update.Status
		if st.AgentID != nil && st.AgentID.Value != a.id {
			break // silently dropped, as Mesos does
		}
		a.executorUpdate(e, st)
	case executorapi.Call_MESSAGE:
		c.messageFromExecutor(a, e.frameworkID, e.id, call.Message.Data)
	case executorapi.Call_UNKNOWN:
		c.mu.Unlock()
		plain(w, http.StatusNotImplemented, "501 Not Implemented.") // libprocess's NotImplemented()
		return
	}
	c.mu.Unlock()
	w.WriteHeader(http.StatusAccepted)
}

// executorCallType says where an executor call's 'type' is (see callHasType).
var executorCallType = callType{field: 3, names: executorapi.Call_Type_name}

// validateExecutorCall is common::validation::validateExecutorCall (MESOS.md §6.1); typed tells
// whether the body set 'type' at all (see callHasType). A call that names type UNKNOWN passes,
// and is answered 501 once its framework and executor are found, as the agent does.
func validateExecutorCall(call *executorapi.Call, typed bool) error {
	if call.ExecutorID.Value == "" {
		return fmt.Errorf("Expecting 'executor_id' to be present")
	}
	if call.FrameworkID.Value == "" {
		return fmt.Errorf("Expecting 'framework_id' to be present")
	}
	if !typed {
		return fmt.Errorf("Expecting 'type' to be present")
	}
	switch call.Type {
	case executorapi.Call_SUBSCRIBE:
		if call.Subscribe == nil {
			return fmt.Errorf("Expecting 'subscribe' to be present")
		}
	case executorapi.Call_UPDATE:
		if call.Update == nil {
			return fmt.Errorf("Expecting 'update' to be present")
		}
		st := call.Update.Status
		if len(st.UUID) != 16 {
			return fmt.Errorf("'uuid' must be a valid UUID (16 bytes)")
		}
		if st.ExecutorID != nil && st.ExecutorID.Value != call.ExecutorID.Value {
			return fmt.Errorf("ExecutorID in Call: %s does not match ExecutorID in TaskStatus: %s", call.ExecutorID.Value, st.ExecutorID.Value)
		}
		if st.Source == nil || *st.Source != mesos.SOURCE_EXECUTOR {
			return fmt.Errorf("Received Call from executor with invalid source")
		}
		if st.State == nil || *st.State == mesos.TASK_STAGING {
			return fmt.Errorf("Received TASK_STAGING from executor which is not allowed")
		}
	case executorapi.Call_MESSAGE:
		if call.Message == nil {
			return fmt.Errorf("Expecting 'message' to be present")
		}
	case executorapi.Call_HEARTBEAT, executorapi.Call_UNKNOWN:
	}
	return nil
}

// executorSubscribed is the agent's SUBSCRIBE (MESOS.md §6.3). Caller holds c.mu.
func (a *agent) executorSubscribed(e *executor, sub *executorapi.Call_Subscribe, st *stream) {
	if e.state == execTerminating || e.state == execTerminated {
		st.send(&executorapi.Event{Type: executorapi.Event_SHUTDOWN})
		st.close()
		return
	}
	if e.stream != nil {
		e.stream.close() // a re-subscription replaces the previous connection
	}
	// The carried updates are taken now, and acknowledged after SUBSCRIBED, the stream's first
	// event (MESOS.md §6.4): Mesos acknowledges them once its update manager has them, later.
	var acks []*executorapi.Event
	for _, u := range sub.UnacknowledgedUpdates {
		u.Status.Source = mesos.SOURCE_EXECUTOR.Enum()
		a.takeExecutorUpdate(e, u.Status)
		acks = append(acks, ackEvent(u.Status))
	}
	e.stream = st
	if a.recovering {
		e.reregistered = true
	}
	// A sent task still STAGING that the executor does not list never reached it: lost with an
	// agent restart, or sent into a connection that had dropped. Mesos checks on every SUBSCRIBE,
	// not only after a restart, with the same reason and message either way.
	listed := map[string]bool{}
	for _, t := range sub.UnacknowledgedTasks {
		listed[t.TaskID.Value] = true
	}
	for _, id := range sortedKeys(e.tasks) {
		t := e.tasks[id]
		if t.state == mesos.TASK_STAGING && t.delivered && !listed[id] {
			state := lostOr(e.pa, mesos.TASK_DROPPED)
			t.state = state
			a.agentUpdate(e.frameworkID, id, e.id, state, mesos.REASON_AGENT_RESTARTED, "Task launched during agent restart")
		}
	}
	// Checked after the drops, as Mesos does: every task killed before delivery, or every sent
	// one dropped unreported, leaves an executor with nothing to run.
	if !e.everSentTask() && len(e.queue) == 0 {
		a.shutdownExecutor(e, true)
		return
	}
	e.state = execRunning
	if e.regTimer != nil {
		e.regTimer.Stop()
	}
	st.send(&executorapi.Event{Type: executorapi.Event_SUBSCRIBED, Subscribed: &executorapi.Event_Subscribed{
		ExecutorInfo: e.info, FrameworkInfo: a.frameworks[e.frameworkID], AgentInfo: a.info(),
		ContainerID: &mesos.ContainerID{Value: e.containerID},
	}})
	for _, ack := range acks {
		st.send(ack)
	}
	queue := e.queue
	e.queue = nil
	for _, t := range queue {
		e.deliver(t)
	}
	a.executorHeartbeat(e, st)
}

// executorHeartbeat sends HEARTBEAT every interval while st is the executor's stream.
func (a *agent) executorHeartbeat(e *executor, st *stream) {
	if e.heartbeat != nil {
		e.heartbeat.Stop()
	}
	e.heartbeat = a.c.clock.AfterFunc(a.c.opts.ExecutorHeartbeatInterval, func() {
		a.c.mu.Lock()
		defer a.c.mu.Unlock()
		if e.stream == st {
			st.send(&executorapi.Event{Type: executorapi.Event_HEARTBEAT})
			a.executorHeartbeat(e, st)
		}
	})
}

// executorUpdate takes an executor's UPDATE into the task's stream and acknowledges it to the
// executor (the agent's ACKNOWLEDGED, not the scheduler's).
func (a *agent) executorUpdate(e *executor, st mesos.TaskStatus) {
	a.takeExecutorUpdate(e, st)
	e.send(ackEvent(st))
}

// takeExecutorUpdate takes an executor's UPDATE into the agent's books and the task's stream.
// The caller acknowledges it to the executor either way.
func (a *agent) takeExecutorUpdate(e *executor, st mesos.TaskStatus) {
	t := e.tasks[st.TaskID.Value]
	if t != nil && terminal(t.state) {
		// Executor::updateTaskState fails for a task already terminal at the agent ("Task is
		// already terminated"), and Slave::_statusUpdate then drops the update: a late or replayed
		// update, non-terminal or a second terminal one, reaches neither the task's stream nor the
		// master (whose latest state stays terminal) nor the framework.
		e.log().WithFields(logrus.Fields{"task": st.TaskID.Value, "state": st.GetState(), "terminal": t.state}).
			Warn("dropped an update of a task already terminal")
		return
	}
	if t != nil && st.State != nil {
		t.state = *st.State
		e.reported = true
	}
	a.statusUpdate(e.frameworkID, e.id, st)
}

func ackEvent(st mesos.TaskStatus) *executorapi.Event {
	return &executorapi.Event{Type: executorapi.Event_ACKNOWLEDGED, Acknowledged: &executorapi.Event_Acknowledged{TaskID: st.TaskID, UUID: st.UUID}}
}
