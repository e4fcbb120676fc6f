package executor

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/taskdata"
)

var randRead = rand.Read

// runner runs one execution of a shard. It returns nil on success, a *jobFailure when the job
// failed by its own fault, errKilled when ctx was cancelled, and any other error for an
// infrastructure failure.
type runner interface {
	run(ctx context.Context, k killing) error
}

// killing is what a runner reads of its task's kill: the grace period, and a channel closed
// when a later kill cuts it (a lease lapse, the agent's shutdown), read together so that a cut
// after the read is seen.
type killing interface {
	graceAndCut() (time.Duration, <-chan struct{})
}

// jobFailure is a business failure: the scheduler must not fail the shard over.
type jobFailure struct{ cause string }

func (f *jobFailure) Error() string { return f.cause }

// task is a launched shard.
type task struct {
	e       *Executor
	id      string
	payload taskdata.Payload
	run     runner
	cancel  context.CancelFunc
	ctx     context.Context

	mu     sync.Mutex // guards grace, cut and fenced
	grace  time.Duration
	cut    chan struct{} // closed, and made anew, when a kill shortens grace
	fenced time.Duration // the lease that lapsed, if the task was fenced (lease.go)
}

// fence kills the task at once, SIGKILL with no grace: its lease lapsed, and a relaunch may
// start elsewhere. It ends TASK_FAILED, so that a scheduler still holding it fails it over.
func (t *task) fence(lease time.Duration) {
	t.mu.Lock()
	t.fenced = lease
	t.mu.Unlock()
	t.kill(0)
}

// fencedReport is the final update of a fenced task, if it was fenced.
func (t *task) fencedReport() (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.fenced == 0 {
		return "", false
	}
	return fmt.Sprintf("fenced: no word from the scheduler for the whole lease (%v); killed so that no relaunch runs beside it", t.fenced), true
}

// kill cancels the task; a script then gets SIGTERM, and SIGKILL after grace.
func (t *task) kill(grace time.Duration) {
	t.mu.Lock()
	if grace < t.grace {
		close(t.cut)
		t.cut = make(chan struct{})
	}
	t.grace = grace
	t.mu.Unlock()
	t.cancel()
}

func (t *task) graceAndCut() (time.Duration, <-chan struct{}) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.grace, t.cut
}

func (t *task) killGrace() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.grace
}

func (t *task) log() logrus.FieldLogger { return t.e.log.WithField("task", t.id) }

