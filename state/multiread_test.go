package state_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/state/statetest"
	"github.com/ejcloud/ejcloud/taskid"
)

// rawConn is a plain client session on the test's ZooKeeper, with a root node of its own.
// maxBuffer, if not 0, limits the size of a reply; events, if set, is told of the session's.
func rawConn(t *testing.T, env statetest.Env, maxBuffer int, events func(zk.Event)) (*zk.Conn, string) {
	t.Helper()
	if events == nil {
		events = func(zk.Event) {}
	}
	conn, _, err := zk.Connect(env.Servers, sessionTimeout, zk.WithLogInfo(false), zk.WithLogger(quiet{}),
		zk.WithMaxBufferSize(maxBuffer), zk.WithEventCallback(events))
	must(t, err, "zk.Connect")
	t.Cleanup(conn.Close)
	await.True(t, 10*time.Second, "a session", func() bool { return conn.State() == zk.StateHasSession })
	root := "/" + env.Namespace
	if _, err := conn.Create(root, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		t.Fatalf("create %s: %v", root, err)
	}
	return conn, root
}

func TestMultiReadAnswersEachOp(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	conn, root := rawConn(t, env, 0, nil)
	for _, n := range []string{"a", "b", "b/x", "b/y"} {
		_, err := conn.Create(root+"/"+n, []byte("data of "+n), 0, zk.WorldACL(zk.PermAll))
		must(t, err, "create "+n)
	}
	_, err := conn.Set(root+"/a", []byte("data of a, again"), 0)
	must(t, err, "set a")

	res, err := conn.MultiRead(&zk.GetDataOp{Path: root + "/a"}, &zk.GetDataOp{Path: root + "/missing"},
		&zk.GetChildrenOp{Path: root + "/b"}, &zk.GetDataOp{Path: root + "/b"}, &zk.GetChildrenOp{Path: root + "/gone"})
	must(t, err, "MultiRead")
	if len(res) != 5 {
		t.Fatalf("MultiRead answered %d ops; want 5", len(res))
	}
	if r := res[0]; r.Error != nil || string(r.Data) != "data of a, again" || r.Stat == nil || r.Stat.Version != 1 {
		t.Errorf("getData a = %q, %+v, %v; want its data at version 1", r.Data, r.Stat, r.Error)
	}
	if r := res[1]; !errors.Is(r.Error, zk.ErrNoNode) || r.Data != nil {
		t.Errorf("getData of a missing node = %q, %v; want ErrNoNode", r.Data, r.Error)
	}
	if r := res[2]; r.Error != nil || fmt.Sprint(slices.Sorted(slices.Values(r.Children))) != "[x y]" {
		t.Errorf("getChildren b = %v, %v; want [x y]", r.Children, r.Error)
	}
	if r := res[3]; r.Error != nil || string(r.Data) != "data of b" || r.Stat.NumChildren != 2 {
		t.Errorf("getData b = %q, %+v, %v; want its data with 2 children", r.Data, r.Stat, r.Error)
	}
	if r := res[4]; !errors.Is(r.Error, zk.ErrNoNode) {
		t.Errorf("getChildren of a missing node: %v; want ErrNoNode", r.Error)
	}
}

// A reply over the client's buffer limit (ZooKeeper's jute.maxbuffer, 1 MB, is the usual one)
// fails that request alone: the connection stays, and the caller reads fewer nodes at a time.
func TestMultiReadReplyTooLarge(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	const juteMaxBuffer = 0xfffff
	var disconnects atomic.Int32
	conn, root := rawConn(t, env, juteMaxBuffer, func(ev zk.Event) {
		if ev.Type == zk.EventSession && ev.State == zk.StateDisconnected {
			disconnects.Add(1)
		}
	})
	big := bytes.Repeat([]byte("x"), 200_000)
	var ops []any
	for i := range 8 {
		p := fmt.Sprintf("%s/n%d", root, i)
		_, err := conn.Create(p, big, 0, zk.WorldACL(zk.PermAll))
		must(t, err, "create "+p)
		ops = append(ops, &zk.GetDataOp{Path: p})
	}
	if _, err := conn.MultiRead(ops...); !errors.Is(err, zk.ErrResponseTooLarge) {
		t.Fatalf("MultiRead of 1.6 MB: %v; want ErrResponseTooLarge", err)
	}
	for _, half := range [][]any{ops[:4], ops[4:]} {
		res, err := conn.MultiRead(half...)
		must(t, err, "MultiRead of half, on the same connection")
		for i, r := range res {
			if r.Error != nil || len(r.Data) != len(big) {
				t.Errorf("op %d: %d bytes, %v; want %d bytes", i, len(r.Data), r.Error, len(big))
			}
		}
	}
	if n := disconnects.Load(); n != 0 {
		t.Errorf("the connection broke %d times; want it kept", n)
	}
}

