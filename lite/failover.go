package lite

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/ejcloud/ejcloud/state"
)

// flagCrashed flags for failover every item whose owner, or whose taker, is no longer a live
// instance. It looks at the whole job rather than at the one instance that went, so that an
// instance that went while nobody watched (every instance down) is covered too. It returns an
// error when it could not look at every item, for the caller to look again.
//
// live, the instances listed before the items are read, only says which flags to try: an
// instance may join after it was read (a rolling restart's replacement) and be handed, by a
// resharding, items read as a dead instance's. Each flag is written in a transaction that
// holds only while the instance it is about is absent from instances/, and while what made it
// the instance in question still holds: the sharding's version read before the items (no
// resharding gave the item to someone else since) and the item's failover node, as read (no
// taker took it since). A flag refused because the item moved is decided again on a new read.
//
// An item of an instance that has gone but whose running marker is still there is not flagged:
// its run may still be winding down (an instance shut down through ZooKeeper loses its node
// first, its session, and the marker with it, after its runs end). flagCrashed returns those
// markers, for the caller to look again once they go (watchInstances).
func (in *Instance) flagCrashed(ctx context.Context, live []string) (stillRunning []string, err error) {
	cfg := in.config()
	if !cfg.Failover {
		return nil, nil
	}
	alive := map[string]bool{}
	for _, id := range live {
		alive[id] = true
	}
	t := in.tree
	which := allItems(cfg.ShardingTotalCount)
	for attempt := 0; len(which) > 0; attempt++ {
		if attempt == maxAttempts {
			return nil, fmt.Errorf("flag items for failover: items %v moved under every attempt", which)
		}
		p, err := in.readPass(ctx, which)
		if err != nil {
			return nil, fmt.Errorf("flag items for failover: %w", err)
		}
		var moved []int
		for _, it := range p.items {
			// The instance the decision is about: the taker, while there is one (the owner
			// skips an item taken by another instance), else the owner.
			gone := it.failover
			if gone == "" {
				gone = it.owner
			}
			if gone == "" || alive[gone] {
				continue
			}
			if it.running {
				stillRunning = append(stillRunning, in.p("sharding/"+strconv.Itoa(it.i)+"/running"))
				continue
			}
			in.testHook("flag")
			err := t.Multi(ctx, in.flagOps(t, p.sharding, it, gone)...)
			var oe *state.OpError
			switch {
			case err == nil:
			case errors.As(err, &oe) && errors.Is(err, state.ErrExists) &&
				(oe.Path == t.Path(in.p("leader/failover/items/"+strconv.Itoa(it.i))) || oe.Path == t.Path(in.p("instances/"+gone))):
				// Flagged already; or the instance lives (it joined after live was read, or came
				// back): its item is not for failover.
			case isRace(err):
				moved = append(moved, it.i)
			case errors.Is(err, state.ErrUnavailable), errors.Is(err, state.ErrSessionExpired), ctx.Err() != nil:
				return nil, fmt.Errorf("flag item %d for failover: %w", it.i, err)
			default:
				in.log.WithError(err).WithField("item", it.i).Warn("flag an item for failover")
			}
		}
		which = moved
	}
	return stillRunning, nil
}

// flagOps flag item it for failover, read in a pass whose sharding version is sharding, as the
// item of instance gone: only if gone is not registered, no resharding has happened since the
// read and the item's failover node is as read.
func (in *Instance) flagOps(t *state.Tree, sharding int32, it item, gone string) []state.Op {
	base := in.p("sharding/" + strconv.Itoa(it.i))
	ops := []state.Op{t.Check(in.p("leader/sharding"), sharding)}
	if it.failover != "" {
		ops = append(ops, t.Check(base+"/failover", it.foVersion))
	} else {
		ops = append(ops, t.Absent(base+"/failover"))
	}
	return append(ops, t.Absent(in.p("instances/"+gone)), t.Create(in.p("leader/failover/items/"+strconv.Itoa(it.i)), nil, false))
}

// failover takes the flagged items one at a time under the failover latch, then runs them
// together, before anything else: each for the fire its last run did not finish, if any, and
// for this instance's last fire if it has not run for it. Taking them all before running
// any puts every lost item back to work about one session timeout after its instance died,
// rather than one run after another.
func (in *Instance) failover(ctx context.Context) {
	for ctx.Err() == nil && in.config().Failover {
		in.mu.Lock()
		taken := in.retake
		in.retake = nil
		in.mu.Unlock()
		for {
			i, ok := in.take(ctx)
			if !ok {
				break
			}
			if i >= 0 {
				taken = append(taken, i)
			}
		}
		if len(taken) == 0 {
			return
		}
		var wg sync.WaitGroup
		for _, i := range taken {
			wg.Add(1)
			go func() {
				defer wg.Done()
				in.runTaken(ctx, i)
			}()
		}
		wg.Wait()
	}
}

