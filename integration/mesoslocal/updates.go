package mesoslocal

import (
	"bytes"
	"sort"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
)

// updateStream is the agent's status update stream of one task (MESOS.md §3.4): updates are
// sent to the master one at a time, the next only after the head is acknowledged, and the
// head is re-sent with backoff until it is.
type updateStream struct {
	a         *agent
	key       taskKey
	executor  string
	pending   []mesos.TaskStatus
	seen      map[string]bool // uuids received, so that a re-sent update is taken once
	interval  time.Duration
	timer     Timer
	lastTaken mesos.TaskState
}

func (s *updateStream) stop() {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
}

// agentUpdate records an update the agent itself generates (source AGENT, with a uuid).
func (a *agent) agentUpdate(frameworkID, taskID, executorID string, state mesos.TaskState, reason mesos.TaskStatus_Reason, msg string) {
	st := mesos.TaskStatus{
		TaskID: mesos.TaskID{Value: taskID}, State: state.Enum(), Reason: reason.Enum(), Message: ptr(msg),
		Source: mesos.SOURCE_AGENT.Enum(), UUID: uuidBytes(),
	}
	if executorID != "" {
		st.ExecutorID = &mesos.ExecutorID{Value: executorID}
	}
	a.statusUpdate(frameworkID, executorID, st)
}

// statusUpdate enters an update into its task's stream; it reports false for a duplicate.
// Caller holds c.mu.
func (a *agent) statusUpdate(frameworkID, executorID string, st mesos.TaskStatus) bool {
	key := taskKey{frameworkID, st.TaskID.Value}
	s := a.streams[key]
	if s == nil {
		s = &updateStream{a: a, key: key, executor: executorID, seen: map[string]bool{}}
		a.streams[key] = s
	}
	if s.seen[string(st.UUID)] {
		return false
	}
	s.seen[string(st.UUID)] = true
	st.AgentID = &mesos.AgentID{Value: a.id}
	if executorID != "" {
		st.ExecutorID = &mesos.ExecutorID{Value: executorID}
	}
	if st.Timestamp == nil {
		st.Timestamp = ptr(a.c.now())
	}
	if h := a.c.opts.OnStatusUpdate; h != nil {
		h(frameworkID, st)
	}
	s.pending = append(s.pending, st)
	// Only the head goes to the master: an update behind it is known to the master (as the
	// sent head's latest_state, MESOS.md §3.4) only when the head is sent again, at its retry or
	// once the head is acknowledged. Until then the master holds the task's resources.
	if len(s.pending) == 1 {
		s.interval = a.c.opts.StatusUpdateRetryMin
		a.sendHead(s)
	}
	return true
}

// sendHead forwards the head of a stream to the master, if linked, and arms its retry.
func (a *agent) sendHead(s *updateStream) {
	s.stop()
	if len(s.pending) == 0 {
		return
	}
	if a.linked() {
		latest := *s.pending[len(s.pending)-1].State
		a.c.forward(a, s.key.framework, s.pending[0], latest)
	}
	interval := s.interval
	s.timer = a.c.clock.AfterFunc(interval, func() {
		a.c.mu.Lock()
		defer a.c.mu.Unlock()
		if a.streams[s.key] != s {
			return
		}
		s.interval *= 2
		if s.interval > a.c.opts.StatusUpdateRetryMax {
			s.interval = a.c.opts.StatusUpdateRetryMax
		}
		a.sendHead(s)
	})
}

// acknowledged applies the framework's ACK: an ack of the head's uuid pops it (and closes the
// stream if it was terminal); any other ack is ignored.
func (a *agent) acknowledged(frameworkID, taskID string, uuid []byte) {
	key := taskKey{frameworkID, taskID}
	s := a.streams[key]
	if s == nil || len(s.pending) == 0 || !bytes.Equal(s.pending[0].UUID, uuid) {
		return
	}
	head := s.pending[0]
	s.pending = s.pending[1:]
	s.stop()
	if terminal(*head.State) {
		delete(a.streams, key)
		for k, e := range a.executors {
			if t := e.tasks[taskID]; t != nil && k.framework == frameworkID {
				e.completeTask(taskID, t)
				delete(e.tasks, taskID)
				// Slave::_statusUpdateAcknowledgement: an executor that has ended goes with the
				// acknowledgement of its last task's terminal update.
				if e.state == execTerminated && len(e.tasks) == 0 {
					a.removeExecutor(e)
				}
			}
		}
		return
	}
	s.interval = a.c.opts.StatusUpdateRetryMin
	a.sendHead(s)
}

// resumeUpdates re-sends the head of every stream of a framework at once and resets its
// backoff, as agents do when the framework re-subscribes (MESOS.md §2.3).
func (a *agent) resumeUpdates(frameworkID string) {
	for _, key := range sortedTaskKeys(a.streams) {
		if key.framework == frameworkID || frameworkID == "" {
			s := a.streams[key]
			s.interval = a.c.opts.StatusUpdateRetryMin
			a.sendHead(s)
		}
	}
}

// sortedTaskKeys is m's keys by framework, then task: the order updates go out in.
func sortedTaskKeys[V any](m map[taskKey]V) []taskKey {
	keys := make([]taskKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].framework != keys[j].framework {
			return keys[i].framework < keys[j].framework
		}
		return keys[i].task < keys[j].task
	})
	return keys
}

func failureEvent(agentID, executorID string, status int32) *scheduler.Event {
	ev := &scheduler.Event{Type: scheduler.Event_FAILURE, Failure: &scheduler.Event_Failure{AgentID: &mesos.AgentID{Value: agentID}}}
	if executorID != "" {
		ev.Failure.ExecutorID = &mesos.ExecutorID{Value: executorID}
		ev.Failure.Status = &status
	}
	return ev
}
