package lite

import (
	"bytes"
	"context"
	"errors"
	"reflect"
	"time"

	"github.com/ejcloud/ejcloud/state"
)

// watch calls look, which reads what it watches and acts on it, again each time one of the
// watches it returns fires, until ctx ends. A failed look is retried after a short pause (the
// connection is down: the session's end, if it comes, ends ctx).
func (in *Instance) watch(ctx context.Context, what string, look func(ctx context.Context) ([]state.Watch, error)) {
	for ctx.Err() == nil {
		ws, err := look(ctx)
		if err != nil {
			if ctx.Err() == nil {
				in.log.WithError(err).WithField("watch", what).Debug("watch failed; retrying")
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())}}
		for _, w := range ws {
			cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w)})
		}
		reflect.Select(cases)
	}
}

// watchSelf follows this instance's node: "TRIGGER" runs its items now; its deletion by
// someone else while the session lives is the shutdown flag.
func (in *Instance) watchSelf(ctx context.Context, sid int64, shutdown func()) {
	self := in.p("instances/" + in.id)
	in.watch(ctx, "instance", func(ctx context.Context) ([]state.Watch, error) {
		n, w, err := in.tree.GetW(ctx, self)
		if err != nil {
			return nil, err
		}
		if !n.Exists {
			if ok, _ := in.tree.Connected(); ok && in.tree.SessionID() == sid {
				shutdown()
			}
			return []state.Watch{w}, nil // else the session expired: session() is told so
		}
		if string(n.Data) == "TRIGGER" {
			if err := in.tree.Do(ctx, in.tree.Set(self, nil, n.Version)); err == nil {
				in.Trigger()
			}
		}
		return []state.Watch{w}, nil
	})
}

// watchInstances: an instance came or went: reshard before the next fire, and flag the items
// of the instances that went for failover.
//
// The watch also fires for nothing: at every failover flag, whose transaction checks that an
// instance is absent by creating its node and deleting it again (flagCrashed). So the items are
// looked at again only when the instances or the sharding differ from those of the last complete
// look, or it failed: a pass over the job for each flag written would be waste. The sharding
// counts too for an instance that joined and went between two looks, the same instances
// listed before and after, but which a resharding meanwhile gave items.
//
// The items of an instance that went while they ran are not flagged while their running
// markers stay (flagCrashed): an instance shut down through ZooKeeper loses its node before its
// runs have ended and its session has closed. Their markers are watched, one watch per marker
// at a time, and the items looked at again when one goes: nothing else would, the instances
// being the same by then.
func (in *Instance) watchInstances(ctx context.Context) {
	var last, flagged []string
	var looked bool
	var flaggedAt int32                 // the sharding's version before the last complete look
	markers := map[string]state.Watch{} // the running markers of items of gone instances, watched
	in.watch(ctx, "instances", func(ctx context.Context) ([]state.Watch, error) {
		names, w, err := in.tree.ChildrenW(ctx, in.p("instances"))
		if err != nil {
			return nil, err
		}
		if last != nil && !reflect.DeepEqual(names, last) {
			if err := in.setNecessary(ctx); err != nil {
				return nil, err
			}
		}
		last = names
		for m, mw := range markers {
			if fired(mw) { // the marker went (or changed): its item is looked at again
				delete(markers, m)
				looked = false
			}
		}
		sh, err := in.tree.Get(ctx, in.p("leader/sharding"))
		if err != nil {
			return nil, err
		}
		for !looked || sh.Version != flaggedAt || !reflect.DeepEqual(names, flagged) {
			running, err := in.flagCrashed(ctx, names)
			if err != nil {
				return nil, err
			}
			looked, flagged, flaggedAt = true, names, sh.Version
			for _, m := range running {
				if _, ok := markers[m]; ok {
					continue // watched already
				}
				n, mw, err := in.tree.GetW(ctx, m)
				if err != nil {
					looked = false
					return nil, err
				}
				markers[m] = mw // absent: it fires when a next run makes the marker again
				if !n.Exists {
					looked = false // gone since the look: look again now
				}
			}
		}
		ws := []state.Watch{w}
		for _, mw := range markers {
			ws = append(ws, mw)
		}
		return ws, nil
	})
}

// fired says whether a watch has fired: ZooKeeper sends its one event and closes it.
func fired(w state.Watch) bool {
	select {
	case <-w:
		return true
	default:
		return false
	}
}

// watchServers: a server enabled or disabled changes who may run items.
func (in *Instance) watchServers(ctx context.Context) {
	var last map[string]string
	in.watch(ctx, "servers", func(ctx context.Context) ([]state.Watch, error) {
		names, w, err := in.tree.ChildrenW(ctx, in.p("servers"))
		if err != nil {
			return nil, err
		}
		ws := []state.Watch{w}
		now := map[string]string{}
		for _, ip := range names {
			n, w, err := in.tree.GetW(ctx, in.p("servers/"+ip))
			if err != nil {
				return nil, err
			}
			now[ip] = string(n.Data)
			ws = append(ws, w)
		}
		if last != nil && !reflect.DeepEqual(now, last) {
			if err := in.setNecessary(ctx); err != nil {
				return nil, err
			}
			in.wake() // an enabled server's instances may run what they missed
		}
		last = now
		return ws, nil
	})
}

// watchConfig follows the config in ZooKeeper: a new shard count reshards, a new cron
// reschedules, failover turned off drops its markers.
func (in *Instance) watchConfig(ctx context.Context) {
	var last []byte
	in.watch(ctx, "config", func(ctx context.Context) ([]state.Watch, error) {
		n, w, err := in.tree.GetW(ctx, in.p("config"))
		if err != nil {
			return nil, err
		}
		if !n.Exists || bytes.Equal(n.Data, last) {
			return []state.Watch{w}, nil
		}
		last = n.Data
		p, err := in.decode(n.Data)
		if err != nil {
			in.log.WithError(err).Error("the config in ZooKeeper is invalid: keeping the previous one")
			return []state.Watch{w}, nil
		}
		old := in.config()
		in.setConfig(p)
		if old.ShardingTotalCount != p.ShardingTotalCount {
			if err := in.setNecessary(ctx); err != nil {
				return nil, err
			}
		}
		if old.Failover && !p.Failover {
			in.removeFailoverInfo(ctx)
		}
		return []state.Watch{w}, nil
	})
}

// watchLeader elects a new leader when the leader's node goes.
func (in *Instance) watchLeader(ctx context.Context) {
	in.watch(ctx, "leader", func(ctx context.Context) ([]state.Watch, error) {
		n, w, err := in.tree.GetW(ctx, in.p("leader/election/instance"))
		if err != nil {
			return nil, err
		}
		if !n.Exists {
			if err := in.elect(ctx); err != nil && !errors.Is(err, context.Canceled) {
				return nil, err
			}
		}
		return []state.Watch{w}, nil
	})
}

// watchWake wakes the runner when a node (or, with children, its list of children) changes:
// failover flags to take, or a new sharding to catch up with.
func (in *Instance) watchWake(ctx context.Context, rel string, children bool) {
	in.watch(ctx, rel, func(ctx context.Context) ([]state.Watch, error) {
		var w state.Watch
		var err error
		if children {
			_, w, err = in.tree.ChildrenW(ctx, in.p(rel))
		} else {
			_, w, err = in.tree.GetW(ctx, in.p(rel))
		}
		if err != nil {
			return nil, err
		}
		in.wake()
		return []state.Watch{w}, nil
	})
}