// seedVariety fills a namespace with one of everything the model holds, and a directory of
// nodes too large to read in one multiRead under jute.maxbuffer.
func seedVariety(t *testing.T, env statetest.Env) {
	t.Helper()
	ctx := ctxT(t)
	other := openPlain(t, env)
	must(t, other.CreateApp(ctx, testApp("app")), "CreateApp")
	must(t, other.CreateApp(ctx, testApp("off")), "CreateApp")
	for i := range 300 {
		must(t, other.CreateJob(ctx, testJob(fmt.Sprintf("job%03d", i), "app")), "CreateJob")
	}
	for i := range 30 {
		must(t, other.AddReady(ctx, fmt.Sprintf("job%03d", i), true), "AddReady")
	}
	for i := 30; i < 40; i++ {
		job := fmt.Sprintf("job%03d", i)
		ids := []taskid.ID{taskid.New(taskid.Meta{JobName: job, Item: 0}, taskid.Ready, "S0"), taskid.New(taskid.Meta{JobName: job, Item: 2}, taskid.Ready, "S1")}
		must(t, other.RecordLaunch(ctx, state.Launch{Tasks: ids}), "RecordLaunch")
	}
	_, err := other.AddFailover(ctx, taskid.New(taskid.Meta{JobName: "job050", Item: 1}, taskid.Failover, "S0"))
	must(t, err, "AddFailover")
	must(t, other.DisableJob(ctx, "job299"), "DisableJob")
	must(t, other.DisableApp(ctx, "off"), "DisableApp")
	j := testJob("job007", "app")
	j.ShardingTotalCount = 5
	_, err = other.UpdateJob(ctx, j)
	must(t, err, "UpdateJob") // a config at version 1

	conn, root := rawConn(t, env, 0, nil)
	big := root + "/state/big"
	_, err = conn.Create(big, nil, 0, zk.WorldACL(zk.PermAll))
	must(t, err, "create "+big)
	for i := range 8 {
		_, err := conn.Create(fmt.Sprintf("%s/n%d", big, i), bytes.Repeat([]byte{byte('a' + i)}, 200_000), 0, zk.WorldACL(zk.PermAll))
		must(t, err, "create a large node")
	}
}

// loadModel loads a leader's model through a fresh session, reading with or without multiRead,
// and returns it with the round trips of the load (the watches armed after it not counted).
// loaded, if set, runs between the load and the arming of the watches.
func loadModel(t *testing.T, env statetest.Env, multiRead bool, loaded func(), mutate ...func(*state.Config)) (*state.Store, uint64) {
	t.Helper()
	defer state.SetMultiReadLoad(multiRead)()
	s := openPlain(t, env, mutate...)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	before := s.RoundTrips()
	var trips uint64
	defer state.SetLoadedHook(func() {
		trips = s.RoundTrips() - before
		if loaded != nil {
			loaded()
		}
	})()
	m, err := s.Mirror(ctx, nil)
	must(t, err, "Mirror")
	select {
	case <-m.Watched():
	case <-time.After(30 * time.Second):
		t.Fatal("the config nodes' watches not armed within 30 s")
	}
	return m, trips
}

func TestLoadByMultiReadHoldsWhatOneReadANodeHolds(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	seedVariety(t, env)
	byGet, getTrips := loadModel(t, env, false, nil)
	byMulti, multiTrips := loadModel(t, env, true, nil)
	want, got := byGet.ModelDump(), byMulti.ModelDump()
	if got != want {
		t.Fatalf("model loaded by multiRead differs from the one read node by node:\n got: %s\nwant: %s", got, want)
	}
	for _, node := range []string{"/config/job/job299 v0", "/config/job/job007 v1", "/state/big/n7 v0", "/state/disable/app/off", "/state/failover/job050"} {
		if !strings.Contains(got, node) {
			t.Errorf("the model lacks %s", node)
		}
	}
	t.Logf("load: %d round trips node by node, %d by multiRead", getTrips, multiTrips)
	if multiTrips*5 > getTrips {
		t.Errorf("the multiRead load made %d round trips; want under a fifth of the %d node by node", multiTrips, getTrips)
	}
}

