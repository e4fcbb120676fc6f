package state_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/state/statetest"
)

func masterJSON(id string, port int) []byte {
	return []byte(fmt.Sprintf(`{"address":{"hostname":"127.0.0.1","ip":"127.0.0.1","port":%d},"hostname":"127.0.0.1","id":%q,"ip":16777343,"pid":"master@127.0.0.1:%d","port":%d,"version":"1.11.0"}`, port, id, port, port))
}

// TestMasterDetectionFollowsTheLowestSequence: the leader is the json.info_ node with the
// lowest sequence; when it goes, the next one leads, and detectors see it through their watches.
func TestMasterDetectionFollowsTheLowestSequence(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	ctx := ctxT(t)
	log := newLogger()
	// The masters publish with credentials, as Mesos with zk://user:pass@ does; a detector
	// without them can still read (the nodes are world-readable).
	masters := state.MesosZK{Servers: env.Servers, Auth: "mesos:secret", Path: "/" + env.Namespace + "/mesos"}
	readers := state.MesosZK{Servers: env.Servers, Path: masters.Path}

	d, err := state.DetectMesosMaster(ctx, readers, 5*time.Second, log)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if m, ok, _ := d.Leader(); ok {
		t.Fatalf("a leader before any master published: %+v", m)
	}
	leaderIs := func(id string) func() bool {
		return func() bool {
			m, ok, _ := d.Leader()
			return ok == (id != "") && m.ID == id
		}
	}

	_, _, changed := d.Leader()
	a, err := state.ContendMesosMaster(ctx, masters, masterJSON("A", 5051), 5*time.Second, log)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	await.True(t, 10*time.Second, "A detected as leader", leaderIs("A"))
	select {
	case <-changed:
	default:
		t.Fatal("the change of leader was not signalled")
	}
	if m, _, _ := d.Leader(); m.Address != "127.0.0.1:5051" {
		t.Fatalf("leader address %q, want 127.0.0.1:5051", m.Address)
	}

	b, err := state.ContendMesosMaster(ctx, masters, masterJSON("B", 5052), 5*time.Second, log)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	await.True(t, 10*time.Second, "A leads in its own eyes", func() bool { l, _, _ := a.Leading(); return l })
	await.True(t, 10*time.Second, "B sees A lead", func() bool { _, m, _ := b.Leading(); return m.ID == "A" })
	if l, _, _ := b.Leading(); l {
		t.Fatal("B, the later candidate, leads while A is there")
	}

	a.Close() // its ephemeral node goes with its session
	await.True(t, 10*time.Second, "B detected as leader after A left", leaderIs("B"))
	await.True(t, 10*time.Second, "B leads in its own eyes", func() bool { l, _, _ := b.Leading(); return l })

	b.Close()
	await.True(t, 10*time.Second, "no leader after both left", leaderIs(""))
}

// TestContendRefusesAnUnreadableMasterInfo: a node the detectors could not follow is never
// published.
func TestContendRefusesAnUnreadableMasterInfo(t *testing.T) {
	t.Parallel()
	env := statetest.StartZooKeeper(t)
	u := state.MesosZK{Servers: env.Servers, Path: "/" + env.Namespace + "/mesos"}
	if c, err := state.ContendMesosMaster(ctxT(t), u, []byte(`{"id":"x"}`), 5*time.Second, newLogger()); err == nil {
		c.Close()
		t.Fatal("published a MasterInfo without host and port")
	}
}
