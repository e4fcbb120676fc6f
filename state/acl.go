package state

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/go-zookeeper/zk"
)

// secureWorkers bounds the requests secureNamespace has in flight: one session pipelines them.
const secureWorkers = 16

// secureNamespace gives every node of the namespace the creator-only ACL of the store's digest
// (Config.Digest) when the namespace's root does not have it yet. Nodes are created with that
// ACL once a digest is set, but those created before it was (a namespace that ran without
// --zk-digest, or that 2.1.5 wrote) stayed open to every client: world:anyone could read the
// configs and rewrite the queues. The root goes last, so a walk cut short is walked again at
// the next start.
func (s *Store) secureNamespace(ctx context.Context) error {
	acl, _, err := s.conn.GetACL(s.root)
	if err != nil {
		return fmt.Errorf("read the ACL of %s: %w", s.root, translate(err))
	}
	if creatorOnly(acl) {
		return nil
	}
	var paths []string
	for dirs := []string{s.root}; len(dirs) > 0; {
		d := dirs[len(dirs)-1]
		dirs = dirs[:len(dirs)-1]
		kids, _, err := s.conn.Children(d)
		if errors.Is(err, zk.ErrNoNode) {
			continue // deleted meanwhile
		}
		if err != nil {
			return fmt.Errorf("list %s: %w", d, translate(err))
		}
		for _, k := range kids {
			p := d + "/" + k
			paths = append(paths, p)
			dirs = append(dirs, p)
		}
	}
	s.log.WithField("nodes", len(paths)+1).Warn("ZooKeeper digest authentication is on and the namespace's nodes are open to every client: giving them the creator-only ACL")
	work := make(chan string)
	errs := make(chan error, secureWorkers)
	var wg sync.WaitGroup
	for range secureWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				if _, err := s.conn.SetACL(p, s.acl, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
					errs <- fmt.Errorf("set the ACL of %s: %w", p, translate(err))
					return
				}
			}
		}()
	}
	var failed error
feed:
	for _, p := range paths {
		select {
		case work <- p:
		case failed = <-errs:
			break feed
		case <-ctx.Done():
			failed = ctx.Err()
			break feed
		}
	}
	close(work)
	wg.Wait()
	if failed == nil {
		select {
		case failed = <-errs:
		default:
		}
	}
	if failed != nil {
		return failed
	}
	if _, err := s.conn.SetACL(s.root, s.acl, -1); err != nil {
		return fmt.Errorf("set the ACL of %s: %w", s.root, translate(err))
	}
	return nil
}

// creatorOnly says whether acl lets only authenticated digest users in, none of them world.
func creatorOnly(acl []zk.ACL) bool {
	for _, a := range acl {
		if a.Scheme != "digest" {
			return false
		}
	}
	return len(acl) > 0
}
