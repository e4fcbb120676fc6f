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
// flag alone, so as not to hold up their claims (failover's above all); each run's completion
// touches the flag, which wakes the leader to look again.
func (in *Instance) reshardIfIdle(ctx context.Context, fire int64) error {
	t := in.tree
	nec, err := t.Get(ctx, in.p("leader/sharding/necessary"))
	if err != nil || !nec.Exists {
		return err
	}
	lead, err := t.Get(ctx, in.p("leader/election/instance"))
	if err != nil || !lead.Exists || string(lead.Data) != in.id {
		return err
	}
	if avail, err := in.availableInstances(ctx); err != nil || len(avail) == 0 {
		return err
	}
	if in.config().MonitorExecution {
		items, err := t.Children(ctx, in.p("sharding"))
		if err != nil {
			return err
		}
		for _, item := range items {
			n, err := t.Get(ctx, in.p("sharding/"+item+"/running"))
			if err != nil || n.Exists {
				return err
			}
		}
	}
	return in.reshard(ctx, fire)
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
func (in *Instance) reshard(ctx context.Context, fire int64) error {
	for {
		again, err := in.reshardOnce(ctx, fire)
		if !again || ctx.Err() != nil {
			return err
		}
	}
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
		for _, item := range existing {
			if err := in.waitGone(ctx, in.p("sharding/"+item+"/running")); err != nil {
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
	result, err := sharding.Shard(cfg.JobShardingStrategyType, len(avail), cfg.JobName, cfg.ShardingTotalCount)
	if err != nil {
		return false, err
	}
	have := map[int]bool{}
	for _, item := range existing {
		if i, err := strconv.Atoi(item); err == nil {
			have[i] = true
		}
	}
	var owed []byte // without monitorExecution there are no records
	if cfg.MonitorExecution {
		owed, _ = json.Marshal(record{Fire: fire - 1, Done: true})
	}
	ops := []state.Op{t.Check(in.p("leader/election/instance"), lead.Version)}
	for pos, items := range result {
		for _, i := range items {
			item := in.p("sharding/" + strconv.Itoa(i))
			if !have[i] {
				// A new item owes no run for the fires before this one: without this record,
				// an instance catching up would run it for a fire from before it existed.
				ops = append(ops, t.Create(item, owed, false))
			} else if n, err := t.Get(ctx, item+"/instance"); err != nil {
				return false, err
			} else if n.Exists {
				ops = append(ops, t.Delete(item+"/instance", -1))
			}
			ops = append(ops, t.Create(item+"/instance", []byte(avail[pos]), false))
		}
	}
	for i := range have { // items beyond a reduced shard count go, with what hangs under them
		if i < cfg.ShardingTotalCount {
			continue
		}
		item := in.p("sharding/" + strconv.Itoa(i))
		children, err := t.Children(ctx, item)
		if err != nil {
			return false, err
		}
		for _, c := range children {
			ops = append(ops, t.Delete(item+"/"+c, -1))
		}
		ops = append(ops, t.Delete(item, -1))
	}
	ops = append(ops, t.Set(in.p("leader/sharding"), nil, -1), // wakes instances to catch up
		t.Delete(in.p("leader/sharding/necessary"), nec.Version), t.Delete(in.p("leader/sharding/processing"), -1))
	if err := t.Multi(ctx, ops...); err != nil {
		var oe *state.OpError
		if errors.As(err, &oe) && oe.Path == t.Path(in.p("leader/sharding/necessary")) {
			return true, nil
		}
		return false, fmt.Errorf("write the sharding: %w", err)
	}
	in.log.WithField("instances", len(avail)).Info("resharded")
	return false, nil
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
