package scheduler

import (
	"context"
	"flag"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/integration/mesoslocal"
	"github.com/ejcloud/ejcloud/integration/mesostest"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// A master that ZooKeeper shows as leading may not have seen its own election yet, and then it
// redirects frameworks to the master it knew: here a hung one, which takes connections and
// never answers (a SIGSTOPped master). The scheduler must not follow it there — mesos-go would
// wait on it for up to a minute — but ask the leader again until it serves. (The integration
// test of a hung master, TestTheSchedulerLeavesAMasterThatNoLongerLeads, missed its 5 s this
// way on a loaded machine.)
func TestASubscriptionAtTheDetectedLeaderDoesNotFollowItsRedirects(t *testing.T) {
	t.Parallel()
	hung := statetest.HungServer(t) // the old master, SIGSTOPped

	var asked atomic.Int32 // scheduler calls the new master has answered
	master := mesostest.NewCluster(t, func(o *mesoslocal.Options) {
		o.Leader = func() (bool, string) {
			if asked.Add(1) <= 2 {
				return false, hung
			}
			return true, ""
		}
	})

	env := statetest.StartZooKeeper(t)
	zkURL := "zk://" + env.Servers[0] + "/" + env.Namespace + "-mesos"
	u, err := state.ParseMesosZK(zkURL)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	info, err := master.MasterInfo()
	if err != nil {
		t.Fatal(err)
	}
	cand, err := state.ContendMesosMaster(ctx, u, info, 10*time.Second, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer cand.Close()
	detector, err := state.DetectMesosMaster(ctx, u, 10*time.Second, quietLog())
	if err != nil {
		t.Fatal(err)
	}
	defer detector.Close()

	cfg := testConfig(t, env)
	cfg.MesosURL = zkURL
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	m := httpMesos{cfg: &cfg, masters: detector, log: quietLog()}
	sub, err := m.subscribe(ctx, "", "http://127.0.0.1:1")
	if err != nil {
		t.Fatalf("subscribe at the detected leader: %v (it was asked %d times)", err, asked.Load())
	}
	defer sub.resp.Close()
	if sub.frameworkID == "" || asked.Load() < 3 {
		t.Fatalf("subscribed as %q after %d calls; want a FrameworkID after two redirects", sub.frameworkID, asked.Load())
	}
}

// When no master of a --mesos-url list answers, the error names each, on one line: it ends
// the scheduler as its fatal start-up message (SPEC §2).
func TestNoMasterOfAListAnswersOnOneLine(t *testing.T) {
	t.Parallel()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	cfg := Flags(fs)
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	a, b := freeAddr(t), freeAddr(t) // nothing listens there
	cfg.MesosURL = "http://" + a + ",http://" + b
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	_, err := cfg.subscribe(ctx, "", "")
	if err == nil || strings.Contains(err.Error(), "\n") || !strings.Contains(err.Error(), a) || !strings.Contains(err.Error(), b) {
		t.Fatalf("subscribe to two dead masters: %q; want one line naming both", err)
	}
}
