package lite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"sync"

	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/state"
)

// record is an item's last fire, in sharding/{item}: the fire (Unix ms) it was last claimed
// for and whether that run finished. A claim moves it forward in the same transaction that
// creates the running marker, so an item runs at most once per fire; a run that never
// finished (its instance died) is run again for the same fire by whoever takes it over.
type record struct {
	Fire int64 `json:"fire"`
	Done bool  `json:"done"`
}

// item is what a claim reads of one item.
type item struct {
	i          int
	owner      string // sharding/{i}/instance
	failover   string // sharding/{i}/failover, "" when absent
	foVersion  int32  // sharding/{i}/failover's version, -1 when absent
	disabled   bool
	running    bool
	rec        record
	recVersion int32
	exists     bool // sharding/{i}
}

// markers are the nodes under sharding/{i} besides its instance, in the order readItems reads
// them.
var markers = [...]string{"failover", "disabled", "running"}

// readItems reads the items which, all their reads sent together (Tree.GetMany), so that a pass
// over a thousand items waits about as long as for a few reads, not for thousands one after
// another. First sharding/{i} and its instance node: the record's count of children says
// whether there is anything else under it, and only then are the failover, disabled and
// running nodes read, in a second round for the items that need one. An item at rest (its
// instance node alone) costs two reads rather than five: ZooKeeper's work, and ours, goes by
// the request.
//
// The reads are hints, as they were one at a time: each node is read at its own moment, a count
// of one that spares the markers' reads included, and whatever is decided on them is checked
// again by the transaction that acts on it (see claimAndRun and flagCrashed).
func (in *Instance) readItems(ctx context.Context, which []int) ([]item, error) {
	paths := make([]string, 0, 2*len(which))
	for _, i := range which {
		base := in.p("sharding/" + strconv.Itoa(i))
		paths = append(paths, base, base+"/instance")
	}
	nodes, err := in.tree.GetMany(ctx, paths)
	if err != nil {
		return nil, err
	}
	items := make([]item, len(which))
	var more []int // the items with children besides their instance node
	for k, i := range which {
		rec, owner := nodes[2*k], nodes[2*k+1]
		it := item{i: i, foVersion: -1}
		if rec.Exists {
			it.exists, it.recVersion = true, rec.Version
			if len(rec.Data) > 0 {
				if err := json.Unmarshal(rec.Data, &it.rec); err != nil {
					return nil, fmt.Errorf("item %d: unreadable record %q: %w", i, rec.Data, err)
				}
			}
			known := int32(0)
			if owner.Exists {
				it.owner, known = string(owner.Data), 1
			}
			if rec.Children > known {
				more = append(more, k)
			}
		}
		items[k] = it
	}
	if len(more) == 0 {
		return items, nil
	}
	paths = paths[:0]
	for _, k := range more {
		base := in.p("sharding/" + strconv.Itoa(which[k]))
		for _, m := range markers {
			paths = append(paths, base+"/"+m)
		}
	}
	if nodes, err = in.tree.GetMany(ctx, paths); err != nil {
		return nil, err
	}
	for j, k := range more {
		it, n := &items[k], nodes[len(markers)*j:len(markers)*(j+1)]
		if n[0].Exists {
			it.failover, it.foVersion = string(n[0].Data), n[0].Version
		}
		it.disabled, it.running = n[1].Exists, n[2].Exists
	}
	return items, nil
}

// pass is one read of items: the sharding's version, read before them, and the items. A
// claim built on it checks that version: an item that a resharding gave to another instance
// after the read is not claimed on the strength of it.
type pass struct {
	sharding int32
	items    []item
}

// readPass reads leader/sharding, then the items which.
func (in *Instance) readPass(ctx context.Context, which []int) (pass, error) {
	sh, err := in.tree.Get(ctx, in.p("leader/sharding"))
	if err != nil {
		return pass{}, fmt.Errorf("read the sharding: %w", err)
	}
	items, err := in.readItems(ctx, which)
	if err != nil {
		return pass{}, fmt.Errorf("read the items: %w", err)
	}
	return pass{sharding: sh.Version, items: items}, nil
}

