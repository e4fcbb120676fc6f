package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/taskdata"
	"github.com/ejcloud/ejcloud/taskend"
	"github.com/ejcloud/ejcloud/taskid"
)

// A task whose executor died (or did not come back after its agent restarted) is reported
// failed by the agent, whether or not its run had ended: the executor may have been killed
// between the script's end and the agent's receipt of TASK_FINISHED. Failing such a task over
// would run a shard that ran. So before recording such an update the leader reads the run's
// end record (package taskend), which the script's supervisor writes the moment the script
// ends, from the executor's sandbox through the agent's /files/read, and records what the run
// did: an exit 0 is TASK_FINISHED, another exit a failure of the job's own (no failover), and
// no record (the run died with its executor) or an agent that cannot be read the update as
// Mesos sent it.
//
// The reads are off the event loop; the update is recorded, and acknowledged, once they are
// done. Until then further updates of the task (a retry of the same one, an answer to a
// reconciliation) are left unrecorded and unacknowledged, so that none fails it over first.

// endCheckTimeout bounds the reads of one batch of end records.
const endCheckTimeout = 10 * time.Second

// maxEndChecks bounds the batches read at once.
const maxEndChecks = 4

// endUnknown reports whether st is the agent ending a task for its executor's sake, which
// says nothing of whether the task's run had ended.
func endUnknown(st mesos.TaskStatus) bool {
	if st.GetSource() != mesos.SOURCE_AGENT || st.AgentID == nil {
		return false
	}
	switch st.GetState() {
	case mesos.TASK_FAILED, mesos.TASK_LOST, mesos.TASK_GONE:
	default:
		return false
	}
	switch st.GetReason() {
	case mesos.REASON_EXECUTOR_TERMINATED, mesos.REASON_EXECUTOR_REREGISTRATION_TIMEOUT,
		mesos.REASON_CONTAINER_LIMITATION, mesos.REASON_CONTAINER_LIMITATION_MEMORY, mesos.REASON_CONTAINER_LIMITATION_DISK:
		return true
	}
	return false
}

// checkEnds takes out of sts the updates whose run's end must be read first, and starts the
// reads; it returns the rest, to be recorded now. Updates of a task whose end is being read
// for this subscription are dropped unacknowledged.
func (ld *leader) checkEnds(ctx context.Context, sts []mesos.TaskStatus) []mesos.TaskStatus {
	var now, check []mesos.TaskStatus
	for _, st := range sts {
		tid := st.TaskID.Value
		switch {
		case ld.checking[tid] != nil && ld.checking[tid] == ld.sub:
			ld.log.WithFields(logrus.Fields{"task": tid, "state": st.GetState().String()}).
				Debug("update of a task whose run's end is being read; left for Mesos to send again")
		case endUnknown(st) && ld.holdsRunning(ctx, tid):
			// A read started for an earlier subscription was given up with its stream (ctx):
			// it never hands its update back, and this one is checked afresh.
			ld.checking[tid] = ld.sub
			check = append(check, st)
		default:
			now = append(now, st)
		}
	}
	if len(check) > 0 {
		ld.startEndCheck(ctx, check)
	}
	return now
}

// holdsRunning reports whether tid is in the running queue (a read of the model). A failed
// read counts as yes: the check then costs a few reads, and decides nothing by itself.
func (ld *leader) holdsRunning(ctx context.Context, tid string) bool {
	id, err := taskid.Parse(tid)
	if err != nil {
		return false
	}
	running, err := ld.store.IsRunning(ctx, id)
	return running || err != nil
}

// startEndCheck reads the end records of sts off the loop and hands the updates to record back
// to it.
func (ld *leader) startEndCheck(ctx context.Context, sts []mesos.TaskStatus) {
	sub := ld.sub
	go func() {
		select {
		case ld.endChecks <- struct{}{}:
		case <-ctx.Done():
			return
		}
		rctx, cancel := context.WithTimeout(ctx, endCheckTimeout)
		out := ld.readEnds(rctx, sts)
		cancel()
		<-ld.endChecks
		select {
		case ld.exec <- func(ctx context.Context) {
			for _, st := range sts {
				if ld.checking[st.TaskID.Value] == sub { // not a later subscription's read
					delete(ld.checking, st.TaskID.Value)
				}
			}
			ld.recordAll(ctx, out, 0)
		}:
		case <-ctx.Done():
		}
	}()
}

