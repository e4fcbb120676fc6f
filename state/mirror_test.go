package state_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/state/statetest"
	"github.com/ejcloud/ejcloud/taskid"
)

// mirrored returns a plain Store and a mirrored view of another session on the same namespace:
// the plain one plays "someone else" (an operator's zkCli, an older tool).
func mirrored(t *testing.T, env statetest.Env, onChange func(state.Change)) (other, m *state.Store) {
	t.Helper()
	other = openPlain(t, env)
	base := openPlain(t, env)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	m, err := base.Mirror(ctx, onChange)
	if err != nil {
		t.Fatalf("Mirror: %v", err)
	}
	return other, m
}

func TestMirrorServesReadsWithoutZooKeeper(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	ctx := ctxT(t)
	other := openPlain(t, env)
	must(t, other.CreateApp(ctx, testApp("app")), "CreateApp")
	for i := range 20 {
		must(t, other.CreateJob(ctx, testJob(fmt.Sprintf("job%02d", i), "app")), "CreateJob")
		must(t, other.AddReady(ctx, fmt.Sprintf("job%02d", i), true), "AddReady")
	}
	must(t, other.RecordLaunch(ctx, state.Launch{Tasks: []taskid.ID{taskid.New(taskid.Meta{JobName: "job00", Item: 1}, taskid.Ready, "S0")}}), "RecordLaunch")
	must(t, other.DisableJob(ctx, "job03"), "DisableJob")
	_, m := mirrored(t, env, nil)

	before := m.RoundTrips()
	jobs, err := m.Jobs(ctx)
	must(t, err, "Jobs")
	ready, err := m.Ready(ctx)
	must(t, err, "Ready")
	running, err := m.Running(ctx)
	must(t, err, "Running")
	_, offJobs, err := m.Disabled(ctx)
	must(t, err, "Disabled")
	if trips := m.RoundTrips() - before; trips != 0 {
		t.Fatalf("reads made %d ZooKeeper round trips; want 0", trips)
	}
	if len(jobs) != 20 || len(ready) != 19 || len(running) != 1 || !offJobs["job03"] {
		t.Fatalf("model: %d jobs, %d ready, %d running, disabled %v; want 20, 19 (one disabled job's entry dropped), 1, job03", len(jobs), len(ready), len(running), offJobs)
	}
}

func TestMirrorFollowsOthersChangesToConfigsAndMarkers(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	ctx := ctxT(t)
	changes := make(chan state.Change, 100)
	other, m := mirrored(t, env, func(c state.Change) { changes <- c })
	must(t, other.CreateApp(ctx, testApp("app")), "CreateApp")
	must(t, other.CreateJob(ctx, testJob("job", "app")), "CreateJob")
	await.True(t, time.Second, "the model has the new job", func() bool { _, err := m.Job(ctx, "job"); return err == nil })

	j := testJob("job", "app")
	j.ShardingTotalCount = 7
	_, err := other.UpdateJob(ctx, j)
	must(t, err, "UpdateJob")
	await.True(t, time.Second, "the model has the changed job config", func() bool {
		got, err := m.Job(ctx, "job")
		return err == nil && got.ShardingTotalCount == 7
	})
	must(t, other.DisableJob(ctx, "job"), "DisableJob")
	await.True(t, time.Second, "the model has the disable marker", func() bool { d, err := m.JobDisabled(ctx, "job"); return err == nil && d })
	_, err = other.EnableJob(ctx, "job")
	must(t, err, "EnableJob")
	await.True(t, time.Second, "the model lost the disable marker", func() bool { d, err := m.JobDisabled(ctx, "job"); return err == nil && !d })

	seen := map[state.Change]bool{}
	await.True(t, time.Second, "every change was told", func() bool {
		for {
			select {
			case c := <-changes:
				seen[c] = true
			default:
				return seen[state.Change{Kind: "app", Name: "app"}] && seen[state.Change{Kind: "job", Name: "job"}] && seen[state.Change{Kind: "disable-job", Name: "job"}]
			}
		}
	})
}