// allItems lists the items of a job of n items.
func allItems(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}

// runOwn runs this instance's items for a fire: those assigned to it, unless its server is
// disabled. An item taken over by another instance is that instance's to run until it gives it
// back: with misfire, it runs for the fire once given back (claimAndRun waits for it);
// without, it is skipped. Catching up (the fire is one this instance has run already) runs the
// items it received since; without failover, not the ones whose run for that fire was
// interrupted: re-running those is failover's business.
func (in *Instance) runOwn(ctx context.Context, fire int64, catchUp bool) {
	ok, err := in.serverEnabled(ctx, in.ip)
	if err != nil || !ok {
		return
	}
	cfg := in.config()
	var read *pass
	if cfg.Failover && cfg.MonitorExecution {
		read = in.runInterrupted(ctx, cfg, fire, in.mine)
	}
	in.claimAndRun(ctx, fire, allItems(cfg.ShardingTotalCount), func(it item) bool {
		if catchUp && !cfg.Failover && it.rec.Fire == fire && !it.rec.Done {
			return false
		}
		return it.owner == in.id // taken by another: see claimAndRun
	}, read)
}

// mine says whether it is this instance's to run: assigned to it and not taken over by another.
func (in *Instance) mine(it item) bool {
	return it.owner == in.id && (it.failover == "" || it.failover == in.id)
}

// runOwed runs, on an instance that has not fired yet, the interrupted runs of the items a
// resharding handed it (runInterrupted, for every fire before before): it has no fire to catch
// up on, and the flag that would have the item taken over may have been refused, the sharding
// having moved first.
func (in *Instance) runOwed(ctx context.Context, before int64) {
	cfg := in.config()
	if !cfg.Failover || !cfg.MonitorExecution {
		return
	}
	if ok, err := in.serverEnabled(ctx, in.ip); err != nil || !ok {
		return
	}
	in.runInterrupted(ctx, cfg, before, in.mine)
}

// runInterrupted runs, each for its own fire, the runs of this instance's items that were
// claimed for a fire before fire and never finished (their instance died, or lost its session,
// under them: no running marker, no completion). Failover runs them when it takes the item
// first; but the resharding that follows an instance's death may hand the item to an instance
// before the item is flagged, and that instance's claim for a later fire would overwrite the
// record that says the earlier run is owed.
//
// It returns its read of the items when it has claimed nothing on it (nothing was owed, which
// is the rule), for the claim of fire to go on: one pass over the items rather than two. The
// claim checks what it decides on that read as on a read of its own (see claimAndRun).
func (in *Instance) runInterrupted(ctx context.Context, cfg *parsed, fire int64, mine func(item) bool) *pass {
	all := allItems(cfg.ShardingTotalCount)
	p, err := in.readPass(ctx, all)
	if err != nil {
		in.log.WithError(err).Warn("read the items")
		return nil
	}
	owed := map[int64]bool{}
	for _, it := range p.items {
		if it.exists && mine(it) && !it.disabled && !it.running && !it.rec.Done && it.rec.Fire > 0 && it.rec.Fire < fire {
			owed[it.rec.Fire] = true
		}
	}
	if len(owed) == 0 {
		return &p
	}
	fires := make([]int64, 0, len(owed))
	for f := range owed {
		fires = append(fires, f)
	}
	sort.Slice(fires, func(i, j int) bool { return fires[i] < fires[j] })
	read := &p // the first claim may go on it; after a claim, each reads again
	for _, f := range fires {
		in.claimAndRun(ctx, f, all, func(it item) bool { return mine(it) && it.rec.Fire == f && !it.rec.Done }, read)
		read = nil
	}
	return nil
}

