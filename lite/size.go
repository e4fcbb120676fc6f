package lite

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/ejcloud/ejcloud/state"
)

// maxInstanceIDLen bounds an instance id (New). The sharding, a claim and a completion write
// the ids of the instances, and what one transaction can hold bounds the shard count
// (shardsFit), so the ids of the instances to come must be bounded too. The default id,
// "{ip}@-@{pid}", is at most 55 characters, with an IPv6 address.
const maxInstanceIDLen = 64

// shardsFit refuses a shard count whose transactions would not fit in one ZooKeeper request
// (jute.maxbuffer): the sharding writes every item's assignment in one, deleting the items
// beyond a smaller count in it too; a claim may take every item of the job (one instance owns
// them all), and its completion writes them all. Accepted, such a count would fail every
// resharding, "write too large", and no item would run again. The size depends on the names
// (namespace, job, instance ids), so it is measured on the transactions themselves, built as
// the instance builds them, with the longest instance id and fire there can be.
func shardsFit(cfg state.Config, jobName string, n int) error {
	t, err := state.Offline(cfg)
	if err != nil {
		return fmt.Errorf("lite: %w", err)
	}
	err = writesFit(t, jobName, n)
	if err == nil {
		return nil
	}
	most := sort.Search(n, func(m int) bool { return m > 0 && writesFit(t, jobName, m) != nil }) - 1
	return fmt.Errorf("lite: shardingTotalCount %d is more items than one ZooKeeper transaction can write (the sharding writes every item in one, a claim or a completion may take every item, and jute.maxbuffer bounds a transaction): at most %d for job %q in namespace %q: %w",
		n, most, jobName, cfg.Namespace, err)
}

// writesFit builds the largest transactions of a job of n items and says whether each fits.
func writesFit(t *state.Tree, jobName string, n int) error {
	in := &Instance{base: jobName}
	id := strings.Repeat("x", maxInstanceIDLen)
	const fire = math.MaxInt64
	owed, _ := json.Marshal(record{Fire: fire, Done: true})
	all := make([]int, n)
	every := make(map[int]bool, n)
	items := make([]item, n)
	for i := range n {
		all[i], every[i], items[i] = i, true, item{i: i}
	}
	// Every child an item may have when a smaller count deletes it: its running marker cannot
	// be there (the resharding waits for it, and processing stops new claims).
	children := []string{"instance", "failover", "disabled"}
	drop := make(map[int][]string, n)
	for i := 1; i < n; i++ {
		drop[i] = children
	}
	for _, ops := range [][]state.Op{
		// The first sharding: every item is new.
		in.shardingOps(t, shardingWrite{avail: []string{id}, result: [][]int{all}, owed: owed}),
		// A resharding: every item moves.
		in.shardingOps(t, shardingWrite{avail: []string{id}, result: [][]int{all}, have: every, owned: every}),
		// A count cut to one: every other item goes, with its children.
		in.shardingOps(t, shardingWrite{avail: []string{id}, result: [][]int{{0}}, have: every, owned: every, drop: drop}),
		in.claimOps(t, fire, 0, items),
		in.completeOps(t, fire, items),
	} {
		if err := t.Fits(ops...); err != nil {
			return err
		}
	}
	return nil
}

// shardsFit is shardsFit for this instance's job.
func (in *Instance) shardsFit(n int) error { return shardsFit(in.stateConfig(), in.base, n) }

// decode reads a config from ZooKeeper: valid, and with transactions that fit.
func (in *Instance) decode(data []byte) (*parsed, error) {
	p, err := decodeConfig(data)
	if err != nil {
		return nil, err
	}
	if err := in.shardsFit(p.ShardingTotalCount); err != nil {
		return nil, err
	}
	return p, nil
}