// Caught is a barrier: once it returns, the model has what someone else wrote before the
// call, without waiting, and has read what those writes' watches reported (the registration's
// multi fires watches on the stop marks and disable markers too), so that no later read
// costs ZooKeeper a request.
func TestMirrorCaughtHasEveryChangeMadeBefore(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	ctx := ctxT(t)
	other, m := mirrored(t, env, nil)
	must(t, other.CreateApp(ctx, testApp("app")), "CreateApp")
	for i := range 10 {
		name := fmt.Sprintf("job%d", i)
		must(t, other.CreateJob(ctx, testJob(name, "app")), "CreateJob")
		j := testJob(name, "app")
		j.ShardingTotalCount = 7
		_, err := other.UpdateJob(ctx, j)
		must(t, err, "UpdateJob")
		must(t, other.DisableJob(ctx, name), "DisableJob")
		must(t, m.Caught(ctx), "Caught")
		before := m.RoundTrips()
		got, err := m.Job(ctx, name)
		if err != nil || got.ShardingTotalCount != 7 {
			t.Fatalf("after Caught, the model has %s as %+v (%v); want its update", name, got, err)
		}
		if d, err := m.JobDisabled(ctx, name); err != nil || !d {
			t.Fatalf("after Caught, the model has %s disabled %v (%v); want true", name, d, err)
		}
		if trips := m.RoundTrips() - before; trips != 0 {
			t.Fatalf("after Caught, %d ZooKeeper requests were made; want none left to make", trips)
		}
	}
	if err := other.Caught(ctx); err == nil {
		t.Error("Caught on a Store that is not a model: nil error; want one")
	}
}

// A queue node changed by someone else is not watched: the write built on the model's old
// copy is refused, the node read again, and the retry builds on what ZooKeeper holds.
func TestMirrorWriteOnAStaleNodeIsRetriedOnWhatZooKeeperHolds(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	ctx := ctxT(t)
	other, m := mirrored(t, env, nil)
	must(t, m.AddReady(ctx, "job", true), "AddReady (model)")
	must(t, other.AddReady(ctx, "job", true), "AddReady (other)")
	must(t, m.AddReady(ctx, "job", true), "AddReady (model, on a stale copy)")
	for name, s := range map[string]*state.Store{"ZooKeeper": other, "model": m} {
		if r, err := s.ReadyOf(ctx, "job"); err != nil || r.Count != 3 {
			t.Fatalf("%s: ready count %d (%v); want 3", name, r.Count, err)
		}
	}
}

// A write built on a read of a node that is gone since is a conflict, to read again, whether
// ZooKeeper or the model refuses it: a launch that took a job's ready entry while a fire was
// being written must not make the fire look like one of a deleted job (the producer drops
// those slots; a CI run lost seven fires so when a hung ZooKeeper member let both wait).
func TestAWriteOnANodeGoneSinceItsReadIsAConflict(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	ctx := ctxT(t)
	other, m := mirrored(t, env, nil)
	for name, s := range map[string]*state.Store{"ZooKeeper": other, "model": m} {
		job := "job-" + name
		must(t, s.AddReady(ctx, job, true), name+": AddReady")
		v, ok, err := s.ReadyVersion(ctx, job)
		if err != nil || !ok {
			t.Fatalf("%s: the ready node: exists %v, %v", name, ok, err)
		}
		must(t, s.RemoveReady(ctx, job), name+": RemoveReady")
		err = s.SetReadyAt(ctx, job, 2, v)
		if !errors.Is(err, state.ErrConflict) {
			t.Errorf("%s: a set on a node deleted since its read: %v; want ErrConflict", name, err)
		}
	}
}

func TestGroupCommitWritesManyOperationsInOneMulti(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	ctx := ctxT(t)
	other, m := mirrored(t, env, nil)
	var ids []taskid.ID
	for i := range 10 {
		ids = append(ids, taskid.New(taskid.Meta{JobName: "job", Item: i}, taskid.Ready, "S0"))
	}
	must(t, m.RecordLaunch(ctx, state.Launch{Tasks: ids}), "RecordLaunch")

	g := m.Group()
	before := m.Multis()
	for i, id := range ids {
		follow := state.NoFollowUp
		if i%2 == 1 {
			follow = state.Failover
		}
		ended, err := g.EndTask(ctx, id, follow)
		must(t, err, "EndTask in a group")
		if !ended.Removed {
			t.Fatalf("EndTask(%s) in a group = %+v; want removed", id, ended)
		}
	}
	if r, _ := other.Running(ctx); len(r) != 10 {
		t.Fatalf("before Commit ZooKeeper has %d running; want all 10 still", len(r))
	}
	if r, _ := m.Running(ctx); len(r) != 10 {
		t.Fatalf("before Commit the model has %d running; want all 10 still", len(r))
	}
	must(t, g.Commit(ctx), "Commit")
	if multis := m.Multis() - before; multis != 1 {
		t.Fatalf("a group of 10 task ends took %d multis; want 1", multis)
	}
	for name, s := range map[string]*state.Store{"ZooKeeper": other, "model": m} {
		r, _ := s.Running(ctx)
		f, _ := s.Failovers(ctx)
		if len(r) != 0 || len(f) != 5 {
			t.Fatalf("%s after Commit: %d running, %d failover; want 0 and 5", name, len(r), len(f))
		}
	}
	dump := statetest.Dump(t, env)
	if _, ok := dump[env.Namespace+"/state/running/job"]; ok {
		t.Fatalf("the job's empty running node was left behind")
	}
}

