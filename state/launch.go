package state

import (
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/taskid"
)

// Launch is what one offer cycle is about to launch (SPEC §5.4 step 4).
type Launch struct {
	Tasks []taskid.ID
	// Ready holds, for each READY job launched, its entry as read when the cycle chose it; the
	// count drops by one (the node goes at ≤ 1), checked against that version.
	Ready []ReadyEntry
	// Failover holds the failover entries relaunched, as read; each is deleted, checked
	// against that version.
	Failover []FailoverEntry
	// Overlapping names the jobs whose runs may overlap (concurrencyPolicy Allow): their
	// tasks' running nodes are named by task id, so that a shard may run twice at once. The
	// others' are named by shard, and a shard already running refuses the launch.
	Overlapping []string
	// Configs are the launched jobs' config versions as the cycle read them, checked: an
	// update written since refuses the launch. Else its tasks would run the replaced config
	// for good, since the update's kills read the running tasks before this launch is written.
	Configs []JobAt
}

// JobAt is a job's config node version as read.
type JobAt struct {
	JobName string
	Version int32
}

// RecordLaunch writes a launch ahead of telling Mesos, as one multi: it creates the running
// node of every task, deletes the relaunched failover entries, decrements the ready counts and
// writes the task ids into the fire ledgers (fires.go).
// If anything changed since the caller read it (a version check fails, a shard is already
// running), nothing is written and the error says which node; the caller must then launch
// nothing this cycle.
func (s *Store) RecordLaunch(ctx context.Context, l Launch) error {
	ops := make([]any, 0, len(l.Tasks)+len(l.Ready)+len(l.Failover))
	created := map[string]bool{}
	for _, id := range l.Tasks {
		parent := s.path(runningDir, id.JobName)
		if s.mv != nil {
			// The model knows whether the job's node exists: create it in the same multi.
			if st, err := s.stat(ctx, parent); err != nil {
				return fmt.Errorf("record launch: %w", err)
			} else if st == nil && !created[parent] {
				ops = append(ops, s.createOp(parent, nil))
				created[parent] = true
			}
		} else if err := s.ensureParent(ctx, parent); err != nil {
			return fmt.Errorf("record launch: %w", err)
		}
		ops = append(ops, s.createOp(parent+"/"+nodeName(id, slices.Contains(l.Overlapping, id.JobName)), []byte(id.String())))
	}
	for _, c := range l.Configs {
		ops = append(ops, checkOp(s.path(jobsDir, c.JobName), c.Version))
	}
	failoverJobs := map[string]bool{}
	for _, f := range l.Failover {
		ops = append(ops, deleteOp(s.path(failoverDir, f.Meta.JobName, entryNode(f.Meta, f.Node)), f.Version))
		failoverJobs[f.Meta.JobName] = true
	}
	for _, r := range l.Ready {
		p := s.path(readyDir, r.JobName)
		if r.Count <= 1 {
			ops = append(ops, deleteOp(p, r.Version))
		} else {
			ops = append(ops, setOp(p, []byte(strconv.Itoa(r.Count-1)), r.Version))
		}
	}
	ledger, err := s.launchLedgerOps(ctx, l, time.Now())
	if err != nil {
		return fmt.Errorf("record launch: %w", err)
	}
	ops = append(ops, ledger...)
	if err := s.multi(ctx, ops...); err != nil {
		var op *OpError
		if errors.As(err, &op) && op.Op == "create" && errors.Is(err, ErrNotFound) {
			s.parents.Delete(parentOf(op.Path)) // the job's running node went away
		}
		return fmt.Errorf("record launch of %d tasks: %w", len(l.Tasks), err)
	}
	for job := range failoverJobs {
		s.bestEffortDelete(ctx, s.path(failoverDir, job))
	}
	return nil
}

func parentOf(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[:i]
		}
	}
	return p
}

// FollowUp says what happens to a shard after its task ended (SPEC §5.7).
type FollowUp int

const (
	// NoFollowUp: the task finished, failed by the job's own fault, or is not to be relaunched.
	NoFollowUp FollowUp = iota
	// Failover: the task died of an infrastructure failure; queue its shard for relaunch.
	Failover
	// Rerun: a killed DAEMON task; set the job's ready count to 1.
	Rerun
)

// Ended reports what EndTask did.
type Ended struct {
	// Removed is false when the running node did not hold this task (already ended, or a
	// newer task runs the shard): a duplicate or stale update, and nothing was written.
	Removed bool
	// Requeued is true when the follow-up was written; it is false when the shard was queued
	// already or the queue was full (logged as a warning).
	Requeued bool
	// Stopped is true when EndTaskAndStop wrote the job's stop mark; it is false when the job
	// was stopped already (the first reason is kept).
	Stopped bool
	// Retried is true when EndTaskWith queued the shard's retry.
	Retried bool
}