// readEnds returns sts with each update whose run's end record says how it ended replaced by
// what the run did.
func (ld *leader) readEnds(ctx context.Context, sts []mesos.TaskStatus) []mesos.TaskStatus {
	out := make([]mesos.TaskStatus, len(sts))
	copy(out, sts)
	log := ld.log.WithField("tasks", len(sts))
	unreadable := func(err error, what string) []mesos.TaskStatus {
		log.WithError(err).Warn("cannot read the runs' end records (" + what + "); failing the tasks over")
		ld.inst.metrics.executorDeaths.WithLabelValues("unreadable").Add(float64(len(sts)))
		return out
	}
	fwID, err := ld.store.FrameworkID(ctx)
	if err != nil {
		return unreadable(err, "no framework id")
	}
	doc, err := ld.masterState(ctx)
	if err != nil {
		return unreadable(err, "master state")
	}
	reader := ld.mesosReader()
	agents := map[string]agentDirs{}
	for i, st := range sts {
		aid := st.AgentID.Value
		dirs, ok := agents[aid]
		if !ok {
			dirs, err = executorDirs(ctx, reader, doc, fwID, aid)
			if err != nil {
				log.WithError(err).WithField("agent", aid).Warn("cannot read the runs' end records; failing the tasks over")
			}
			agents[aid] = dirs
		}
		var execID string
		if st.ExecutorID != nil {
			execID = st.ExecutorID.Value
		}
		rec, found, err := findEnd(ctx, reader, dirs, execID, st.TaskID.Value)
		tlog := ld.log.WithFields(logrus.Fields{"task": st.TaskID.Value, "state": st.GetState().String(), "reason": st.GetReason().String()})
		outcome := "not_ended"
		switch {
		case errors.Is(err, errAgentUnread):
			outcome = "unreadable" // its agent's warning above says why, once for its tasks
			tlog.Debug("its agent could not be read; failing the task over")
		case err != nil:
			outcome = "unreadable"
			tlog.WithError(err).Warn("cannot read the run's end record; failing the task over")
		case !found:
			tlog.Info("no end record: the run died with its executor")
		case !rec.Exited:
			tlog.WithField("record", rec.String()).Info("the run was killed by a signal, perhaps with its executor")
		default:
			out[i] = endedAs(st, rec)
			outcome = map[bool]string{true: "finished", false: "job_failed"}[rec.Succeeded()]
			tlog.WithFields(logrus.Fields{"record": rec.String(), "recorded_as": out[i].GetState().String()}).
				Warn("the run had ended before its executor died; recording how it ended, not the agent's report")
		}
		ld.inst.metrics.executorDeaths.WithLabelValues(outcome).Inc()
	}
	return out
}

// endedAs is the update that says what a run whose end record is rec did, in place of the
// agent's st; it is acknowledged as st (same uuid). A script killed by a signal (it may have
// been the kill of its executor's death) leaves st as it is.
func endedAs(st mesos.TaskStatus, rec taskend.Record) mesos.TaskStatus {
	if !rec.Exited {
		return st
	}
	said := fmt.Sprintf("the agent reported %s (%s %q)", st.GetState(), st.GetReason(), st.GetMessage())
	out := st
	out.Reason = nil
	if rec.Succeeded() {
		msg := "the run's script exited 0 before its executor died (its end record); " + said
		out.State, out.Message, out.Data = mesos.TASK_FINISHED.Enum(), &msg, nil
		return out
	}
	msg := fmt.Sprintf("job failed: script exited with status %d before its executor died (its end record); %s", rec.Code, said)
	out.State, out.Message, out.Data = mesos.TASK_FAILED.Enum(), &msg, taskdata.Status{JobFailed: true}.Encode()
	return out
}

// agentDirs is where an agent is served and its sandboxes of this framework's executors, live
// and completed, by executor id.
type agentDirs struct {
	addr string
	dirs map[string][]string
}

