package lite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/ejcloud/ejcloud/scheduler/sharding"
	"github.com/ejcloud/ejcloud/state"
)

// availableInstances lists the live instances whose server is enabled, in Elastic-Job-Lite's
// order (its registry center sorts children in descending order), which decides who gets
// which items.
func (in *Instance) availableInstances(ctx context.Context) ([]string, error) {
	names, err := in.tree.Children(ctx, in.p("instances"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, n := range names {
		ip, _, _ := strings.Cut(n, "@-@")
		ok, err := in.serverEnabled(ctx, ip)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, n)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(out)))
	return out, nil
}

func (in *Instance) serverEnabled(ctx context.Context, ip string) (bool, error) {
	n, err := in.tree.Get(ctx, in.p("servers/"+ip))
	if err != nil {
		return false, err
	}
	return !n.Exists || string(n.Data) != "DISABLED", nil
}

// shardIfNecessary returns once no resharding is pending: the leader does it, the others
// wait for it (or for the leadership to fall to them). fire is the fire about to run.
func (in *Instance) shardIfNecessary(ctx context.Context, fire int64) error {
	t := in.tree
	for {
		nec, err := t.Get(ctx, in.p("leader/sharding/necessary"))
		if err != nil {
			return err
		}
		proc, err := t.Get(ctx, in.p("leader/sharding/processing"))
		if err != nil {
			return err
		}
		if !nec.Exists && !proc.Exists {
			return nil
		}
		avail, err := in.availableInstances(ctx)
		if err != nil {
			return err
		}
		if len(avail) == 0 {
			return nil // nobody may run items: there is nothing to share
		}
		leader, err := in.leader(ctx)
		if err != nil {
			return err
		}
		if leader == in.id {
			if nec.Exists {
				return in.reshard(ctx, fire)
			}
			// processing alone is this leader's own, left by a failed attempt.
			if err := t.Do(ctx, t.Delete(in.p("leader/sharding/processing"), -1)); err != nil && !errors.Is(err, state.ErrNotFound) {
				return err
			}
			continue
		}
		// Wait for the leader: until necessary and processing are gone or the leader changes.
		_, w1, err := t.GetW(ctx, in.p("leader/sharding/necessary"))
		if err != nil {
			return err
		}
		_, w2, err := t.GetW(ctx, in.p("leader/sharding/processing"))
		if err != nil {
			return err
		}
		_, w3, err := t.GetW(ctx, in.p("leader/election/instance"))
		if err != nil {
			return err
		}
		select {
		case <-w1:
		case <-w2:
		case <-w3:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// reshardIfIdle: the leader reshards as soon as the flag rises and no item runs, not only at
// its own fires: the others block on the flag at their fires, and a leader whose fires come
// later (or never: a job run by triggers) would stall them. While items run it leaves the
// flag alone, so as not to hold up their claims (failover's above all), and returns their
// running markers: each run's completion touches the flag, which wakes the leader to look
// again, but a run that ends without one (its instance shut down through ZooKeeper, whose
// session closes after its node went) does not, and the runner watches them (runner).
func (in *Instance) reshardIfIdle(ctx context.Context, fire int64) (running []string, err error) {
	t := in.tree
	nec, err := t.Get(ctx, in.p("leader/sharding/necessary"))
	if err != nil || !nec.Exists {
		return nil, err
	}
	lead, err := t.Get(ctx, in.p("leader/election/instance"))
	if err != nil || !lead.Exists || string(lead.Data) != in.id {
		return nil, err
	}
	if avail, err := in.availableInstances(ctx); err != nil || len(avail) == 0 {
		return nil, err
	}
	if in.config().MonitorExecution {
		items, err := t.Children(ctx, in.p("sharding"))
		if err != nil {
			return nil, err
		}
		if running, err := in.running(ctx, items); err != nil || len(running) > 0 {
			return running, err
		}
	}
	return nil, in.reshard(ctx, fire)
}

// running returns the running markers among those of items (names under sharding/), read
// together.
func (in *Instance) running(ctx context.Context, items []string) ([]string, error) {
	paths := make([]string, len(items))
	for k, item := range items {
		paths[k] = in.p("sharding/" + item + "/running")
	}
	nodes, err := in.tree.GetMany(ctx, paths)
	if err != nil {
		return nil, err
	}
	var out []string
	for k, n := range nodes {
		if n.Exists {
			out = append(out, paths[k])
		}
	}
	return out, nil
}

// nudge touches the resharding flag, if it is up, so that the leader looks again whether it
// can reshard now (see reshardIfIdle).
func (in *Instance) nudge(ctx context.Context) {
	t := in.tree
	if n, err := t.Get(ctx, in.p("leader/sharding/necessary")); err == nil && n.Exists {
		t.Do(ctx, t.Set(in.p("leader/sharding/necessary"), nil, -1)) // gone meanwhile is fine
	}
}

// reshard shares the items among the available instances. It marks the work with processing
// (which stops new claims of items), waits for running items to finish (a resharding never
// happens during a run), and writes the whole assignment in one transaction that also
// clears necessary and processing and is fenced by the leader's election node. A flag raised
// again meanwhile (an instance came or went after the instances were read) makes it start over.
//
// An attempt that fails takes its processing node away: left, it would stop every claim, this
// instance's own too, until the session ends, and the claims wait for it to go.
func (in *Instance) reshard(ctx context.Context, fire int64) error {
	for {
		again, err := in.reshardOnce(ctx, fire)
		if again && ctx.Err() == nil {
			continue
		}
		if err != nil || again {
			in.dropProcessing(ctx)
		}
		return err
	}
}

// dropProcessing deletes this session's processing node after a failed resharding, as far as
// it can within a third of a session timeout, on a context of its own: the failure may be the
// connection's, which the deletion waits for that long. When the session's work is over (ctx
// ended: the lease went, the session expired, the instance stops), it leaves the node: the
// session's end takes it, or, when the session lives on after a lost lease, the next session
// of the instance deletes it first thing (dropStaleRunning); waiting here, on a connection that
// is probably down, would only hold that next session up. A node left by a failed deletion goes
// at this instance's next claim (awaitNoResharding).
func (in *Instance) dropProcessing(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	dctx, cancel := context.WithTimeout(context.Background(), in.sessionTimeout()/3)
	defer cancel()
	if _, err := in.dropOwnProcessing(dctx); err != nil {
		in.log.WithError(err).Warn("cannot delete the processing node of a failed resharding")
	}
}

// dropOwnProcessing deletes leader/sharding/processing if this session made it, and says
// whether it did.
func (in *Instance) dropOwnProcessing(ctx context.Context) (bool, error) {
	t := in.tree
	proc := in.p("leader/sharding/processing")
	n, err := t.Get(ctx, proc)
	if err != nil || !n.Exists || n.Owner != t.SessionID() {
		return false, err
	}
	if err := t.Do(ctx, t.Delete(proc, n.Version)); err != nil && !errors.Is(err, state.ErrNotFound) {
		return false, fmt.Errorf("delete %s: %w", proc, err)
	}
	return true, nil
}

func (in *Instance) reshardOnce(ctx context.Context, fire int64) (again bool, err error) {
	t := in.tree
	lead, err := t.Get(ctx, in.p("leader/election/instance"))
	if err != nil {
		return false, err
	}
	if !lead.Exists || string(lead.Data) != in.id {
		return false, nil // deposed meanwhile: the caller looks again
	}
	if err := t.Do(ctx, t.Create(in.p("leader/sharding/processing"), nil, true)); err != nil && !errors.Is(err, state.ErrExists) {
		return false, fmt.Errorf("mark sharding processing: %w", err)
	}
	cfg := in.config()
	existing, err := t.Children(ctx, in.p("sharding"))
	if err != nil {
		return false, err
	}
	if cfg.MonitorExecution {
		// Only the markers there now are waited for: from processing on, no claim can make one
		// (a claim requires processing absent), and a claim made before it shows in a read
		// sent after it on this session.
		running, err := in.running(ctx, existing)
		if err != nil {
			return false, err
		}
		for _, p := range running {
			if err := in.waitGone(ctx, p); err != nil {
				return false, err
			}
		}
	}
	// The flag's version before the instances are read: raised again after it, the flag stays.
	nec, err := t.Get(ctx, in.p("leader/sharding/necessary"))
	if err != nil {
		return false, err
	}
	avail, err := in.availableInstances(ctx)
	if err != nil {
		return false, err
	}
	if len(avail) == 0 || !nec.Exists {
		return false, t.Do(ctx, t.Delete(in.p("leader/sharding/processing"), -1))
	}
	w := shardingWrite{lead: lead.Version, nec: nec.Version, avail: avail, have: map[int]bool{}, owned: map[int]bool{}, drop: map[int][]string{}}
	if w.result, err = sharding.Shard(cfg.JobShardingStrategyType, len(avail), cfg.JobName, cfg.ShardingTotalCount); err != nil {
		return false, err
	}
	for _, item := range existing {
		if i, err := strconv.Atoi(item); err == nil {
			w.have[i] = true
		}
	}
	if cfg.MonitorExecution { // without monitorExecution there are no records
		w.owed, _ = json.Marshal(record{Fire: fire - 1, Done: true})
	}
	var owners []int
	var paths []string
	for _, items := range w.result {
		for _, i := range items {
			if w.have[i] {
				owners = append(owners, i)
				paths = append(paths, in.p("sharding/"+strconv.Itoa(i)+"/instance"))
			}
		}
	}
	nodes, err := t.GetMany(ctx, paths)
	if err != nil {
		return false, err
	}
	for k, i := range owners {
		w.owned[i] = nodes[k].Exists
	}
	for i := range w.have { // items beyond a reduced shard count go, with what hangs under them
		if i < cfg.ShardingTotalCount {
			continue
		}
		if w.drop[i], err = t.Children(ctx, in.p("sharding/"+strconv.Itoa(i))); err != nil {
			return false, err
		}
	}
	if err := t.Multi(ctx, in.shardingOps(t, w)...); err != nil {
		var oe *state.OpError
		if errors.As(err, &oe) && oe.Path == t.Path(in.p("leader/sharding/necessary")) {
			return true, nil
		}
		return false, fmt.Errorf("write the sharding: %w", err)
	}
	in.log.WithField("instances", len(avail)).Info("resharded")
	return false, nil
}

// shardingWrite is what the sharding transaction writes, read before it is built (reshardOnce),
// so that the transaction a shard count makes can be built without ZooKeeper too and measured
// (shardsFit).
type shardingWrite struct {
	lead, nec int32            // the versions of leader/election/instance and of necessary
	avail     []string         // the instances, in the order of the sharding's result
	result    [][]int          // the items of each instance
	have      map[int]bool     // the items that exist
	owned     map[int]bool     // the existing items that have an instance node
	drop      map[int][]string // the items beyond the shard count, with their children
	owed      []byte           // a new item's record
}

// shardingOps builds the sharding transaction: every assignment, the items beyond the shard
// count deleted, necessary (at the version read before the instances) and processing cleared,
// fenced by the leader's election node.
func (in *Instance) shardingOps(t *state.Tree, w shardingWrite) []state.Op {
	ops := []state.Op{t.Check(in.p("leader/election/instance"), w.lead)}
	for pos, items := range w.result {
		for _, i := range items {
			item := in.p("sharding/" + strconv.Itoa(i))
			if !w.have[i] {
				// A new item owes no run for the fires before this one: without this record,
				// an instance catching up would run it for a fire from before it existed.
				ops = append(ops, t.Create(item, w.owed, false))
			} else if w.owned[i] {
				ops = append(ops, t.Delete(item+"/instance", -1))
			}
			ops = append(ops, t.Create(item+"/instance", []byte(w.avail[pos]), false))
		}
	}
	dropped := make([]int, 0, len(w.drop))
	for i := range w.drop {
		dropped = append(dropped, i)
	}
	sort.Ints(dropped)
	for _, i := range dropped {
		item := in.p("sharding/" + strconv.Itoa(i))
		for _, c := range w.drop[i] {
			ops = append(ops, t.Delete(item+"/"+c, -1))
		}
		ops = append(ops, t.Delete(item, -1))
	}
	return append(ops, t.Set(in.p("leader/sharding"), nil, -1), // wakes instances to catch up
		t.Delete(in.p("leader/sharding/necessary"), w.nec), t.Delete(in.p("leader/sharding/processing"), -1))
}

// waitGone returns once the node does not exist.
func (in *Instance) waitGone(ctx context.Context, rel string) error {
	for {
		n, w, err := in.tree.GetW(ctx, rel)
		if err != nil {
			return err
		}
		if !n.Exists {
			return nil
		}
		select {
		case <-w:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
