package lite_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/internal/await"
	"github.com/ejcloud/ejcloud/lite"
	"github.com/ejcloud/ejcloud/state"
	"github.com/ejcloud/ejcloud/state/statetest"
)

// readConfig reads the job's config in ZooKeeper.
func readConfig(t *testing.T, tr *state.Tree, name string) lite.JobConfig {
	t.Helper()
	d, ok := data(t, tr, name+"/config")
	if !ok {
		t.Fatalf("%s/config is missing", name)
	}
	var c lite.JobConfig
	if err := json.Unmarshal([]byte(d), &c); err != nil {
		t.Fatalf("%s/config: %v", name, err)
	}
	return c
}

func writeConfig(t *testing.T, tr *state.Tree, name string, data []byte) {
	t.Helper()
	set(t, tr, tr.Set(name+"/config", data, -1))
}

// expireAndReturn cuts the instance behind p off until the server has expired its session,
// then lets it back, and waits for it to register again.
func expireAndReturn(t *testing.T, tr *state.Tree, p *statetest.Proxy, name, id string) {
	t.Helper()
	p.Cut()
	await.True(t, 3*sessionTimeout, "the session expires", func() bool { return !exists(t, tr, name+"/instances/"+id) })
	p.Restore()
	await.True(t, 3*sessionTimeout, "the instance registers again", func() bool { return exists(t, tr, name+"/instances/"+id) })
}

// Options.Overwrite puts the instance's config in ZooKeeper when it starts, and only then: a
// change an operator makes afterwards stays when the instance registers again after a lost
// session, as it does at every network blip that outlasts a session.
func TestOverwriteReplacesTheConfigOnlyAtStart(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	tr := inspect(t, env)
	p := statetest.NewProxy(t, env.Servers[0])
	const name = "overwrite"
	const a = "127.0.0.1@-@a"
	cfg := simpleJob(name, "* * * * * ?", 2)
	old := cfg
	old.Description = "before the instance started"
	data, _ := json.Marshal(old)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tr.Ensure(ctx, name); err != nil {
		t.Fatal(err)
	}
	set(t, tr, tr.Create(name+"/config", data, false))
	rec := &recorder{work: 50 * time.Millisecond}
	runInstance(t, newInstance(t, []string{p.Addr}, env.Namespace, a, cfg, rec, func(o *lite.Options) { o.Overwrite = true }))
	await.True(t, 10*time.Second, "the instance's config replaces the one in ZooKeeper", func() bool {
		return readConfig(t, tr, name).Description == ""
	})
	changed := cfg
	changed.Description = "changed by an operator"
	data, _ = json.Marshal(changed)
	writeConfig(t, tr, name, data)
	expireAndReturn(t, tr, p, name, a)
	if got := readConfig(t, tr, name).Description; got != changed.Description {
		t.Errorf("after the instance registered again, the config's description is %q; want the operator's %q", got, changed.Description)
	}
}

// An invalid config written into ZooKeeper is ignored by the running instances (they keep the
// one they have), also when they register again after a lost session: an operator's typo and a
// network blip must not stop every instance.
func TestAnInvalidConfigInZooKeeperDoesNotStopAnInstanceThatRegistersAgain(t *testing.T) {
	env := statetest.StartZooKeeper(t)
	tr := inspect(t, env)
	p := statetest.NewProxy(t, env.Servers[0])
	const name = "typo"
	const a = "127.0.0.1@-@a"
	cfg := simpleJob(name, "* * * * * ?", 2)
	rec := &recorder{work: 50 * time.Millisecond}
	var log logSeen
	runInstance(t, newInstance(t, []string{p.Addr}, env.Namespace, a, cfg, rec, func(o *lite.Options) { o.Logger = log.logger() }))
	awaitRuns(t, rec, 10*time.Second, "both items run", aFireAfter(0, 2))
	bad := cfg
	bad.Cron = "every second" // a typo: no cron expression
	data, _ := json.Marshal(bad)
	writeConfig(t, tr, name, data)
	await.True(t, 5*time.Second, "the running instance keeps its config", func() bool { return log.count("keeping the previous one") > 0 })
	expireAndReturn(t, tr, p, name, a)
	back := time.Now().UnixMilli()
	awaitRuns(t, rec, 10*time.Second, "both items run on the config the instance kept", aFireAfter(back, 2))
}
