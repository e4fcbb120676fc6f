package mesoslocal_test

import (
	"regexp"
	"testing"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
)

// §9 items 1, 9, 24, 41: the whole launch path under both codecs — ids of the right form,
// executor updates with 16-byte uuids, acknowledged in order.
func TestLaunchRunFinishUnderBothCodecs(t *testing.T) {
	t.Parallel()
	forEachCodec(t, func(t *testing.T, media string) {
		c := newCluster(t)
		s := subscribe(t, c.URL(), media, paInfo())
		if !regexp.MustCompile(`^[0-9a-f-]{36}-0000$`).MatchString(s.FrameworkID) {
			t.Fatalf("framework id %q is not <uuid>-0000", s.FrameworkID)
		}
		o := s.Offers()[0]
		if !regexp.MustCompile(`^[0-9a-f-]{36}-O\d+$`).MatchString(o.ID.Value) || !regexp.MustCompile(`^[0-9a-f-]{36}-S\d+$`).MatchString(o.AgentID.Value) {
			t.Fatalf("offer %q on agent %q: ids not of the Mesos form", o.ID.Value, o.AgentID.Value)
		}
		s.Launch(o, task("t1", o, testExecutor("e1", "basic"), "finish"))
		running := s.Update("t1")
		if *running.State != mesos.TASK_RUNNING || len(running.UUID) != 16 || *running.Source != mesos.SOURCE_EXECUTOR {
			t.Fatalf("first update = %v; want TASK_RUNNING from the executor with a 16-byte uuid", running.String())
		}
		if running.AgentID == nil || running.AgentID.Value != o.AgentID.Value || running.ExecutorID == nil || running.ExecutorID.Value != "e1" {
			t.Fatalf("the agent must fill in agent and executor ids: %v", running.String())
		}
		s.Ack(running)
		finished := s.Update("t1")
		if *finished.State != mesos.TASK_FINISHED || len(finished.UUID) != 16 {
			t.Fatalf("second update = %v; want TASK_FINISHED with a uuid", finished.String())
		}
		s.Ack(finished)
		_ = scheduler.Event_UPDATE
	})
}