func TestRefusedGroupChangesNothing(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	ctx := ctxT(t)
	other, m := mirrored(t, env, nil)
	a := taskid.New(taskid.Meta{JobName: "a", Item: 0}, taskid.Ready, "S0")
	b := taskid.New(taskid.Meta{JobName: "b", Item: 0}, taskid.Ready, "S0")
	must(t, m.RecordLaunch(ctx, state.Launch{Tasks: []taskid.ID{a, b}}), "RecordLaunch")
	g := m.Group()
	_, err := g.EndTask(ctx, a, state.Failover)
	must(t, err, "EndTask a")
	_, err = g.EndTask(ctx, b, state.NoFollowUp)
	must(t, err, "EndTask b")
	// Someone else ends b first: the group's delete of b's node is refused by ZooKeeper.
	_, err = other.EndTask(ctx, b, state.NoFollowUp)
	must(t, err, "EndTask b (other)")
	if err := g.Commit(ctx); err == nil {
		t.Fatal("Commit succeeded over a node someone else deleted")
	}
	for name, s := range map[string]*state.Store{"ZooKeeper": other, "model": m} {
		r, _ := s.Running(ctx)
		f, _ := s.Failovers(ctx)
		if len(r) != 1 || r[0].TaskID != a.String() || len(f) != 0 {
			t.Fatalf("%s after a refused group: running %v, failover %v; want a still running, nothing queued", name, r, f)
		}
	}
	// Done again one by one, a's end is recorded and b's is a duplicate.
	got, err := m.EndTask(ctx, a, state.Failover)
	must(t, err, "EndTask a again")
	if !got.Removed || !got.Requeued {
		t.Fatalf("EndTask a again = %+v; want removed and requeued", got)
	}
}

// A multi whose answer is lost with the connection may or may not have been applied: the
// model reads its nodes again before it answers the next read.
func TestMirrorReadsAgainWhatAWriteWithoutAnswerMayHaveChanged(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	proxy := statetest.NewProxy(t, env.Servers[0])
	ctx := ctxT(t)
	other := openPlain(t, env)
	base := openPlain(t, statetest.Env{Servers: []string{proxy.Addr}, Namespace: env.Namespace}, func(c *state.Config) { c.SessionTimeout = 10 * time.Second })
	mctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m, err := base.Mirror(mctx, nil)
	must(t, err, "Mirror")
	proxy.Cut()
	err = m.AddReady(ctx, "job", true)
	if err == nil {
		t.Fatal("AddReady succeeded with the connection cut")
	}
	// Meanwhile the node appears (as if our write had gone through before the cut).
	must(t, other.AddReady(ctx, "job", true), "AddReady (other)")
	if _, err := m.Ready(ctx); err == nil {
		t.Fatal("the model answered a read while it could not read again what the failed write may have changed")
	}
	proxy.Restore()
	await.True(t, 20*time.Second, "the model has the node", func() bool {
		r, err := m.ReadyOf(ctx, "job")
		return err == nil && r.Count == 1
	})
}