// A config node is read without its watch during the load and watched after it; a change
// made in between must still reach the model (it is read again), by either way of loading.
func TestLoadReadsAgainAConfigChangedBeforeItsWatch(t *testing.T) {
	for _, multiRead := range []bool{false, true} {
		t.Run(fmt.Sprintf("multiRead=%v", multiRead), func(t *testing.T) {
			env := statetest.StartZooKeeper(t)
			ctx := ctxT(t)
			other := seedJobs(t, env, 50)
			changed := testJob("job17", "app")
			changed.ShardingTotalCount = 9
			m, _ := loadModel(t, env, multiRead, func() {
				_, err := other.UpdateJob(ctx, changed)
				must(t, err, "UpdateJob between the load and the watch")
			})
			await.True(t, 2*time.Second, "the model has the config changed before its watch", func() bool {
				j, err := m.Job(ctx, "job17")
				return err == nil && j.ShardingTotalCount == 9
			})
			// And the watch is armed: a change after it is seen too.
			changed.ShardingTotalCount = 4
			_, err := other.UpdateJob(ctx, changed)
			must(t, err, "UpdateJob after the watch")
			await.True(t, 2*time.Second, "the model has the config changed after its watch", func() bool {
				j, err := m.Job(ctx, "job17")
				return err == nil && j.ShardingTotalCount == 4
			})
		})
	}
}

// A config deleted and created again between the load and its watch (an operator registering
// a job anew with zkCli) is back at version 0, the version the load read of a job never
// updated: the model must still read the new config, by either way of loading, rather than
// keep the old one until the next change or takeover.
func TestLoadReadsAgainAConfigDeletedAndCreatedAgainBeforeItsWatch(t *testing.T) {
	for _, multiRead := range []bool{false, true} {
		t.Run(fmt.Sprintf("multiRead=%v", multiRead), func(t *testing.T) {
			env := statetest.StartZooKeeper(t)
			ctx := ctxT(t)
			other := openPlain(t, env)
			must(t, other.CreateApp(ctx, testApp("app")), "CreateApp")
			must(t, other.CreateJob(ctx, testJob("job17", "app")), "CreateJob") // 3 shards, version 0
			conn, root := rawConn(t, env, 0, nil)
			p := root + "/config/job/job17"
			again := testJob("job17", "app")
			again.ShardingTotalCount = 9
			data, err := json.Marshal(again)
			must(t, err, "encode the job")
			m, _ := loadModel(t, env, multiRead, func() {
				must(t, conn.Delete(p, -1), "delete the job's node")
				_, err := conn.Create(p, data, 0, zk.WorldACL(zk.PermAll))
				must(t, err, "create the job's node again")
			})
			await.Explained(t, 5*time.Second, "the model has the config created again before its watch", func() bool {
				j, err := m.Job(ctx, "job17")
				return err == nil && j.ShardingTotalCount == 9
			}, func() string {
				j, err := m.Job(ctx, "job17")
				return fmt.Sprintf("the model's job17 has %d shards (%v)", j.ShardingTotalCount, err)
			})
		})
	}
}

// A server before 3.6 answers multiRead with UNIMPLEMENTED and closes the connection: the load
// finds out by one probe on each of its sessions and reads node by node, as before.
func TestLoadFallsBackToOneReadANodeOnAServerWithoutMultiRead(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	seedVariety(t, env)
	want, _ := loadModel(t, env, false, nil)
	old := startOldZooKeeper(t, env.Servers[0])
	got, _ := loadModel(t, env, true, nil, func(c *state.Config) { c.Servers = []string{old.addr} })
	if got.ModelDump() != want.ModelDump() {
		t.Fatalf("model loaded from a server without multiRead differs:\n got: %s\nwant: %s", got.ModelDump(), want.ModelDump())
	}
	if n := old.refused.Load(); n != state.LoadSessions {
		t.Errorf("the load sent %d multiReads to a server without it; want %d (one probe a session)", n, state.LoadSessions)
	}
}

// oldZooKeeper is a proxy to a ZooKeeper server that plays one before 3.6: it answers a
// multiRead (opcode 22) as UnimplementedRequestProcessor does, an UNIMPLEMENTED reply and the
// connection closed, and passes everything else through.
type oldZooKeeper struct {
	addr    string
	refused atomic.Int32
	mu      sync.Mutex
	conns   []net.Conn
}

func startOldZooKeeper(t *testing.T, target string) *oldZooKeeper {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err, "listen")
	o := &oldZooKeeper{addr: ln.Addr().String()}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go o.serve(c, target)
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		o.mu.Lock()
		defer o.mu.Unlock()
		for _, c := range o.conns {
			c.Close() // ends serve and its piping
		}
	})
	return o
}

