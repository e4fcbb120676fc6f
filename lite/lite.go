// Package lite is ejcloud's Elastic-Job-Lite mode (SPEC §11): the instances of a user's own
// program share a job's items through ZooKeeper alone, without Mesos. Each instance runs
// the job on its cron; the elected leader shares the items among the live instances with the
// cloud mode's strategies (scheduler/sharding) before the next fire; the items of an instance
// that disappears are run by the survivors (failover).
//
// The layout under /{namespace}/{jobName} is Elastic-Job-Lite 2.1.5's:
//
//	config                        job config JSON (JobConfig)
//	servers/{ip}                  "" enabled, "DISABLED" disabled
//	instances/{ip@-@pid}          ephemeral; "TRIGGER" runs the instance's items now
//	sharding/{item}               the item's last fire, {"fire":ms,"done":bool} (ejcloud's)
//	sharding/{item}/instance      the owning instance
//	sharding/{item}/running       ephemeral, while it runs (monitorExecution)
//	sharding/{item}/failover      the instance that took it over
//	sharding/{item}/disabled      the item does not run
//	leader/election/instance      ephemeral: the leader's instance id
//	leader/election/latch         the election's mutex
//	leader/sharding/necessary     resharding flag
//	leader/sharding/processing    ephemeral, while the leader reshards
//	leader/failover/items/{item}  items of crashed instances, waiting for a taker
//	leader/failover/latch         the takers' mutex
//
// Where it differs from the original, on purpose: the sharding transaction writes every
// assignment and clears necessary and processing together; failover markers are persistent,
// so that an item taken by an instance that then dies is taken again rather than lost; and
// each item records its last fire, claimed in the same transaction that writes its running
// marker, so that with monitorExecution no item runs twice for one fire, whatever the
// resharding and failover around it, and an interrupted run is run again for its fire.
package lite

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/executor/job"
	"github.com/ejcloud/ejcloud/state"
)

// Options says how an instance reaches ZooKeeper and who it is.
type Options struct {
	Servers        []string // ZooKeeper host:port
	Namespace      string   // root node, without slashes
	SessionTimeout time.Duration
	Digest         string // "user:password" for ZooKeeper digest authentication
	// JuteMaxBuffer is the servers' jute.maxbuffer, 0 for ZooKeeper's default: it bounds a
	// transaction, and so the shard count (state.Config.JuteMaxBuffer).
	JuteMaxBuffer int
	// IP names this instance's server (servers/{ip}); default the first non-loopback IPv4
	// address, as Elastic-Job-Lite.
	IP string
	// InstanceID defaults to "{ip}@-@{pid}". Several instances of one job in one process (tests)
	// need their own; it must start with "{ip}@-@" and have at most 64 characters.
	InstanceID string
	// Overwrite makes this instance's JobConfig replace the one in ZooKeeper when Run starts;
	// not when the instance registers again after a lost session, which would undo the changes
	// made in ZooKeeper since.
	Overwrite bool
	Logger    logrus.FieldLogger
}

// Instance is one instance of a lite job. Run it; it is safe for concurrent use.
type Instance struct {
	opts     Options
	local    *parsed
	simple   job.SimpleJob
	dataflow job.DataflowJob
	id, ip   string
	log      logrus.FieldLogger
	base     string // the job's node, relative to the namespace

	tree    *state.Tree
	wakeC   chan struct{} // the runner has work
	resched chan struct{} // the cron or time zone changed

	// beforeMulti, set by tests only (export_test.go), is called just before a claim ("claim"),
	// a taking ("take") or a failover flag ("flag") is sent, so that a test can lose its
	// answer or hold it back; and in an election, before the latch is taken ("elect") and
	// before the leader's node is created ("lead"), so that a test can choose the winner.
	beforeMulti func(op string)
	// observeOp, set by tests only, is the ZooKeeper session's state.Config.ObserveOp.
	observeOp func(op string, d time.Duration)
	// idle, set by tests only, is called by the runner each time it has done all its work, has
	// no wake-up waiting and is about to wait for one, with the last cron fire it ran: a
	// benchmark knows so when a fire's work, catching up included, is over.
	idle func(lastFire int64)

	mu        sync.Mutex // guards the fields below
	cfg       *parsed
	pending   int64 // a cron fire waiting for the runner (Unix ms), 0 for none
	triggered bool
	firing    bool  // the runner runs a cron fire (not failover or catching up)
	lastFire  int64 // the last cron fire this instance ran
	// unrecorded: runs that ended while the session was being lost, before their completion
	// could be written, by item; the next session records them (recordUnrecorded).
	unrecorded map[int]claim
	// retake: items an earlier session of this instance took over and did not give back
	// (findRetakes); the runner's next failover runs them before it takes new ones.
	retake []int

	// registered: a session of this Run has registered the config (registerConfig); the next
	// ones register the instance again, and neither overwrite the config in ZooKeeper nor stop
	// on an invalid one. Only Run's goroutine uses it.
	registered bool
}