// launch starts a task. Bad input (unparsable data, a task_id that is not the payload's, an
// unknown jobClass) ends it with TASK_ERROR at once, and the executor goes on serving its
// other tasks.
func (e *Executor) launch(ti mesos.TaskInfo) {
	id := ti.TaskID.Value
	e.mu.Lock()
	e.unackedTasks[id] = ti
	_, dup := e.tasks[id]
	stopping := e.stopping
	e.mu.Unlock()
	if dup || stopping {
		return
	}
	p, err := taskdata.DecodePayload(ti.Data)
	if err != nil {
		e.update(id, mesos.TASK_ERROR, err.Error(), nil)
		return
	}
	// The run's end record is written under the payload's id and removed, once the agent has
	// the final update, under the task's: with two ids it would outlive the run, and a
	// scheduler reading it for one task would be told of the other's end.
	if sc := p.ShardingContext.TaskID; sc != id {
		e.update(id, mesos.TASK_ERROR, fmt.Sprintf("task_id %q is not the payload's shardingContext.taskId %q: they must be the same", id, sc), nil)
		return
	}
	r, err := e.runnerFor(p)
	if err != nil {
		e.update(id, mesos.TASK_ERROR, err.Error(), nil)
		return
	}
	grace := defaultKillGrace
	if kp := ti.KillPolicy; kp != nil && kp.GracePeriod != nil {
		grace = time.Duration(kp.GracePeriod.Nanoseconds)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t := &task{e: e, id: id, payload: p, run: r, ctx: ctx, cancel: cancel, grace: grace, cut: make(chan struct{})}
	e.mu.Lock()
	e.tasks[id] = t
	e.running.Add(1)
	e.mu.Unlock()
	go func() {
		defer e.running.Done()
		defer func() {
			e.mu.Lock()
			delete(e.tasks, id)
			e.mu.Unlock()
			cancel()
		}()
		if p.Job.JobExecutionType == config.Daemon {
			t.daemon()
		} else {
			t.transient()
		}
	}()
}

// kill handles KILL; the grace comes from the event's kill policy, else the task's.
func (e *Executor) kill(id string, kp *mesos.KillPolicy) {
	e.mu.Lock()
	t := e.tasks[id]
	e.mu.Unlock()
	if t == nil {
		e.log.WithField("task", id).Info("KILL for a task that is not running")
		return
	}
	grace := t.killGrace()
	if kp != nil && kp.GracePeriod != nil {
		grace = time.Duration(kp.GracePeriod.Nanoseconds)
	}
	t.kill(grace)
}

func (t *task) execution() *taskdata.Execution {
	sc := t.payload.ShardingContext
	return &taskdata.Execution{
		ID: fmt.Sprintf("%x", newUUID()), JobName: sc.JobName, TaskID: sc.TaskID, Hostname: t.e.hostname, IP: t.e.ip,
		ShardingItem: sc.ShardingItem, ExecutionSource: taskdata.Source(sc.TaskID), StartTime: time.Now(),
	}
}

// transient runs the shard once (SPEC §6.2).
func (t *task) transient() {
	ex := t.execution()
	t.e.update(t.id, mesos.TASK_RUNNING, "", taskdata.Status{Execution: ex}.Encode())
	err := t.runOnce()
	var jf *jobFailure
	fenced, isFenced := t.fencedReport()
	switch {
	case errors.Is(err, errKilled) && isFenced:
		ex.Complete(time.Now(), err)
		t.e.update(t.id, mesos.TASK_FAILED, fenced, taskdata.Status{Execution: ex}.Encode())
	case errors.Is(err, errKilled):
		ex.Complete(time.Now(), err)
		t.e.update(t.id, mesos.TASK_KILLED, "killed", taskdata.Status{Execution: ex}.Encode())
	case errors.As(err, &jf):
		ex.Complete(time.Now(), err)
		t.e.update(t.id, mesos.TASK_FAILED, "job failed: "+jf.cause, taskdata.Status{JobFailed: true, Execution: ex}.Encode())
	case err != nil:
		ex.Complete(time.Now(), err)
		t.e.update(t.id, mesos.TASK_ERROR, err.Error(), taskdata.Status{Execution: ex}.Encode())
	default:
		ex.Complete(time.Now(), nil)
		t.e.update(t.id, mesos.TASK_FINISHED, "", taskdata.Status{Execution: ex}.Encode())
	}
}

// runOnce runs the shard, turning a panic into a job failure.
func (t *task) runOnce() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = &jobFailure{cause: fmt.Sprintf("panic: %v", r)}
		}
	}()
	return t.run.run(t.ctx, t)
}

// daemon runs the shard on the job's cron in the job's zone until the task is killed,
// reporting sampled runs as RUNNING "BEGIN" / "COMPLETE" heartbeats (SPEC §6.2).
func (t *task) daemon() {
	job := t.payload.Job
	sched, err := job.Schedule()
	loc, lerr := job.Location()
	if err != nil || sched == nil || lerr != nil {
		t.e.update(t.id, mesos.TASK_ERROR, fmt.Sprintf("daemon job %q has no usable schedule: cron %q, zone %q", job.JobName, job.Cron, job.TimeZone), nil)
		return
	}
	t.e.update(t.id, mesos.TASK_RUNNING, "", nil)
	for run := 1; ; run++ {
		next := sched.Next(time.Now().In(loc))
		if next.IsZero() {
			t.log().Info("the daemon's cron never fires again; waiting to be killed")
			<-t.ctx.Done()
			break
		}
		timer := time.NewTimer(time.Until(next))
		select {
		case <-timer.C:
		case <-t.ctx.Done():
			timer.Stop()
		}
		if t.ctx.Err() != nil {
			break
		}
		t.e.mu.Lock()
		n := t.e.sampling
		t.e.mu.Unlock()
		sampled := n <= 1 || run%n == 0
		ex := t.execution()
		if sampled {
			t.e.update(t.id, mesos.TASK_RUNNING, "BEGIN", taskdata.Status{Execution: ex}.Encode())
		}
		err := t.runOnce()
		if errors.Is(err, errKilled) {
			break
		}
		if err != nil {
			t.log().WithError(err).Warn("daemon run failed")
		}
		if sampled {
			ex.Complete(time.Now(), err)
			t.e.update(t.id, mesos.TASK_RUNNING, "COMPLETE", taskdata.Status{Execution: ex}.Encode())
		}
	}
	if fenced, ok := t.fencedReport(); ok {
		t.e.update(t.id, mesos.TASK_FAILED, fenced, nil)
		return
	}
	t.e.update(t.id, mesos.TASK_KILLED, "killed", nil)
}
