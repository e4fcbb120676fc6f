package scheduler

import (
	"context"
	"slices"
	"testing"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"

	"github.com/ejcloud/ejcloud/taskid"
)

func TestStaleTasks(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	const threshold = time.Minute
	type step struct {
		at         time.Duration // after t0
		heard      string        // a task's agent speaks
		fromMaster bool
		ended      string
		sync       []string // the running queue as read at reconciliation
		warn       string   // the tasks due are marked warned
	}
	for _, tc := range []struct {
		name      string
		steps     []step
		checkAt   time.Duration
		wantDue   []string
		wantCount int
	}{
		{name: "silent past the threshold is due", steps: []step{{heard: "a"}, {at: 30 * time.Second, heard: "b"}},
			checkAt: 61 * time.Second, wantDue: []string{"a"}},
		{name: "an update from the agent resets the clock", steps: []step{{heard: "a"}, {at: 50 * time.Second, heard: "a"}},
			checkAt: 61 * time.Second},
		{name: "the master's reconciliation answer is not news of the task", steps: []step{{heard: "a"}, {at: 50 * time.Second, heard: "a", fromMaster: true}},
			checkAt: 61 * time.Second, wantDue: []string{"a"}},
		{name: "an ended task is forgotten", steps: []step{{heard: "a"}, {at: time.Second, ended: "a"}},
			checkAt: time.Hour},
		{name: "sync starts the clock of tasks found in the queue and drops the rest",
			steps:   []step{{heard: "gone"}, {at: 30 * time.Second, sync: []string{"found"}}},
			checkAt: 61 * time.Second},
		{name: "sync keeps the clock of a known task", steps: []step{{heard: "a"}, {at: 30 * time.Second, sync: []string{"a"}}},
			checkAt: 61 * time.Second, wantDue: []string{"a"}},
		{name: "a warned task is counted once and not due again", steps: []step{{heard: "a"}, {at: 61 * time.Second, warn: "a"}},
			checkAt: 2 * time.Minute, wantCount: 1},
		{name: "a warned task that speaks again is no longer counted", steps: []step{{heard: "a"}, {at: 61 * time.Second, warn: "a"}, {at: 62 * time.Second, heard: "a"}},
			checkAt: 63 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s staleTasks
			for _, st := range tc.steps {
				now := t0.Add(st.at)
				switch {
				case st.heard != "":
					s.heardOf(st.heard, st.fromMaster, now)
				case st.ended != "":
					s.ended(st.ended)
				case st.sync != nil:
					s.sync(st.sync, now)
				case st.warn != "":
					for _, tid := range s.due(threshold, now) {
						s.warned[tid] = true
					}
				}
			}
			due := s.due(threshold, t0.Add(tc.checkAt))
			slices.Sort(due)
			if !slices.Equal(due, tc.wantDue) {
				t.Errorf("due = %v; want %v", due, tc.wantDue)
			}
			if n := s.count(); n != tc.wantCount {
				t.Errorf("count = %d; want %d", n, tc.wantCount)
			}
		})
	}
}

// A task reported unreachable that comes back through STAGING, STARTING or KILLING is
// reachable again: its unreachable clock must stop, or it would later be declared lost.
func TestAnUpdateOfAnyStateStopsTheUnreachableClock(t *testing.T) {
	tid := taskid.New(taskid.Meta{JobName: "j", Item: 0}, taskid.Ready, "agent-S0").String()
	for _, s := range []mesos.TaskState{mesos.TASK_STAGING, mesos.TASK_STARTING, mesos.TASK_KILLING} {
		t.Run(s.String(), func(t *testing.T) {
			ld := &leader{log: quietLog(), unreachable: map[string]time.Time{tid: time.Now().Add(-time.Hour)}}
			after, err := ld.record(context.Background(), nil, mesos.TaskStatus{TaskID: mesos.TaskID{Value: tid}, State: s.Enum()})
			if err != nil {
				t.Fatal(err)
			}
			after()
			if _, still := ld.unreachable[tid]; still {
				t.Errorf("%s left the task's unreachable clock running", s)
			}
		})
	}
}