// New checks the config and prepares an instance; j is a job.SimpleJob for SIMPLE, a
// job.DataflowJob for DATAFLOW and nil for SCRIPT.
func New(cfg JobConfig, j any, opts Options) (*Instance, error) {
	p, err := cfg.parse()
	if err != nil {
		return nil, err
	}
	in := &Instance{opts: opts, local: p, cfg: p, base: cfg.JobName,
		wakeC: make(chan struct{}, 1), resched: make(chan struct{}, 1)}
	switch v := j.(type) {
	case job.SimpleJob:
		in.simple = v
	case job.DataflowJob:
		in.dataflow = v
	case nil:
	default:
		return nil, fmt.Errorf("lite: job %s: %T is neither a job.SimpleJob nor a job.DataflowJob", cfg.JobName, j)
	}
	if (cfg.JobType == Simple && in.simple == nil) || (cfg.JobType == Dataflow && in.dataflow == nil) {
		return nil, fmt.Errorf("lite: job %s is %s but no such job was given", cfg.JobName, cfg.JobType)
	}
	if len(opts.Servers) == 0 || opts.Namespace == "" {
		return nil, errors.New("lite: Options.Servers and Options.Namespace are required")
	}
	if _, err := state.Offline(in.stateConfig()); err != nil {
		return nil, fmt.Errorf("lite: Options.JuteMaxBuffer: %w", err)
	}
	in.ip = opts.IP
	if in.ip == "" {
		in.ip = localIP()
	}
	in.id = opts.InstanceID
	if in.id == "" {
		in.id = in.ip + "@-@" + strconv.Itoa(os.Getpid())
	}
	if !strings.HasPrefix(in.id, in.ip+"@-@") || strings.Contains(in.id, "/") {
		return nil, fmt.Errorf("lite: instance id %q must start with %q and have no '/'", in.id, in.ip+"@-@")
	}
	if len(in.id) > maxInstanceIDLen {
		return nil, fmt.Errorf("lite: instance id %q is longer than %d characters", in.id, maxInstanceIDLen)
	}
	if err := in.shardsFit(p.ShardingTotalCount); err != nil {
		return nil, err
	}
	in.log = opts.Logger
	if in.log == nil {
		in.log = logrus.StandardLogger()
	}
	in.log = in.log.WithFields(logrus.Fields{"job": cfg.JobName, "instance": in.id})
	return in, nil
}

// ID returns the instance id, "{ip}@-@{pid}" unless Options gave one.
func (in *Instance) ID() string { return in.id }

// Trigger runs this instance's items once, now (as the TRIGGER flag does).
func (in *Instance) Trigger() {
	in.mu.Lock()
	in.triggered = true
	in.mu.Unlock()
	in.wake()
}

func (in *Instance) wake() {
	select {
	case in.wakeC <- struct{}{}:
	default:
	}
}

func (in *Instance) config() *parsed {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.cfg
}

// stateConfig is how the instance's sessions reach ZooKeeper.
func (in *Instance) stateConfig() state.Config {
	return state.Config{Servers: in.opts.Servers, Namespace: in.opts.Namespace,
		SessionTimeout: in.opts.SessionTimeout, Digest: in.opts.Digest, JuteMaxBuffer: in.opts.JuteMaxBuffer}
}