// claimAndRun claims the items pick chooses, among which, for fire and runs them. Without
// monitorExecution there is nothing to claim: the items just run. read, if not nil, is a read
// of which made since this instance's last claim: the first round decides on it rather than
// read again.
//
// An item chosen but taken over by another instance (its failover node names it) is not
// claimed: the taker runs it, for the fire its instance did not finish and for the taker's
// last fire, then gives it back. With misfire, a claim for a later fire waits for that, as
// for the running marker of an earlier fire, and claims the item once it is given back
// (README: "items still running elsewhere run once they end"). The taker needs nothing of
// this instance to give it back; a taker that goes (its instance node gone) is not waited for:
// the item is flagged and taken again, by this instance's failover too, which this wait must
// not hold up.
//
// What it reads only says what to try. The claim is one transaction that holds only if what
// made each item claimable still holds: the sharding has the version read before the items
// (no resharding moved an owner since), no resharding is in progress, each item's record has
// the version read (nobody claimed or completed it since: both write it) and its running
// marker can be created (nobody runs it). So it does not matter when, or in which order, the
// nodes were read: a claim decided on a stale read fails, and the items are read again.
func (in *Instance) claimAndRun(ctx context.Context, fire int64, which []int, pick func(item) bool, read *pass) {
	cfg := in.config()
	t := in.tree
	var gone map[string]bool // takers seen gone: their items are failover's
	for ctx.Err() == nil {
		var p pass
		if read != nil {
			p, read = *read, nil
		} else {
			var err error
			if p, err = in.readPass(ctx, which); err != nil {
				in.log.WithError(err).Warn("read the items")
				return
			}
		}
		var chosen, taken []item
		var waitFor []string
		for _, it := range p.items {
			if !it.exists || !pick(it) || it.disabled {
				continue
			}
			if it.failover != "" && it.failover != in.id {
				// Taken over by another instance, which runs it until it gives it back.
				if cfg.Misfire && cfg.MonitorExecution && it.rec.Fire < fire && !gone[it.failover] {
					taken = append(taken, it)
				}
				continue
			}
			if !cfg.MonitorExecution {
				chosen = append(chosen, it)
				continue
			}
			if it.rec.Fire > fire || (it.rec.Fire == fire && it.rec.Done) {
				continue // run for this fire (or a later one) already
			}
			if it.running {
				if it.rec.Fire < fire && cfg.Misfire {
					waitFor = append(waitFor, in.p("sharding/"+strconv.Itoa(it.i)+"/running"))
				}
				continue // running elsewhere: for this fire, or (misfire off) an earlier one
			}
			chosen = append(chosen, it)
		}
		if len(chosen) == 0 {
			// Misfire: items still running for an earlier fire, or taken over by another
			// instance, run once they end, or once they are given back.
			switch {
			case len(waitFor) > 0:
				if err := in.waitGone(ctx, waitFor[0]); err != nil {
					return
				}
			case len(taken) > 0:
				takerGone, err := in.waitGivenBack(ctx, taken[0])
				if err != nil {
					return
				}
				if takerGone {
					if gone == nil {
						gone = map[string]bool{}
					}
					gone[taken[0].failover] = true
				}
			default:
				return
			}
			continue
		}
		if cfg.MonitorExecution {
			ops := in.claimOps(t, fire, p.sharding, chosen)
			sid := t.SessionID()
			in.testHook("claim")
			if err := t.Multi(ctx, ops...); err != nil {
				switch {
				case isRace(err):
					// The sharding moved, the leader is resharding, or another instance claimed
					// first: read again (after the resharding) and claim what is left.
					if err := in.awaitNoResharding(ctx); err != nil {
						return
					}
					continue
				case answerLost(err):
					// ZooKeeper may have made the claim: its markers would name this instance
					// and nobody else would run the items. Only the markers can tell.
					made, err := in.claimMade(ctx, sid, fire, chosen)
					if err != nil {
						in.log.WithError(err).Warn("claim items: the answer was lost and the claim cannot be read back")
						return
					}
					if !made {
						continue // read again and claim what is left
					}
					in.log.WithField("fire", fire).Info("a claim whose answer was lost was made: running its items")
				default:
					in.log.WithError(err).Warn("claim items")
					return
				}
			}
		}
		finished := in.runItems(ctx, cfg, fire, chosen)
		if cfg.MonitorExecution && ctx.Err() != nil {
			// Stopping (Run's context ended: a SIGTERM, a lapsed lease) with some items of the
			// claim run and some cut short: the interrupted ones are taken over and run again
			// for this fire, as they must; the finished ones must not be.
			in.completeFinished(ctx, fire, chosen, finished)
			return
		}
		if cfg.MonitorExecution {
			if err := in.complete(ctx, in.completeOps(t, fire, chosen)); err != nil {
				// The session ended under the run: the items count as interrupted, and are
				// taken over and run again for this fire, unless this instance comes back
				// before anyone claims them and records the runs that did finish.
				in.log.WithError(err).Warn("record the items' completion")
				in.keepUnrecorded(fire, chosen, finished)
				return
			}
			in.nudge(ctx)
		}
		if (len(waitFor) == 0 && len(taken) == 0) || !cfg.MonitorExecution {
			return
		}
	}
}

