package state_test

import (
	"testing"

	"github.com/ejcloud/ejcloud/taskid"
)

func TestHasPendingWork(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	if p, err := s.HasPendingWork(ctx); err != nil || p {
		t.Fatalf("empty queues: %v, %v", p, err)
	}
	must(t, s.AddReady(ctx, "job", true), "AddReady")
	if p, err := s.HasPendingWork(ctx); err != nil || !p {
		t.Fatalf("after AddReady: pending %v, %v; want true", p, err)
	}
	must(t, s.RemoveReady(ctx, "job"), "RemoveReady")
	_, err := s.AddFailover(ctx, taskid.New(taskid.Meta{JobName: "j", Item: 0}, taskid.Ready, "S0"))
	must(t, err, "AddFailover")
	if p, err := s.HasPendingWork(ctx); err != nil || !p {
		t.Fatalf("after AddFailover: pending %v, %v; want true", p, err)
	}
}