// errShutdown: the instance node was deleted by an operator, the shutdown flag.
var errShutdown = errors.New("lite: instance shut down through ZooKeeper")

// Run registers the instance and runs the job until ctx ends or an operator deletes the
// instance's node (shutdown); both return nil. A session that expires costs the running
// items (their runs are cancelled: the survivors take them over) and the instance registers
// again on the new session.
func (in *Instance) Run(ctx context.Context) error {
	cfg := in.stateConfig()
	cfg.Logger, cfg.ObserveOp = in.log, in.observeOp
	t, err := state.Dial(ctx, cfg)
	if err != nil {
		return fmt.Errorf("lite: %w", err)
	}
	in.tree = t
	defer t.Close()
	in.registered = false
	for {
		err := in.session(ctx)
		switch {
		case ctx.Err() != nil:
			in.resign()
			return nil
		case errors.Is(err, errShutdown):
			in.log.Info("shut down through ZooKeeper")
			in.resign()
			return nil
		case errors.Is(err, state.ErrSessionExpired), errors.Is(err, state.ErrUnavailable):
			in.log.WithError(err).Warn("ZooKeeper session lost: registering again")
			if err := in.awaitConnected(ctx); err != nil {
				in.resign()
				return nil
			}
		default:
			return err
		}
	}
}

// dropStaleRunning deletes the running markers of this session's runs that no longer run. A
// session goes on when the instance stopped its runs because the server had not heard from it
// for two thirds of a session timeout (watchLease) and the connection came back in time: the
// runs were cancelled, and their markers, ephemeral, would stay for as long as the process
// lives, holding every resharding (which waits for them to go) and the items themselves. No
// run of this instance is in progress here: the last session's ended with it. The items'
// records still say their fires were not done, and they are run again as interrupted ones.
// So is no resharding: a processing node of the session is a resharding's that was cut short,
// and goes too, or it would stop every claim (this instance's own first, which would wait for
// it) for as long as the process lives.
func (in *Instance) dropStaleRunning(ctx context.Context) {
	t := in.tree
	if dropped, err := in.dropOwnProcessing(ctx); err != nil {
		in.log.WithError(err).Warn("cannot delete the processing node of a resharding the last session stopped")
	} else if dropped {
		in.log.Info("deleted the processing node of a resharding stopped when the server stopped hearing from this instance")
	}
	items, err := t.Children(ctx, in.p("sharding"))
	if err != nil {
		in.log.WithError(err).Warn("cannot look for the running markers of runs the last session stopped")
		return
	}
	sid := t.SessionID()
	paths := make([]string, len(items))
	for k, item := range items {
		paths[k] = in.p("sharding/" + item + "/running")
	}
	nodes, err := t.GetMany(ctx, paths)
	if err != nil {
		in.log.WithError(err).Warn("cannot look for the running markers of runs the last session stopped")
		return
	}
	for k, item := range items {
		p, n := paths[k], nodes[k]
		if !n.Exists || n.Owner != sid {
			continue
		}
		if err := t.Do(ctx, t.Delete(p, n.Version)); err != nil && !errors.Is(err, state.ErrNotFound) {
			in.log.WithError(err).WithField("item", item).Warn("cannot delete the running marker of a run the last session stopped")
			continue
		}
		in.log.WithField("item", item).Info("deleted the running marker of a run stopped when the server stopped hearing from this instance")
	}
}

// resign gives up the leadership at once, rather than at the session's end.
func (in *Instance) resign() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if n, err := in.tree.Get(ctx, in.p("leader/election/instance")); err == nil && n.Exists && string(n.Data) == in.id {
		in.tree.Do(ctx, in.tree.Delete(in.p("leader/election/instance"), n.Version))
	}
}