// waitGivenBack returns once item it, read as taken over by another instance, may no longer
// be: its failover node changed (the taker gave it back, or another took it after the taker
// died), or its taker's instance node changed. It says whether the taker is gone (its node
// absent): its items are then failover's, and the caller does not wait for them any more.
func (in *Instance) waitGivenBack(ctx context.Context, it item) (takerGone bool, err error) {
	t := in.tree
	fo, w1, err := t.GetW(ctx, in.p("sharding/"+strconv.Itoa(it.i)+"/failover"))
	if err != nil {
		return false, err
	}
	if !fo.Exists || fo.Version != it.foVersion {
		return false, nil // given back, or taken again, since the read: read again
	}
	taker, w2, err := t.GetW(ctx, in.p("instances/"+it.failover))
	if err != nil {
		return false, err
	}
	if !taker.Exists {
		return true, nil
	}
	select {
	case <-w1:
	case <-w2:
	case <-ctx.Done():
		return false, ctx.Err()
	}
	return false, nil
}

// completeFinished writes, once Run's context has ended, the completion of the items of a
// claim whose runs finished, on a context of its own bounded by a third of the session
// timeout: nothing else would write it before the session closes, and the survivors would take
// the items over as interrupted and run them again for the fire. It is safe whatever ended the
// context: the write deletes the items' running markers, which go with the session, so it
// fails once the session is gone, and while the session lives nobody has taken them over.
// What it cannot write is kept for a next session (keepUnrecorded).
func (in *Instance) completeFinished(ctx context.Context, fire int64, chosen []item, finished []bool) {
	var done []item
	for k, it := range chosen {
		if finished[k] {
			done = append(done, it)
		}
	}
	if len(done) == 0 {
		return
	}
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), in.sessionTimeout()/3)
	defer cancel()
	if err := in.tree.Multi(wctx, in.completeOps(in.tree, fire, done)...); err != nil {
		in.log.WithError(err).WithField("fire", fire).Warn("record the completion of the runs that finished before the stop")
		in.keepUnrecorded(fire, done, slices.Repeat([]bool{true}, len(done)))
	}
}

// claimOps builds a claim of the chosen items for fire: each item's record moves to the fire
// (at the version read) and its running marker goes up, checked against the sharding's
// version and against a resharding in progress.
func (in *Instance) claimOps(t *state.Tree, fire int64, sharding int32, chosen []item) []state.Op {
	ops := make([]state.Op, 0, 2+2*len(chosen))
	ops = append(ops, t.Check(in.p("leader/sharding"), sharding), t.Absent(in.p("leader/sharding/processing")))
	data, _ := json.Marshal(record{Fire: fire})
	for _, it := range chosen {
		base := in.p("sharding/" + strconv.Itoa(it.i))
		ops = append(ops, t.Set(base, data, it.recVersion), t.Create(base+"/running", []byte(in.id), true))
	}
	return ops
}

