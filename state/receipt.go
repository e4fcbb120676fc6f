package state

// A leader's write receipt tells whether a multi whose answer was lost was applied.
//
// When the connection breaks while a multi is in flight, ZooKeeper may or may not have applied
// it, and for a write like "ready count + 1" doing it again or not at all are both wrong. So a
// leader's model puts one more op in each multi it sends: it sets its receipt node (ephemeral,
// one per leadership term, nobody else writes or watches it) to the multi's sequence number. The
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
	"errors"
	"fmt"
	"strconv"

	"github.com/go-zookeeper/zk"
)

// receipt is the leader's receipt node; seq is guarded by the mirror's writeMu, which makes the
// multis of one model go one at a time.
type receipt struct {
	path string
	seq  uint64
}

// newReceipt creates the receipt node of the fenced store s's leadership term.
func (s *Store) newReceipt(ctx context.Context) (*receipt, error) {
	r := &receipt{path: s.path("ha", "receipt-"+base(s.fence.Path))}
	err := s.untilSessionFails(ctx, func() error {
		start := s.begin()
		_, err := s.conn.Create(r.path, []byte("0"), zk.FlagEphemeral, s.acl)
		s.end("create", start)
		if errors.Is(err, zk.ErrNodeExists) {
			// Ours from an attempt whose answer was lost: an election node's name is never
			// reused, and the node is ephemeral.
			return nil
		}
		return translate(err)
	})
	if err != nil {
		return nil, fmt.Errorf("create the write receipt %s: %w", r.path, err)
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
		return false, fmt.Errorf("%w: the write receipt %s is gone with its session", ErrUnavailable, r.path)
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