// session runs the instance for one ZooKeeper session; every goroutine it starts ends
// before it returns.
func (in *Instance) session(ctx context.Context) error {
	expired := in.tree.SessionExpired()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := in.register(ctx); err != nil {
		select {
		case <-expired:
			return state.ErrSessionExpired
		default:
		}
		return err
	}
	in.recordUnrecorded(ctx)
	in.dropStaleRunning(ctx)
	in.findRetakes(ctx)
	sid := in.tree.SessionID()
	shutdown := make(chan struct{})
	var once sync.Once
	stop := func() { once.Do(func() { close(shutdown) }) }
	var wg sync.WaitGroup
	for _, f := range []func(context.Context){
		in.ticker,
		in.runner,
		func(ctx context.Context) { in.watchSelf(ctx, sid, stop) },
		in.watchInstances,
		in.watchServers,
		in.watchConfig,
		in.watchLeader,
		func(ctx context.Context) { in.watchWake(ctx, "leader/failover/items", true) },
		func(ctx context.Context) { in.watchWake(ctx, "leader/sharding", false) },
		func(ctx context.Context) { in.watchWake(ctx, "leader/sharding/necessary", false) },
	} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(ctx)
		}()
	}
	lost := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		in.watchLease(ctx, lost)
	}()
	var err error
	select {
	case <-ctx.Done():
	case <-expired:
		err = state.ErrSessionExpired
	case <-lost:
		err = fmt.Errorf("%w: the server has not heard from this instance for two thirds of a session timeout: its runs stop before the session can expire", state.ErrUnavailable)
	case <-shutdown:
		err = errShutdown
	}
	cancel()
	wg.Wait()
	return err
}

// p is a path under the job's node.
func (in *Instance) p(rel string) string { return in.base + "/" + rel }

// register writes the config, the server and the instance, joins the election and raises the
// resharding flag (Elastic-Job-Lite's registerStartUpInfo).
func (in *Instance) register(ctx context.Context) error {
	t := in.tree
	for _, d := range []string{"servers", "instances", "sharding", "leader/election", "leader/sharding", "leader/failover/items"} {
		if err := t.Ensure(ctx, in.p(d)); err != nil {
			return fmt.Errorf("lite: %w", err)
		}
	}
	if err := in.registerConfig(ctx); err != nil {
		return err
	}
	if err := t.Do(ctx, t.Create(in.p("servers/"+in.ip), nil, false)); err != nil && !errors.Is(err, state.ErrExists) {
		return fmt.Errorf("lite: register server: %w", err)
	}
	if err := in.registerInstance(ctx); err != nil {
		return err
	}
	if _, err := in.leader(ctx); err != nil {
		return err
	}
	return in.setNecessary(ctx)
}

// registerConfig keeps the config in ZooKeeper unless there is none or Overwrite is set.
//
// Overwrite applies when the instance starts, at the first session of Run, as Elastic-Job-Lite
// 2.1.5 writes the config only at startup: the sessions that follow (after a lost lease or an
// expiry: a network blip) take the config in ZooKeeper, or every blip would undo an operator's
// change on every instance. Nor does an invalid config in ZooKeeper stop them: like a running
// instance (watchConfig), they keep the config they have.
func (in *Instance) registerConfig(ctx context.Context) error {
	for {
		err := in.tryRegisterConfig(ctx)
		// Another instance wrote it between our read and our write: read again.
		if !errors.Is(err, state.ErrExists) && !errors.Is(err, state.ErrConflict) {
			if err == nil {
				in.registered = true
			}
			return err
		}
	}
}

func (in *Instance) tryRegisterConfig(ctx context.Context) error {
	t := in.tree
	n, err := t.Get(ctx, in.p("config"))
	if err != nil {
		return fmt.Errorf("lite: read config: %w", err)
	}
	if n.Exists && (!in.opts.Overwrite || in.registered) {
		p, err := in.decode(n.Data)
		switch {
		case err != nil && in.registered:
			in.log.WithError(err).Error("the config in ZooKeeper is invalid: keeping the current one")
			return nil
		case err != nil:
			return fmt.Errorf("lite: the config in ZooKeeper: %w", err)
		}
		in.setConfig(p)
		return nil
	}
	data, err := jsonConfig(in.local.JobConfig)
	if err != nil {
		return err
	}
	op := t.Create(in.p("config"), data, false)
	if n.Exists {
		op = t.Set(in.p("config"), data, n.Version)
	}
	if err := t.Do(ctx, op); err != nil {
		return fmt.Errorf("lite: write config: %w", err)
	}
	in.setConfig(in.local)
	return nil
}