// A write whose answer is lost leaves its nodes, and their parents, to read again. The parent
// of a queue root is /state itself: read again with all that is below it, the next read would
// cost a request for each node of the namespace (every running task), while every read and
// write of the leader waits. The write may have changed the parent's list of children, not
// what is below them; the model reads that again and holds what ZooKeeper holds.
func TestAWriteWithoutAnswerReadsAgainItsParentsListNotAllBelowIt(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	proxy := statetest.NewProxy(t, env.Servers[0])
	ctx := ctxT(t)
	other := openPlain(t, env)
	must(t, other.CreateApp(ctx, testApp("app")), "CreateApp")
	const jobs, shards = 20, 100
	for j := range jobs {
		name := fmt.Sprintf("job%02d", j)
		must(t, other.CreateJob(ctx, testJob(name, "app")), "CreateJob")
		var ids []taskid.ID
		for i := range shards {
			ids = append(ids, taskid.New(taskid.Meta{JobName: name, Item: i}, taskid.Ready, "S0"))
		}
		must(t, other.RecordLaunch(ctx, state.Launch{Tasks: ids}), "RecordLaunch")
	}
	base := openPlain(t, statetest.Env{Servers: []string{proxy.Addr}, Namespace: env.Namespace},
		func(c *state.Config) { c.SessionTimeout = 20 * time.Second })
	mctx, cancel := context.WithCancel(ctx)
	t.Cleanup(cancel)
	m, err := base.Mirror(mctx, nil)
	must(t, err, "Mirror")
	select {
	case <-m.Watched():
	case <-time.After(30 * time.Second):
		t.Fatal("the config nodes' watches not armed within 30 s")
	}

	// The fire adds a node under /state/ready and sets /state/ready's version (admit).
	proxy.DropReplies()
	done := make(chan error, 1)
	go func() { done <- m.AddReady(ctx, "job00", true) }()
	await.True(t, 10*time.Second, "ZooKeeper applied the fire", func() bool {
		r, err := other.ReadyOf(ctx, "job00")
		return err == nil && r.Count == 1
	})
	proxy.Cut()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the fire whose answer was lost returned no error; the test needs its outcome unknown")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the fire did not return once the connection was cut")
	}
	proxy.Restore()
	await.True(t, 20*time.Second, "the client is back", func() bool { c, _ := m.SessionState(); return c })

	before := m.RoundTrips()
	ready, err := m.Ready(ctx)
	must(t, err, "Ready")
	trips := m.RoundTrips() - before
	t.Logf("the read after the fire without answer: %d round trips", trips)
	if trips > 50 {
		t.Errorf("the read after the fire without answer made %d round trips (%d running tasks under /state); want a few: the fire's nodes and their parents' lists",
			trips, jobs*shards)
	}
	if fmt.Sprint(ready) != fmt.Sprint([]state.ReadyEntry{{JobName: "job00", Count: 1}}) {
		t.Errorf("the model's ready queue is %+v; want job00 × 1, as ZooKeeper", ready)
	}
	fresh, _ := loadModel(t, env, true, nil)
	if got, want := m.ModelDump(), fresh.ModelDump(); got != want {
		t.Errorf("the model read again differs from one loaded afresh:\n got: %s\nwant: %s", got, want)
	}
}

// The load reads the queues over extra sessions: with digest authentication they must
// authenticate too, or the creator-only ACLs refuse them.
func TestMirrorLoadsQueuesUnderDigestACLs(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	ctx := ctxT(t)
	digest := func(c *state.Config) { c.Digest = "ejcloud:secret" }
	other := openPlain(t, env, digest)
	must(t, other.CreateApp(ctx, testApp("app")), "CreateApp")
	must(t, other.CreateJob(ctx, testJob("job", "app")), "CreateJob")
	must(t, other.CreateJob(ctx, testJob("run", "app")), "CreateJob")
	must(t, other.AddReady(ctx, "job", true), "AddReady")
	must(t, other.RecordLaunch(ctx, state.Launch{Tasks: []taskid.ID{taskid.New(taskid.Meta{JobName: "run", Item: 0}, taskid.Ready, "S0")}}), "RecordLaunch")
	mctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	m, err := openPlain(t, env, digest).Mirror(mctx, nil)
	must(t, err, "Mirror")
	ready, err := m.Ready(ctx)
	must(t, err, "Ready")
	running, err := m.Running(ctx)
	must(t, err, "Running")
	if len(ready) != 1 || len(running) != 1 {
		t.Fatalf("model: %d ready, %d running; want 1 and 1", len(ready), len(running))
	}
}

// ZooKeeper closes the connection of a client whose request is over its jute.maxbuffer, so
// such a multi never succeeds, and sent again fails again for ever. A Store does not send it:
// ErrTooLarge, nothing written, and the connection kept. One just under the limit is taken,
// so the Store does not count a multi short.
func TestAMultiTooLargeForZooKeeperIsNotSent(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	ctx := ctxT(t)
	other, m := mirrored(t, env, nil)
	for name, s := range map[string]*state.Store{"ZooKeeper": other, "model": m} {
		datas := func(n int) [][]byte {
			out := make([][]byte, n)
			for i := range out {
				out[i] = bytes.Repeat([]byte(name[:1]), 1000)
			}
			return out
		}
		fit := 1 // the most nodes one multi takes, with room for the fence and the receipt
		for s.CreateAllBytes(name, datas(fit+1)) <= s.MaxMultiBytes()-200 {
			fit++
		}
		before := s.Multis()
		err := s.CreateAll(ctx, name, datas(fit+50))
		if !errors.Is(err, state.ErrTooLarge) {
			t.Fatalf("%s: a multi of %d bytes: %v; want ErrTooLarge", name, s.CreateAllBytes(name, datas(fit+50)), err)
		}
		if n := s.Multis() - before; n != 0 {
			t.Errorf("%s: %d multis sent for a multi over the limit; want none", name, n)
		}
		if _, ok, err := other.ReadyVersion(ctx, name+"000000"); err != nil || ok {
			t.Fatalf("%s: after the refused multi the first node exists %v (%v); want nothing written", name, ok, err)
		}
		must(t, s.CreateAll(ctx, name, datas(fit)), fmt.Sprintf("%s: a multi of %d bytes", name, s.CreateAllBytes(name, datas(fit))))
		if _, ok, err := other.ReadyVersion(ctx, fmt.Sprintf("%s%06d", name, fit-1)); err != nil || !ok {
			t.Fatalf("%s: after a multi just under the limit its last node exists %v (%v); want it written", name, ok, err)
		}
	}
}