// take claims the lowest flagged item: in one transaction under the latch, its flag goes and
// its failover node names this instance. It returns false when there was nothing to take, and
// -1 for a flag of an item beyond the shard count, which is dropped.
func (in *Instance) take(ctx context.Context) (int, bool) {
	t := in.tree
	release, err := t.Lock(ctx, in.p("leader/failover/latch"))
	if err != nil {
		return 0, false
	}
	defer release()
	names, err := t.Children(ctx, in.p("leader/failover/items"))
	if err != nil || len(names) == 0 {
		return 0, false
	}
	var items []int
	for _, n := range names {
		if i, err := strconv.Atoi(n); err == nil {
			items = append(items, i)
		}
	}
	sort.Ints(items)
	if len(items) == 0 {
		return 0, false
	}
	i := items[0]
	flag := in.p("leader/failover/items/" + strconv.Itoa(i))
	base := in.p("sharding/" + strconv.Itoa(i))
	// The sharding's version first: read before the item, it pins the owner read with it.
	sh, err := t.Get(ctx, in.p("leader/sharding"))
	if err != nil {
		return 0, false
	}
	nodes, err := t.GetMany(ctx, []string{base, base + "/failover", base + "/instance"})
	if err != nil {
		return 0, false
	}
	item, fo, owner := nodes[0], nodes[1], nodes[2]
	ops := []state.Op{t.Delete(flag, -1)}
	foVersion := int32(-1) // the version the taking writes into the failover node
	if item.Exists && i < in.config().ShardingTotalCount {
		// A flag says the item's instance (its taker, while there is one, else its owner) is
		// gone; it is taken only while that still holds. One written while the instance was
		// dead can go stale before it is taken: a resharding gave the item to a live instance
		// (the sharding's version moved), or the instance came back.
		gone := string(owner.Data)
		if fo.Exists {
			gone = string(fo.Data)
		}
		ops = append(ops, t.Check(in.p("leader/sharding"), sh.Version))
		if gone != "" {
			ops = append(ops, t.Absent(in.p("instances/"+gone)))
		}
		if fo.Exists {
			ops = append(ops, t.Set(base+"/failover", []byte(in.id), fo.Version))
			foVersion = fo.Version + 1
		} else {
			ops = append(ops, t.Create(base+"/failover", []byte(in.id), false))
			foVersion = 0
		}
	}
	sid := t.SessionID()
	in.testHook("take")
	if err := t.Multi(ctx, ops...); err != nil {
		var oe *state.OpError
		if errors.As(err, &oe) && errors.Is(err, state.ErrExists) && strings.HasPrefix(oe.Path, t.Path(in.p("instances"))+"/") {
			// The instance the flag is about lives: the item is not for failover.
			if err := t.Do(ctx, t.Delete(flag, -1)); err != nil && !errors.Is(err, state.ErrNotFound) {
				in.log.WithError(err).WithField("item", i).Warn("drop a stale failover flag")
				return 0, false
			}
			in.log.WithField("item", i).Info("failover flag dropped: the item's instance lives")
			return -1, true
		}
		if !answerLost(err) {
			in.log.WithError(err).WithField("item", i).Warn("take a failed-over item")
			return 0, false
		}
		// ZooKeeper may have taken it: then the flag is gone and the failover node names
		// this instance, which is alive, so nobody else would ever run the item.
		made, err := in.takeMade(ctx, sid, flag, base+"/failover", foVersion)
		if err != nil {
			in.log.WithError(err).WithField("item", i).Warn("take a failed-over item: the answer was lost and the taking cannot be read back")
			return 0, false
		}
		if !made {
			return -1, true // the flag is still there: look again
		}
	}
	if len(ops) == 1 {
		return -1, true
	}
	in.log.WithField("item", i).Info("took over a failed item")
	return i, true
}

// takeMade reads back a taking whose answer was lost, once the connection is back on the
// session that sent it (which holds the latch still, so no other taker moved anything): it
// was made when the flag is gone and the failover node, if the taking wrote one (foVersion
// not -1), names this instance at the version the taking wrote.
func (in *Instance) takeMade(ctx context.Context, sid int64, flag, fo string, foVersion int32) (bool, error) {
	t := in.tree
	if err := t.AwaitSession(ctx); err != nil {
		return false, err
	}
	if t.SessionID() != sid {
		return false, fmt.Errorf("%w: the session that took the item has ended", state.ErrSessionExpired)
	}
	// The connection may be to another server now, which may not have applied the write yet:
	// read before a sync, a write that was made would read as not made.
	if err := t.Sync(ctx); err != nil {
		return false, err
	}
	f, err := t.Get(ctx, flag)
	if err != nil || f.Exists {
		return false, err
	}
	if foVersion < 0 {
		return true, nil
	}
	n, err := t.Get(ctx, fo)
	if err != nil {
		return false, err
	}
	return n.Exists && n.Version == foVersion && string(n.Data) == in.id, nil
}