func (in *Instance) setConfig(p *parsed) {
	in.mu.Lock()
	old := in.cfg
	in.cfg = p
	in.mu.Unlock()
	if old.Cron != p.Cron || old.TimeZone != p.TimeZone {
		select {
		case in.resched <- struct{}{}:
		default:
		}
	}
}

func (in *Instance) setNecessary(ctx context.Context) error {
	if err := in.raiseNecessary(ctx); err != nil {
		return fmt.Errorf("lite: set the resharding flag: %w", err)
	}
	return nil
}

// raiseNecessary raises the resharding flag in one transaction with ops: it creates the flag,
// or writes it again when it is up, which moves its version, so that a resharding in progress
// (which may have read the instances before this change) looks again: reshard deletes the
// flag only at the version it saw before reading them.
func (in *Instance) raiseNecessary(ctx context.Context, ops ...state.Op) error {
	t := in.tree
	nec := in.p("leader/sharding/necessary")
	for {
		n, err := t.Get(ctx, nec)
		if err != nil {
			return err
		}
		flag := t.Create(nec, nil, false)
		if n.Exists {
			flag = t.Set(nec, nil, -1)
		}
		err = t.Multi(ctx, append(ops[:len(ops):len(ops)], flag)...)
		var oe *state.OpError
		if errors.As(err, &oe) && oe.Path == t.Path(nec) {
			continue // the flag came or went between the read and the write
		}
		return err
	}
}

// leader returns the leader's instance id, electing one when there is none.
func (in *Instance) leader(ctx context.Context) (string, error) {
	for {
		n, err := in.tree.Get(ctx, in.p("leader/election/instance"))
		if err != nil {
			return "", fmt.Errorf("lite: read the leader: %w", err)
		}
		if n.Exists {
			return string(n.Data), nil
		}
		if err := in.elect(ctx); err != nil {
			return "", err
		}
	}
}

// elect: under the election latch, the first candidate to find no leader becomes it; a new
// leader raises the resharding flag.
func (in *Instance) elect(ctx context.Context) error {
	t := in.tree
	in.testHook("elect")
	release, err := t.Lock(ctx, in.p("leader/election/latch"))
	if err != nil {
		return fmt.Errorf("lite: election: %w", err)
	}
	defer release()
	n, err := t.Get(ctx, in.p("leader/election/instance"))
	if err != nil || n.Exists {
		return err
	}
	in.testHook("lead")
	if err := t.Do(ctx, t.Create(in.p("leader/election/instance"), []byte(in.id), true)); err != nil {
		if errors.Is(err, state.ErrExists) {
			// Another candidate made it first without the latch (a process of an older version,
			// whose goroutines could hold the latch together): it won, and the callers read the
			// leader again. An error would fail the registration (Run) or skip a fire.
			in.log.Info("another candidate became leader first")
			return nil
		}
		return fmt.Errorf("lite: become leader: %w", err)
	}
	in.log.Info("elected leader")
	return in.setNecessary(ctx)
}

// ticker turns the cron schedule into fires for the runner.
func (in *Instance) ticker(ctx context.Context) {
	for {
		cfg := in.config()
		next := cfg.schedule.Next(time.Now().In(cfg.loc))
		var fire <-chan time.Time
		var timer *time.Timer
		if !next.IsZero() {
			timer = time.NewTimer(time.Until(next))
			fire = timer.C
		}
		select {
		case <-ctx.Done():
		case <-in.resched:
		case <-fire:
			in.fire(next.UnixMilli())
		}
		if timer != nil {
			timer.Stop()
		}
		if ctx.Err() != nil {
			return
		}
	}
}

