package state

// A leader's write receipt tells whether a multi whose answer was lost was applied.
//
// When the connection breaks while a multi is in flight, ZooKeeper may or may not have applied
// it, and for a write like "ready count + 1" doing it again or not at all are both wrong. So a
// leader's model puts one more op in each multi it sends: it sets its receipt node (ephemeral,
// one per model, nobody else writes or watches it) to the multi's sequence number. The
// multi is atomic, so the receipt holds that number if and only if the multi was applied. After
// the client has reconnected, a sync and a read of the receipt say which it was: applied, the
// model applies it too; not applied, the model sends it again. Either way the caller sees one
// outcome, and a write fails only when the session does.
//
// The sync is what makes the read-back safe: a request the old connection had already passed to
// the quorum leader is committed before the leader answers the sync, and one that reaches the
// leader after the session moved to the new connection is refused (SessionMoved). The receipt
// is ephemeral, so a session that ended takes it along: then the outcome cannot be known, and
// the leadership is over anyway.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-zookeeper/zk"
)

// receipt is the leader's receipt node; seq is guarded by the mirror's writeMu, which makes the
// multis of one model go one at a time.
type receipt struct {
	path string
	seq  uint64
}

// newReceipt creates the receipt node of a model of the fenced store s, and deletes the receipts
// that earlier models of the same election node left.
//
// The node is the model's own, named by a random suffix, and not the election node's: one
// election node can lead two terms in one process (ZooKeeper down for longer than the session
// timeout ends a term, the session may survive it, and the instance is elected again with the
// node it still holds). A receipt shared by the terms would hold a number of the old term when
// the new one starts counting again, so that a lost multi of the new term could be taken for
// applied; and starting the count above what the node holds would not do either, since the old
// term's goroutines (its API handlers, its status updates) may still be writing: the fence
// still passes, and they would stamp the same numbers from their own count, or delete the node
// at the end of their term. With a node of its own, a model's number is only ever its own.
//
// Deleting the earlier receipts is what ends those goroutines' writes: each of their multis
// stamps a receipt that is gone and is refused (ErrNotLeader), rather than change what the new
// model has loaded behind its back. It also keeps a long-lived session from gathering one node
// a term when a term's own delete failed (it runs when ZooKeeper is down, in that case).
func (s *Store) newReceipt(ctx context.Context) (*receipt, error) {
	var suffix [8]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return nil, fmt.Errorf("name the write receipt: %w", err)
	}
	prefix := "receipt-" + base(s.fence.Path) + "-"
	r := &receipt{path: s.path("ha", prefix+hex.EncodeToString(suffix[:]))}
	err := s.untilSessionFails(ctx, func() error {
		start := s.begin()
		_, err := s.conn.Create(r.path, []byte("0"), zk.FlagEphemeral, s.acl)
		s.end("create", start)
		if errors.Is(err, zk.ErrNodeExists) {
			// Ours from an attempt whose answer was lost: nobody else picks the random name.
			return nil
		}
		return translate(err)
	})
	if err != nil {
		return nil, fmt.Errorf("create the write receipt %s: %w", r.path, err)
	}
	names, err := s.children(ctx, s.path("ha"))
	if err != nil {
		return nil, fmt.Errorf("look for earlier write receipts of %s: %w", s.fence.Path, err)
	}
	for _, name := range names {
		p := s.path("ha", name)
		if !strings.HasPrefix(name, prefix) || p == r.path {
			continue
		}
		err := s.untilSessionFails(ctx, func() error {
			start := s.begin()
			err := s.conn.Delete(p, -1)
			s.end("delete", start)
			if errors.Is(err, zk.ErrNoNode) {
				return nil
			}
			return translate(err)
		})
		if err != nil {
			return nil, fmt.Errorf("delete the write receipt %s of an earlier model: %w", p, err)
		}
	}
	return r, nil
}

// next returns the op that stamps a multi with the next sequence number, and that number.
func (r *receipt) next() (*zk.SetDataRequest, uint64) {
	r.seq++
	return setOp(r.path, []byte(strconv.FormatUint(r.seq, 10)), -1), r.seq
}

// applied waits for the session to be connected again and reports whether the multi stamped
// seq was applied. It fails when the session does.
func (s *Store) applied(ctx context.Context, r *receipt, seq uint64) (bool, error) {
	var data []byte
	err := s.untilSessionFails(ctx, func() error {
		start := s.begin()
		_, err := s.conn.Sync(r.path)
		s.end("sync", start)
		if err != nil {
			return translate(err)
		}
		start = s.begin()
		data, _, err = s.conn.Get(r.path)
		s.end("get", start)
		return translate(err)
	})
	if errors.Is(err, ErrNotFound) {
		// Gone with its session, or deleted by a later model of the election node: either way
		// this model's term is over.
		return false, fmt.Errorf("%w: the write receipt %s is gone", ErrUnavailable, r.path)
	}
	if err != nil {
		return false, fmt.Errorf("read the write receipt %s: %w", r.path, err)
	}
	got, err := strconv.ParseUint(string(data), 10, 64)
	if err != nil {
		return false, fmt.Errorf("write receipt %s holds %q: %w", r.path, data, err)
	}
	return got == seq, nil
}

// dropReceipt deletes the receipt at the end of the term (best effort: it is ephemeral anyway).
func (s *Store) dropReceipt(r *receipt) {
	start := s.begin()
	s.conn.Delete(r.path, -1)
	s.end("delete", start)
}