// completeOps builds the completion of the chosen items' runs for fire.
func (in *Instance) completeOps(t *state.Tree, fire int64, chosen []item) []state.Op {
	ops := make([]state.Op, 0, 2*len(chosen))
	data, _ := json.Marshal(record{Fire: fire, Done: true})
	for _, it := range chosen {
		base := in.p("sharding/" + strconv.Itoa(it.i))
		ops = append(ops, t.Set(base, data, -1), t.Delete(base+"/running", -1))
	}
	return ops
}

// awaitNoResharding returns once leader/sharding/processing is gone. A processing node of this
// session is deleted instead: this instance reshards only on its runner, which is here (a claim
// runs on the runner, or on the failover goroutines it waits for), so the node is a failed
// resharding's (one that could not delete it, its connection down): waited for, it would never
// go, and would stop every claim of every instance for as long as the session lives.
func (in *Instance) awaitNoResharding(ctx context.Context) error {
	t := in.tree
	proc := in.p("leader/sharding/processing")
	for {
		n, w, err := t.GetW(ctx, proc)
		if err != nil {
			return err
		}
		if !n.Exists {
			return nil
		}
		if n.Owner == t.SessionID() {
			if _, err := in.dropOwnProcessing(ctx); err != nil {
				return err
			}
			in.log.Warn("deleted the processing node of a resharding of this instance that failed")
			continue
		}
		select {
		case <-w:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// runItems runs the items concurrently and waits for all of them. It says which runs
// finished: returned before ctx ended (a run that returns after it may have stopped halfway).
func (in *Instance) runItems(ctx context.Context, cfg *parsed, fire int64, items []item) []bool {
	finished := make([]bool, len(items))
	var wg sync.WaitGroup
	for k, it := range items {
		sc := ShardingContext{
			TaskID:             fmt.Sprintf("%s@-@%d@-@%d@-@%s", cfg.JobName, it.i, fire, in.id),
			JobName:            cfg.JobName,
			ShardingTotalCount: cfg.ShardingTotalCount,
			JobParameter:       cfg.JobParameter,
			ShardingItem:       it.i,
			ShardingParameter:  cfg.params[it.i],
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := in.runItem(ctx, cfg, sc)
			finished[k] = ctx.Err() == nil
			if err != nil {
				// A failing job is the job's business, as in Elastic-Job: logged, not retried.
				in.log.WithError(err).WithField("item", sc.ShardingItem).Warn("item failed")
			}
		}()
	}
	wg.Wait()
	return finished
}

// claim is one of this instance's claims of an item: the fire, and the version of
// sharding/{item} that the claim wrote. As long as the record keeps that version, nobody has
// claimed the item since.
type claim struct {
	fire    int64
	version int32
}

// keepUnrecorded remembers the finished runs whose completion could not be written.
func (in *Instance) keepUnrecorded(fire int64, items []item, finished []bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	for k, it := range items {
		if !finished[k] {
			continue
		}
		if in.unrecorded == nil {
			in.unrecorded = map[int]claim{}
		}
		// A record's version moves by one at each write: the claim wrote recVersion+1.
		in.unrecorded[it.i] = claim{fire: fire, version: it.recVersion + 1}
	}
}

// recordUnrecorded writes, on a new session, the completion of the runs that finished while
// the previous one was being lost, for each item whose record still holds this instance's
// claim: nobody has claimed it since, so nobody has run it again, and now nobody will. An item
// claimed by another instance meanwhile has been (or is being) run again by it, and stays so:
// see README, "exactly once per fire".
func (in *Instance) recordUnrecorded(ctx context.Context) {
	in.mu.Lock()
	pending := in.unrecorded
	in.unrecorded = nil
	in.mu.Unlock()
	t := in.tree
	for i, c := range pending {
		base := in.p("sharding/" + strconv.Itoa(i))
		data, _ := json.Marshal(record{Fire: c.fire, Done: true})
		ops := []state.Op{t.Set(base, data, c.version)}
		// The old session's running marker is gone with it, unless that session lived on.
		if n, err := t.Get(ctx, base+"/running"); err == nil && n.Exists && n.Owner == t.SessionID() {
			ops = append(ops, t.Delete(base+"/running", n.Version))
		}
		err := t.Multi(ctx, ops...)
		switch {
		case err == nil:
			in.log.WithFields(logrus.Fields{"item": i, "fire": c.fire}).Info("recorded the completion of a run that ended as the session was lost")
		case isRace(err):
			// Claimed since by another instance, or gone with a smaller shard count.
		default:
			in.log.WithError(err).WithField("item", i).Warn("record the completion of a run that ended as the session was lost")
			in.mu.Lock()
			if in.unrecorded == nil {
				in.unrecorded = map[int]claim{}
			}
			if _, newer := in.unrecorded[i]; !newer {
				in.unrecorded[i] = c // for the next session
			}
			in.mu.Unlock()
		}
	}
}

// testHook calls the test's hook, if any.
func (in *Instance) testHook(op string) {
	if in.beforeMulti != nil {
		in.beforeMulti(op)
	}
}

// answerLost: a transaction's answer was lost with the connection (go-zookeeper's
// ErrConnectionClosed, ErrSessionMoved…), so ZooKeeper may or may not have applied it. A
// refused transaction is an *state.OpError instead.
func answerLost(err error) bool {
	var oe *state.OpError
	return errors.Is(err, state.ErrUnavailable) && !errors.As(err, &oe)
}

// claimMade reads back a claim whose answer was lost, once the connection is back on the
// session that sent it: it was made when the running markers are this session's and the
// records hold the fire at the version the claim wrote. A transaction is all or nothing, so
// the items agree; a claim not made leaves the records at the versions read before it.
func (in *Instance) claimMade(ctx context.Context, sid int64, fire int64, chosen []item) (bool, error) {
	t := in.tree
	if err := t.AwaitSession(ctx); err != nil {
		return false, err
	}
	if t.SessionID() != sid {
		return false, fmt.Errorf("%w: the session that made the claim has ended", state.ErrSessionExpired)
	}
	// The connection may be to another server now, which may not have applied the write yet:
	// read before a sync, a write that was made would read as not made.
	if err := t.Sync(ctx); err != nil {
		return false, err
	}
	// Read together: while the claim is made, nobody else writes these nodes (its running
	// markers stop every other claim), and while it is not, they cannot read as made.
	paths := make([]string, 0, 2*len(chosen))
	for _, it := range chosen {
		base := in.p("sharding/" + strconv.Itoa(it.i))
		paths = append(paths, base+"/running", base)
	}
	nodes, err := t.GetMany(ctx, paths)
	if err != nil {
		return false, err
	}
	made := 0
	for k := range chosen {
		run, rec, it := nodes[2*k], nodes[2*k+1], chosen[k]
		var r record
		if rec.Exists && json.Unmarshal(rec.Data, &r) == nil && rec.Version == it.recVersion+1 && r.Fire == fire && !r.Done &&
			run.Exists && run.Owner == sid && string(run.Data) == in.id {
			made++
		}
	}
	if made != 0 && made != len(chosen) {
		return false, fmt.Errorf("a claim of %d items reads back as made for %d of them", len(chosen), made)
	}
	return made != 0, nil
}

// isRace: a claim's transaction failed because something it read has changed.
func isRace(err error) bool {
	return errors.Is(err, state.ErrConflict) || errors.Is(err, state.ErrExists) || errors.Is(err, state.ErrNotFound)
}

// complete writes the items' completion. A connection lost under the write is waited for and
// the write made again while the session lives; a write whose answer was lost but which was
// applied shows on the retry as running markers already gone.
func (in *Instance) complete(ctx context.Context, ops []state.Op) error {
	err := in.tree.Multi(ctx, ops...)
	for attempt := 0; errors.Is(err, state.ErrUnavailable) && attempt < 10; attempt++ {
		if werr := in.tree.AwaitSession(ctx); werr != nil {
			return fmt.Errorf("%w (%w)", err, werr)
		}
		if err = in.tree.Multi(ctx, ops...); errors.Is(err, state.ErrNotFound) {
			return nil
		}
	}
	return err
}