// fire hands a cron fire to the runner. A fire that comes while the runner runs the previous
// fire waits for it with misfire on (a newer fire replaces an older waiting one), and is
// dropped without. One that comes during other work (failover, catching up) always waits.
func (in *Instance) fire(ms int64) {
	in.mu.Lock()
	if in.firing && !in.cfg.Misfire {
		in.mu.Unlock()
		in.log.WithField("fire", ms).Info("fire skipped: the previous run is not over (misfire is off)")
		return
	}
	in.pending = ms
	in.mu.Unlock()
	in.wake()
}

// runner does all the runs of the session, one at a time: fires, triggers, failover and
// catching up after a resharding.
func (in *Instance) runner(ctx context.Context) {
	// The running markers that held up a resharding (reshardIfIdle), watched, one watch per
	// marker at a time: the runner looks again when one goes.
	markers := map[string]state.Watch{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-in.wakeC:
		default:
			if in.idle != nil {
				in.mu.Lock()
				last := in.lastFire
				in.mu.Unlock()
				in.idle(last)
			}
			if !in.awaitWake(ctx, markers) {
				return
			}
		}
		for ctx.Err() == nil {
			// This round does what every wake-up so far asked for (a fire, a trigger, flags to
			// take, a sharding to catch up with): it reads all of that after this point. Left
			// waiting, the wake-up of a fire that came during the last round, and that this one
			// runs, would cost another round over the items for nothing.
			select {
			case <-in.wakeC:
			default:
			}
			in.mu.Lock()
			fire, trig := in.pending, in.triggered
			in.pending, in.triggered, in.firing = 0, false, fire != 0
			in.mu.Unlock()
			if fire != 0 {
				if ok, _ := in.tree.Connected(); !ok {
					// Paused: the sharding it would run on may be stale, and its markers
					// cannot be written.
					in.log.WithField("fire", fire).Warn("fire skipped: paused while the ZooKeeper connection is lost")
				} else {
					in.runFire(ctx, fire)
					in.mu.Lock()
					in.lastFire = max(in.lastFire, fire)
					in.mu.Unlock()
				}
				in.mu.Lock()
				in.firing = false
				in.mu.Unlock()
			}
			if trig {
				in.runFire(ctx, time.Now().UnixMilli())
			}
			in.mu.Lock()
			next := in.pending != 0 || in.triggered
			in.mu.Unlock()
			if next {
				continue // a waiting fire first: it does all of what follows too
			}
			in.failover(ctx)
			in.mu.Lock()
			last := in.lastFire
			in.mu.Unlock()
			// New items owe no run for a fire before the resharding that makes them: their
			// record says done up to now, the label a fire made now would have (fires are
			// labelled by their scheduled time, triggers by when they came: never later than
			// now). The leader's last fire alone would not do: a leader that has not fired
			// (just elected, or a job that fires rarely) would write 0, and the others would
			// catch up on the new items for fires they ran before the items existed.
			now := time.Now().UnixMilli()
			running, err := in.reshardIfIdle(ctx, max(last, now)+1)
			if err != nil && ctx.Err() == nil {
				in.log.WithError(err).Warn("sharding failed")
			}
			in.watchMarkers(ctx, markers, running)
			switch {
			case last != 0 && in.config().MonitorExecution:
				// Catch up on items this instance received since its last fire; only the fire
				// records say what is owed.
				in.runOwn(ctx, last, true)
			case last == 0:
				// No fire yet (started after the last one): nothing to catch up on, but an
				// interrupted run of an item received is owed all the same.
				in.runOwed(ctx, now+1)
			}
			in.mu.Lock()
			more := in.pending != 0 || in.triggered
			in.mu.Unlock()
			if !more {
				break
			}
		}
	}
}

// awaitWake waits for the runner to have work: a wake-up, or one of the watched markers gone
// (or changed), whose watch is then dropped. It returns false once ctx has ended.
func (in *Instance) awaitWake(ctx context.Context, markers map[string]state.Watch) bool {
	cases := []reflect.SelectCase{{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
		{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(in.wakeC)}}
	paths := make([]string, 0, len(markers))
	for m, w := range markers {
		paths = append(paths, m)
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w)})
	}
	chosen, _, _ := reflect.Select(cases)
	if chosen >= 2 {
		delete(markers, paths[chosen-2])
	}
	return chosen != 0
}