// EndOptions are what issue 19 adds to the end of a task.
type EndOptions struct {
	// Retry, with the Failover follow-up, queues the shard's next attempt: its failover node
	// and its retry node (retry.go).
	Retry *RetryState
	// FireFailed, if set, marks the run's fire ledger entry as failed for good, once.
	FireFailed string
}

// EndTask records the end of a task as one multi: its running node goes and, with Failover,
// its shard joins the failover queue unless queued already, or, with Rerun, the job's ready
// count becomes 1. The caller decides the follow-up from the job's config and disable state.
func (s *Store) EndTask(ctx context.Context, id taskid.ID, next FollowUp) (Ended, error) {
	return s.endTask(ctx, id, next, nil, EndOptions{})
}

// EndTaskWith is EndTask with a retry or a failed run (EndOptions) written in the same multi.
// Without a retry, a task that ends with no follow-up (finished, failed for good, killed) also
// removes its shard's retry node: that retry is over.
func (s *Store) EndTaskWith(ctx context.Context, id taskid.ID, next FollowUp, o EndOptions) (Ended, error) {
	return s.endTask(ctx, id, next, nil, o)
}

// EndTaskAndStop records the end of a task that failed in a way retrying cannot heal: in one
// multi its running node goes and the job's stop mark is written (unless the job is stopped
// already), so that the mark survives a leader change exactly when the end is recorded.
func (s *Store) EndTaskAndStop(ctx context.Context, id taskid.ID, stop Stop) (Ended, error) {
	return s.endTask(ctx, id, NoFollowUp, &stop, EndOptions{FireFailed: "the job stopped: " + stop.Reason})
}