// agentFrameworks is what the sandbox lookup and the end check read of an agent's own /state
// (a real master does not report executors' directories; their agents do): a real agent lists
// an exited executor under its framework's completed_executors, and a framework with no live
// executor left under completed_frameworks.
type agentFrameworks struct {
	Hostname            string           `json:"hostname"`
	Frameworks          []agentFramework `json:"frameworks"`
	CompletedFrameworks []agentFramework `json:"completed_frameworks"`
}

type agentFramework struct {
	ID                 string          `json:"id"`
	Executors          []agentExecutor `json:"executors"`
	CompletedExecutors []agentExecutor `json:"completed_executors"`
}

type agentExecutor struct {
	ID        string `json:"id"`
	Directory string `json:"directory"`
}

// executorDirs reads, from the agent's own /state, the sandboxes of the framework's executors
// on agent aid.
func executorDirs(ctx context.Context, agents mesosReader, doc masterState, fwID, aid string) (agentDirs, error) {
	addr, err := doc.agentAddr(aid)
	if err != nil {
		return agentDirs{}, err
	}
	st, err := readAgentState(ctx, agents, addr)
	if err != nil {
		return agentDirs{}, err
	}
	out := agentDirs{addr: addr, dirs: map[string][]string{}}
	for _, f := range append(st.Frameworks, st.CompletedFrameworks...) {
		if f.ID != fwID {
			continue
		}
		for _, e := range append(f.Executors, f.CompletedExecutors...) {
			if e.Directory != "" {
				out.dirs[e.ID] = append(out.dirs[e.ID], e.Directory)
			}
		}
	}
	return out, nil
}

// readAgentState reads the agent's own /state at addr.
func readAgentState(ctx context.Context, agents mesosReader, addr string) (agentFrameworks, error) {
	var st agentFrameworks
	err := getAgentJSON(ctx, agents, agents.agentURL(addr, "/state"), &st)
	return st, err
}

// errAgentUnread is findEnd's error for a task whose agent's /state could not be read.
var errAgentUnread = errors.New("the agent's sandboxes are unknown: its /state could not be read")

// errNotFound is an agent's 404: from /files/read, no such file in its sandboxes.
var errNotFound = errors.New("404 Not Found")

// findEnd looks for the end record of tid in the sandboxes of executor execID (of every
// executor of the framework if execID is empty): an executor id names several sandboxes when
// the executor was started again on the agent.
func findEnd(ctx context.Context, agents mesosReader, a agentDirs, execID, tid string) (taskend.Record, bool, error) {
	if a.addr == "" {
		return taskend.Record{}, false, errAgentUnread
	}
	for id, dirs := range a.dirs {
		if execID != "" && id != execID {
			continue
		}
		for _, dir := range dirs {
			b, err := readAgentFile(ctx, agents, a.addr, taskend.Path(dir, tid))
			if errors.Is(err, errNotFound) {
				continue
			}
			if err != nil {
				return taskend.Record{}, false, err
			}
			rec, err := taskend.Parse(b)
			if err != nil {
				return taskend.Record{}, false, err
			}
			return rec, true, nil
		}
	}
	return taskend.Record{}, false, nil
}

// readAgentFile reads a small file of a sandbox through the agent's /files/read, as the Mesos
// web UI does.
func readAgentFile(ctx context.Context, agents mesosReader, addr, path string) ([]byte, error) {
	u := agents.agentURL(addr, "/files/read?"+url.Values{"path": {path}, "offset": {"0"}, "length": {"4096"}}.Encode())
	var doc struct {
		Data string `json:"data"`
	}
	if err := getAgentJSON(ctx, agents, u, &doc); err != nil {
		return nil, err
	}
	return []byte(doc.Data), nil
}

// getAgentJSON GETs one of an agent's JSON endpoints into v; a 404 is errNotFound.
func getAgentJSON(ctx context.Context, agents mesosReader, u string, v any) error {
	resp, err := agents.get(ctx, u)
	if err != nil {
		return fmt.Errorf("read %s: %w", u, err)
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		return fmt.Errorf("read %s: %w", u, errNotFound)
	default:
		return fmt.Errorf("read %s: %s", u, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		return fmt.Errorf("decode %s: %w", u, err)
	}
	return nil
}
