package statetest

import (
	"path"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// Dump returns every node under the namespace with its data, for tests that check a request
// changed nothing: compare a dump before with one after.
func Dump(t testing.TB, env Env) map[string]string {
	t.Helper()
	conn, _, err := zk.Connect(env.Servers, 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatalf("dump: connect: %v", err)
	}
	defer conn.Close()
	out := map[string]string{}
	var walk func(p string)
	walk = func(p string) {
		data, _, err := conn.Get(p)
		if err == zk.ErrNoNode {
			return // removed while we walked; the caller compares dumps, so it will show
		}
		if err != nil {
			t.Fatalf("dump: get %s: %v", p, err)
		}
		out[p] = string(data)
		children, _, err := conn.Children(p)
		if err != nil && err != zk.ErrNoNode {
			t.Fatalf("dump: children of %s: %v", p, err)
		}
		for _, c := range children {
			walk(path.Join(p, c))
		}
	}
	walk("/" + env.Namespace)
	return out
}