func (s *Store) endTask(ctx context.Context, id taskid.ID, next FollowUp, stop *Stop, o EndOptions) (Ended, error) {
	var out Ended
	parent := s.path(runningDir, id.JobName)
	err := retry(ctx, func() error {
		out = Ended{}
		p, n, err := s.runningNode(ctx, id)
		if err != nil || p == "" {
			return err
		}
		// A task in a node of its own is a run of a job whose runs overlap: so is its
		// failover entry, and its run ends with its own last shard.
		overlapping := path.Base(p) == id.String()
		ops := []any{deleteOp(p, n.version)}
		var follow []any
		switch next {
		case Failover:
			var queued bool
			follow, queued, err = s.failoverOps(ctx, id, overlapping)
			if queued {
				follow = nil
			}
		case Rerun:
			follow, err = s.rerunOps(ctx, id.JobName)
		}
		if errors.Is(err, ErrQueueFull) {
			follow, err = nil, nil // refused and logged by admit; the task still ended
			if next == Failover && o.FireFailed == "" {
				// Not relaunched: its run cannot succeed, and must not pass for a success.
				o.FireFailed = fmt.Sprintf("shard %d could not be queued for its relaunch: the failover queue is full", id.Item)
			}
		}
		if err != nil {
			return err
		}
		var mark []any
		if stop != nil {
			if mark, err = s.stopOps(ctx, id.JobName, *stop); err != nil {
				return err
			}
		}
		var retry []any
		retried := o.Retry != nil && next == Failover && len(follow) > 0
		switch {
		case retried:
			retry, err = s.retryOps(ctx, id.Meta, o.Retry)
		case next == NoFollowUp:
			retry, err = s.retryOps(ctx, id.Meta, nil)
		}
		if err != nil {
			return err
		}
		// The run is over when this was its last shard: none other running, none waiting for a
		// relaunch (issue 19: dependent jobs wait for that).
		var runEnded time.Time
		if len(follow) == 0 && next != Rerun {
			last, err := s.lastShard(ctx, id, overlapping)
			if err != nil {
				return err
			}
			if last {
				runEnded = time.Now().UTC()
			}
		}
		if o.FireFailed != "" || !runEnded.IsZero() {
			end, err := s.runEndOps(ctx, id, o.FireFailed, runEnded)
			if err != nil {
				return err
			}
			retry = append(retry, end...)
		}
		ops = append(append(append(ops, follow...), mark...), retry...)
		if err := s.multi(ctx, ops...); err != nil {
			return conflictIfExists(err)
		}
		out = Ended{Removed: true, Requeued: len(follow) > 0, Stopped: len(mark) > 0, Retried: retried}
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("end task %s: %w", id, err)
	}
	if out.Removed {
		s.bestEffortDelete(ctx, parent)
	}
	return out, nil
}

// lastShard reports whether task id, whose running node is being removed, is the last of its
// run: no other task of the run runs or waits for a relaunch. A job's runs never overlap
// unless overlapping (concurrencyPolicy Allow): then the run is the fire ledger's entry of the
// task (Ledger.RunOf). When the entry names every task of the run, the run ends with the last
// of them; else with the last task carrying its run id. Otherwise — an entry from before run
// ids of more shards than it keeps ids of, or a job whose runs do not overlap — the run ends
// with the job's last running node and no failover entry.
func (s *Store) lastShard(ctx context.Context, id taskid.ID, overlapping bool) (bool, error) {
	if overlapping {
		led, n, err := s.readLedger(ctx, id.JobName)
		if err != nil {
			return false, err
		}
		i := led.RunOf(id.String())
		switch {
		case !n.exists || i < 0:
		case slices.Contains(led.Fires[i].TaskIDs, id.String()) && len(led.Fires[i].TaskIDs) == led.Fires[i].Tasks:
			return s.noneOf(ctx, id, led.Fires[i].TaskIDs) // a few reads: the entry names them all
		case led.Fires[i].Run != "" && led.Fires[i].Run == id.Run():
			return s.noneOfRun(ctx, id)
		}
	}
	job := id.JobName
	st, err := s.stat(ctx, s.path(runningDir, job))
	if err != nil || st == nil || st.NumChildren > 1 {
		return false, err
	}
	fo, err := s.stat(ctx, s.path(failoverDir, job))
	if err != nil {
		return false, err
	}
	return fo == nil || fo.NumChildren == 0, nil
}

// noneOf reports whether no task of ids but id runs or waits for a relaunch (in a node of its
// own: ids are of a job whose runs overlap).
func (s *Store) noneOf(ctx context.Context, id taskid.ID, ids []string) (bool, error) {
	for _, t := range ids {
		other, err := taskid.Parse(t)
		if err != nil || t == id.String() {
			continue
		}
		p, _, err := s.runningNode(ctx, other)
		if err != nil || p != "" {
			return false, err
		}
		if fo, err := s.stat(ctx, s.path(failoverDir, id.JobName, t)); err != nil || fo != nil {
			return false, err
		}
	}
	return true, nil
}

// noneOfRun reports whether no task of id's run but id itself runs or waits for a relaunch.
// The nodes of a run whose job's runs overlap are named by their task ids (the failed task's,
// for a failover entry), so their names tell: a task's end looks at the job's nodes' names,
// and reads no node.
func (s *Store) noneOfRun(ctx context.Context, id taskid.ID) (bool, error) {
	self, run := id.String(), id.Run()
	for _, dir := range []string{runningDir, failoverDir} {
		other, err := s.anyChild(ctx, s.path(dir, id.JobName), func(name string) bool {
			return name != self && taskid.RunIn(name) == run
		})
		if err != nil || other {
			return false, err
		}
	}
	return true, nil
}

// rerunOps returns the ops that set a job's ready count to at least 1.
func (s *Store) rerunOps(ctx context.Context, job string) ([]any, error) {
	p := s.path(readyDir, job)
	st, err := s.stat(ctx, p)
	if err != nil || st != nil {
		return nil, err // already pending
	}
	admit, err := s.admit(ctx, readyDir)
	if err != nil {
		return nil, err
	}
	return []any{admit, s.createOp(p, []byte("1"))}, nil
}

// launchAgentIDLen sizes the launch of a whole job (launchFits): Mesos's agent ids are 40
// characters ("<uuid>-S<n>").
const launchAgentIDLen = 64

// launchFits refuses a job whose shards could not all be written ahead in one multi: a READY
// run launches all its shards or none (SPEC §5.5), in one write, and ZooKeeper takes at most
// jute.maxbuffer in one request. Such a job would be packed, and dropped, in every offer
// cycle, its ready entry never launched. The bound depends on the names, so it is measured.
func (s *Store) launchFits(j config.Job) error {
	n := j.ShardingTotalCount
	parent := s.path(runningDir, j.JobName)
	ops := make([]any, 0, n+2)
	ops = append(ops, s.createOp(parent, nil), setOp(s.path(readyDir, j.JobName), []byte("1"), 0))
	base := multiBytes(ops)
	agent := strings.Repeat("S", launchAgentIDLen)
	// The fire ledger is rewritten in the same multi: at most LedgerKeep entries, each with up to
	// LedgerTaskIDs task ids and a few hundred bytes of times, counts and reasons.
	sample := taskid.New(taskid.Meta{JobName: j.JobName, Item: n}, taskid.Failover, agent).String()
	reserve := LedgerKeep * (LedgerTaskIDs*(len(sample)+3) + 512)
	for i := range n {
		id := taskid.New(taskid.Meta{JobName: j.JobName, Item: i}, taskid.Failover, agent)
		ops = append(ops, s.createOp(parent+"/"+nodeName(id, j.ConcurrencyPolicy == config.Allow), []byte(id.String())))
	}
	size := multiBytes(ops) + reserve
	if size <= s.maxMulti() || n == 0 {
		return nil
	}
	most := (s.maxMulti() - reserve - base) * n / (size - reserve - base)
	return &config.FieldError{Field: "shardingTotalCount", Message: fmt.Sprintf(
		"shardingTotalCount %d is more shards than one ZooKeeper write can launch (a run launches all its shards at once, and jute.maxbuffer, %d here, bounds the write): at most about %d for job %q",
		n, s.jute, most, j.JobName)}
}