// Watch events beyond the mirror's buffer are dropped, and the mirror then reads every watched
// directory again: deep, so that a lost change of a child's data (another's update of a job's
// config) is seen, and the child watched again. Before, only new children were read: the job
// kept its old config in the model, unwatched, for the rest of the term. With no buffer, the
// update, made just after a change that follow takes, is lost.
func TestMirrorReadsEverythingAgainAfterLostEvents(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	ctx := ctxT(t)
	defer state.SetFollowBuffer(0)()
	other, m := mirrored(t, env, nil)
	must(t, other.CreateApp(ctx, testApp("app")), "CreateApp")
	must(t, other.CreateJob(ctx, testJob("job", "app")), "CreateJob")
	must(t, other.CreateJob(ctx, testJob("busy", "app")), "CreateJob")
	await.True(t, 5*time.Second, "the model has the jobs", func() bool {
		_, err1 := m.Job(ctx, "job")
		_, err2 := m.Job(ctx, "busy")
		return err1 == nil && err2 == nil
	})
	for shards := 2; shards <= 4; shards++ {
		must(t, other.AddReady(ctx, "busy", true), "AddReady") // follow takes its event, then waits for more
		j := testJob("job", "app")
		j.ShardingTotalCount = shards
		_, err := other.UpdateJob(ctx, j)
		must(t, err, "UpdateJob")
		await.True(t, 5*time.Second, fmt.Sprintf("the model has the job with %d shards", shards), func() bool {
			got, err := m.Job(ctx, "job")
			return err == nil && got.ShardingTotalCount == shards
		})
	}
}

// A namespace written without digest authentication (an earlier run without --zk-digest, or
// 2.1.5) is closed to other clients when a Store with a digest connects to it: every node gets
// the creator-only ACL, not only the nodes created from then on.
func TestADigestClosesANamespaceWrittenWithoutOne(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	ctx := ctxT(t)
	open := openPlain(t, env)
	must(t, open.CreateApp(ctx, testApp("app")), "CreateApp")
	must(t, open.CreateJob(ctx, testJob("job", "app")), "CreateJob")
	must(t, open.AddReady(ctx, "job", true), "AddReady")
	must(t, open.RecordLaunch(ctx, state.Launch{Tasks: []taskid.ID{taskid.New(taskid.Meta{JobName: "job", Item: 0}, taskid.Ready, "S0")}}), "RecordLaunch")
	open.Close()

	digest := func(c *state.Config) { c.Digest = "ejcloud:secret" }
	secured := openPlain(t, env, digest)
	if _, err := secured.Job(ctx, "job"); err != nil {
		t.Fatalf("the digest's store reads the job: %v", err)
	}
	anyone, root := rawConn(t, env, 0, nil)
	for _, p := range []string{root, root + "/config/job/job", root + "/state/ready/job", root + "/state/running/job"} {
		if _, _, err := anyone.Get(p); !errors.Is(err, zk.ErrNoAuth) {
			t.Errorf("a client without the digest reads %s: %v; want ErrNoAuth", p, err)
		}
	}
	if _, err := anyone.Set(root+"/state/ready/job", []byte("99"), -1); !errors.Is(err, zk.ErrNoAuth) {
		t.Errorf("a client without the digest writes the ready queue: %v; want ErrNoAuth", err)
	}
	// Once closed, a store with the digest connects as before, and still reads and writes.
	again := openPlain(t, env, digest)
	must(t, again.AddReady(ctx, "job", true), "AddReady with the digest")
	must(t, again.CreateJob(ctx, testJob("other", "app")), "CreateJob with the digest")
}