// watchMarkers watches the running markers a resharding waits for (reshardIfIdle), those not
// watched already: a marker's watch stays until it fires. A marker gone since it was read wakes
// the runner at once.
func (in *Instance) watchMarkers(ctx context.Context, markers map[string]state.Watch, running []string) {
	for _, m := range running {
		if w, ok := markers[m]; ok && !fired(w) {
			continue
		}
		n, w, err := in.tree.GetW(ctx, m)
		if err != nil {
			delete(markers, m) // the session is failing: its end, if it comes, ends ctx
			continue
		}
		markers[m] = w // absent: it fires when a next run makes the marker again
		if !n.Exists {
			in.wake()
		}
	}
}

// runFire: reshard if needed (the leader) or wait for it (the others), run the failed-over
// items waiting for a taker, then this instance's own.
func (in *Instance) runFire(ctx context.Context, fire int64) {
	if err := in.shardIfNecessary(ctx, fire); err != nil {
		if ctx.Err() == nil {
			in.log.WithError(err).Warn("fire skipped: sharding failed")
		}
		return
	}
	in.failover(ctx)
	in.runOwn(ctx, fire, false)
}

func localIP() string {
	addrs, err := net.InterfaceAddrs()
	if err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
				return n.IP.String()
			}
		}
	}
	return "127.0.0.1"
}

// registerInstance creates the instance's ephemeral node. After a lost session the old node
// may live until the server expires that session: wait for it, for two session timeouts; a
// node that stays is another process's with the same id.
func (in *Instance) registerInstance(ctx context.Context) error {
	t := in.tree
	self := in.p("instances/" + in.id)
	// The node and the resharding flag go up together: from the moment the instance shows,
	// no fire runs on a sharding made without it.
	err := in.raiseNecessary(ctx, t.Create(self, nil, true))
	if !errors.Is(err, state.ErrExists) {
		if err != nil {
			return fmt.Errorf("lite: register instance: %w", err)
		}
		return nil
	}
	if n, err := t.Get(ctx, self); err == nil && n.Exists && n.Owner == t.SessionID() {
		return nil // made by this session, by an attempt whose answer was lost
	}
	wctx, cancel := context.WithTimeout(ctx, 2*in.sessionTimeout())
	defer cancel()
	if err := in.waitGone(wctx, self); err != nil {
		return fmt.Errorf("lite: instance %s is registered by another session: give each instance its own InstanceID: %w", in.id, err)
	}
	if err := in.raiseNecessary(ctx, t.Create(self, nil, true)); err != nil {
		return fmt.Errorf("lite: register instance: %w", err)
	}
	return nil
}

func (in *Instance) sessionTimeout() time.Duration {
	if in.opts.SessionTimeout > 0 {
		return in.opts.SessionTimeout
	}
	return 10 * time.Second
}

// watchLease closes lost once the server may be about to expire the session: when it has not
// surely heard from this instance (Tree.LastHeard: the send time of the newest packet it
// answered) for two thirds of the negotiated session timeout, whether or not the client has
// noticed a broken connection. ZooKeeper expires a session a session timeout after the last
// packet it received, and the survivors take this instance's items over from then on; a
// client that waited to notice the loss (two thirds of a timeout of silence in go-zookeeper)
// and then a session timeout more would still run them while the survivors do. Stopping at
// two thirds, as Curator's and etcd's leases do, leaves the runs a third of a timeout to end.
func (in *Instance) watchLease(ctx context.Context, lost chan<- struct{}) {
	for {
		heard, timeout := in.tree.LastHeard()
		left := time.Until(heard.Add(timeout * leaseNum / leaseDen))
		if left <= 0 {
			close(lost)
			return
		}
		timer := time.NewTimer(left)
		select {
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return
		}
	}
}

// leaseNum/leaseDen is the part of the session timeout, counted from the last packet the server
// surely heard, after which an instance stops its runs (see watchLease).
const leaseNum, leaseDen = 2, 3

// awaitConnected waits for the client to have a session again.
func (in *Instance) awaitConnected(ctx context.Context) error {
	for {
		ok, changed := in.tree.Connected()
		if ok {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