func (o *oldZooKeeper) serve(client net.Conn, target string) {
	server, err := net.Dial("tcp", target)
	o.mu.Lock()
	o.conns = append(o.conns, client)
	if err == nil {
		o.conns = append(o.conns, server)
	}
	o.mu.Unlock()
	if err != nil {
		client.Close()
		return
	}
	defer client.Close()
	defer server.Close()
	var toClient sync.Mutex // one whole frame at a time
	go func() {
		defer client.Close()
		for {
			f, err := readFrame(server)
			if err != nil {
				return
			}
			toClient.Lock()
			_, err = client.Write(f)
			toClient.Unlock()
			if err != nil {
				return
			}
		}
	}()
	for first := true; ; first = false {
		f, err := readFrame(client)
		if err != nil {
			return
		}
		// After the connect request, a frame is length, xid, opcode, body.
		if !first && len(f) >= 12 && int32(binary.BigEndian.Uint32(f[8:12])) == 22 {
			o.refused.Add(1)
			reply := make([]byte, 20)
			binary.BigEndian.PutUint32(reply[0:4], 16)
			copy(reply[4:8], f[4:8])                                     // xid; zxid 0
			binary.BigEndian.PutUint32(reply[16:20], uint32(0xfffffffa)) // -6, UNIMPLEMENTED
			toClient.Lock()
			client.Write(reply)
			toClient.Unlock()
			return
		}
		if _, err := server.Write(f); err != nil {
			return
		}
	}
}

func readFrame(c net.Conn) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		return nil, err
	}
	f := make([]byte, 4+binary.BigEndian.Uint32(n[:]))
	copy(f, n[:])
	_, err := io.ReadFull(c, f[4:])
	return f, err
}

// A directory whose listing outgrows jute.maxbuffer cannot be split: both ways of loading list
// it over the store's own session, whose replies are not limited.
func TestLoadListsADirectoryLargerThanOneReply(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	conn, root := rawConn(t, env, 0, nil)
	for _, p := range []string{root + "/state", root + "/state/wide"} {
		_, err := conn.Create(p, nil, 0, zk.WorldACL(zk.PermAll))
		must(t, err, "create "+p)
	}
	const n = 5_500 // names of 200 bytes: a listing of 1.1 MB
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 16 {
				name := fmt.Sprintf("%s/%05d%s", root+"/state/wide", i, strings.Repeat("x", 195))
				if _, err := conn.Create(name, nil, 0, zk.WorldACL(zk.PermAll)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	must(t, <-errs, "create the children")
	for _, multiRead := range []bool{false, true} {
		m, _ := loadModel(t, env, multiRead, nil)
		if got := strings.Count(m.ModelDump(), root+"/state/wide/"); got != n {
			t.Errorf("multiRead=%v: the model holds %d of the %d children", multiRead, got, n)
		}
	}
}

// The config nodes' watches are armed after the load; a connection lost meanwhile must not
// leave them unarmed for the term: a change another makes to a config would then never reach
// the model. They are armed once the connection is back.
func TestConfigWatchesAreArmedOnceTheConnectionIsBack(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	ctx := ctxT(t)
	other := seedJobs(t, env, 20)
	proxy := statetest.NewProxy(t, env.Servers[0])
	s := openPlain(t, statetest.Env{Servers: []string{proxy.Addr}, Namespace: env.Namespace}, func(c *state.Config) { c.SessionTimeout = 10 * time.Second })
	var cutAt atomic.Uint64
	defer state.SetLoadedHook(func() {
		proxy.Cut()
		cutAt.Store(s.RoundTrips())
	})()
	mctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	m, err := s.Mirror(mctx, nil)
	must(t, err, "Mirror")
	// The arming has tried, and failed, on the cut connection: let the connection back.
	await.True(t, 10*time.Second, "an attempt to arm the watches", func() bool { return s.RoundTrips() > cutAt.Load() })
	proxy.Restore()
	changed := testJob("job07", "app")
	changed.ShardingTotalCount = 7
	_, err = other.UpdateJob(ctx, changed)
	must(t, err, "UpdateJob once the connection is back")
	await.True(t, 10*time.Second, "the model has the config changed once the connection is back", func() bool {
		j, err := m.Job(ctx, "job07")
		return err == nil && j.ShardingTotalCount == 7
	})
}

// seedJobs registers app "app" and n jobs job00… through a store of their own, as another
// instance or an operator's tool would, and returns that store.
func seedJobs(t *testing.T, env statetest.Env, n int) *state.Store {
	t.Helper()
	ctx := ctxT(t)
	other := openPlain(t, env)
	must(t, other.CreateApp(ctx, testApp("app")), "CreateApp")
	for i := range n {
		must(t, other.CreateJob(ctx, testJob(fmt.Sprintf("job%02d", i), "app")), "CreateJob")
	}
	return other
}
