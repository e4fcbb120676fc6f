package state_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/taskid"
)

// A business failure with attempts left: one multi ends the task, queues the shard's relaunch
// and writes its retry; the relaunch's launch records the attempt in the ledger; the last
// attempt's failure marks the run failed, once, and removes the retry.
func TestRetryIsWrittenWithTheEndOfTheTask(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	withJob(t, s, "j")
	_, err := s.RecordFires(ctx, "j", state.Fires{Last: slot0, Entries: []state.FireEntry{fired(0)}})
	must(t, err, "RecordFires")
	shard := taskid.Meta{JobName: "j", Item: 1}
	first := taskid.New(shard, taskid.Ready, "S0")
	r, _ := s.ReadyOf(ctx, "j")
	must(t, s.RecordLaunch(ctx, state.Launch{Tasks: []taskid.ID{first}, Ready: []state.ReadyEntry{r}}), "RecordLaunch")

	next := state.RetryState{Attempt: 2, NotBefore: slot0.Add(time.Minute)}
	ended, err := s.EndTaskWith(ctx, first, state.Failover, state.EndOptions{Retry: &next})
	must(t, err, "EndTaskWith retry")
	if !ended.Removed || !ended.Retried {
		t.Fatalf("ended %+v; want removed and retried", ended)
	}
	if got, ok, err := s.RetryOf(ctx, shard); err != nil || !ok || got.Attempt != 2 || !got.NotBefore.Equal(next.NotBefore) {
		t.Fatalf("retry %+v %v %v; want attempt 2", got, ok, err)
	}
	fos, _ := s.Failovers(ctx)
	if len(fos) != 1 || fos[0].Meta != shard {
		t.Fatalf("failover queue %+v; want the shard", fos)
	}

	second := taskid.New(shard, taskid.Failover, "S0")
	must(t, s.RecordLaunch(ctx, state.Launch{Tasks: []taskid.ID{second}, Failover: fos}), "RecordLaunch of the retry")
	l, _, _ := s.FireLedger(ctx, "j")
	if e := l.Fires[0]; e.Attempts != 2 || e.Tasks != 2 {
		t.Fatalf("ledger entry %+v; want attempt 2 and both tasks", e)
	}

	reason := state.ReasonRetriesExhausted(2)
	_, err = s.EndTaskWith(ctx, second, state.NoFollowUp, state.EndOptions{FireFailed: reason})
	must(t, err, "EndTaskWith failed")
	if _, ok, _ := s.RetryOf(ctx, shard); ok {
		t.Fatal("the retry node outlived the run")
	}
	l, _, _ = s.FireLedger(ctx, "j")
	if l.Fires[0].Failed != reason || !strings.Contains(reason, "2 attempts") {
		t.Fatalf("failed %q; want %q", l.Fires[0].Failed, reason)
	}
}

// A task that finishes ends its shard's retry; deleting the job removes its retries.
func TestRetryEndsWithTheRunAndTheJob(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := ctxT(t)
	withJob(t, s, "j")
	withJob(t, s, "other")
	a, b := taskid.Meta{JobName: "j", Item: 0}, taskid.Meta{JobName: "j", Item: 1}
	for _, m := range []taskid.Meta{a, b, {JobName: "other", Item: 0}} {
		id := taskid.New(m, taskid.Ready, "S0")
		must(t, s.RecordLaunch(ctx, state.Launch{Tasks: []taskid.ID{id}}), "RecordLaunch")
		_, err := s.EndTaskWith(ctx, id, state.Failover, state.EndOptions{Retry: &state.RetryState{Attempt: 2}})
		must(t, err, "EndTaskWith")
	}
	fos, _ := s.Failovers(ctx)
	var forA []state.FailoverEntry
	for _, f := range fos {
		if f.Meta == a {
			forA = append(forA, f)
		}
	}
	retryA := taskid.New(a, taskid.Failover, "S0")
	must(t, s.RecordLaunch(ctx, state.Launch{Tasks: []taskid.ID{retryA}, Failover: forA}), "RecordLaunch")
	_, err := s.EndTask(ctx, retryA, state.NoFollowUp)
	must(t, err, "EndTask finished")
	if _, ok, _ := s.RetryOf(ctx, a); ok {
		t.Fatal("a finished retry left its node")
	}
	must(t, s.DeleteJob(ctx, "j"), "DeleteJob")
	all, err := s.Retries(ctx)
	must(t, err, "Retries")
	if len(all) != 1 || all[taskid.Meta{JobName: "other", Item: 0}].Attempt != 2 {
		t.Fatalf("retries after deleting j: %+v; want only other's", all)
	}
}