// runTaken runs a taken item and then gives it back to its owner. Its claims read that item
// alone.
func (in *Instance) runTaken(ctx context.Context, i int) {
	one := []int{i}
	p, err := in.readPass(ctx, one)
	if err != nil || p.items[0].failover != in.id {
		return
	}
	it := p.items[0]
	in.mu.Lock()
	last := in.lastFire
	in.mu.Unlock()
	taken := func(x item) bool { return x.i == i && x.failover == in.id }
	read := &p // the first claim may go on it; after a claim, the next reads again
	if !it.rec.Done && it.rec.Fire > 0 {
		in.claimAndRun(ctx, it.rec.Fire, one, taken, read) // the run its instance did not finish
		read = nil
	}
	if last > 0 {
		// The fires its instance missed while it was dying collapse into one run, for this
		// instance's last fire (the claim skips it if it has run for that fire).
		in.claimAndRun(ctx, last, one, taken, read)
	}
	if ctx.Err() != nil {
		return // the taker's session ends: the item stays taken by it, and is taken again
	}
	in.release(ctx, i)
}

// findRetakes looks for the items whose failover node names this instance: an earlier session
// took them over and stopped before it gave them back, because the server stopped hearing
// from it for too long (watchLease), or because it expired. Nobody else runs such an item: the
// survivors flag only the items of instances that are gone, and its owner does not run an item
// taken by a live instance (with misfire, it waits for it to be given back). Left alone, it
// would wait for this instance to die; it is run again, as runTaken would have, and given back.
func (in *Instance) findRetakes(ctx context.Context) {
	if !in.config().Failover {
		return
	}
	items, err := in.tree.Children(ctx, in.p("sharding"))
	if err != nil {
		in.log.WithError(err).Warn("cannot look for the items an earlier session took over")
		return
	}
	var which []int
	var paths []string
	for _, name := range items {
		if i, err := strconv.Atoi(name); err == nil {
			which = append(which, i)
			paths = append(paths, in.p("sharding/"+name+"/failover"))
		}
	}
	nodes, err := in.tree.GetMany(ctx, paths)
	if err != nil {
		in.log.WithError(err).Warn("cannot look for the items an earlier session took over")
		return
	}
	var held []int
	for k, n := range nodes {
		if n.Exists && string(n.Data) == in.id {
			held = append(held, which[k])
		}
	}
	sort.Ints(held)
	if len(held) > 0 {
		in.log.WithField("items", held).Info("items an earlier session took over and did not give back: running them again")
	}
	in.mu.Lock()
	in.retake = held
	in.mu.Unlock()
	in.wake()
}

// release gives a taken item back to its owner: its failover node goes. A deletion whose
// answer was lost is read back and made again: a node left naming this live instance would
// keep the item from its owner for good.
func (in *Instance) release(ctx context.Context, i int) {
	t := in.tree
	fo := in.p("sharding/" + strconv.Itoa(i) + "/failover")
	for attempt := 0; attempt < maxAttempts; attempt++ {
		n, err := t.Get(ctx, fo)
		if err != nil || !n.Exists || string(n.Data) != in.id {
			return
		}
		err = t.Do(ctx, t.Delete(fo, n.Version))
		if !answerLost(err) {
			if err != nil && !errors.Is(err, state.ErrNotFound) {
				in.log.WithError(err).WithField("item", i).Warn("release a failed-over item")
			}
			return
		}
		if err := t.AwaitSession(ctx); err != nil {
			return // the session ends: the node names a dead instance, and is taken again
		}
	}
}

// maxAttempts bounds the attempts at a write whose answer is lost again and again.
const maxAttempts = 10

// removeFailoverInfo drops every failover flag and taker when failover is turned off.
func (in *Instance) removeFailoverInfo(ctx context.Context) {
	t := in.tree
	names, _ := t.Children(ctx, in.p("leader/failover/items"))
	for _, n := range names {
		t.Do(ctx, t.Delete(in.p("leader/failover/items/"+n), -1))
	}
	items, _ := t.Children(ctx, in.p("sharding"))
	for _, n := range items {
		t.Do(ctx, t.Delete(in.p("sharding/"+n+"/failover"), -1))
	}
}
