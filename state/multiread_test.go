package state_test

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state/statetest"
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
