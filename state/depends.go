package state

import (
	"context"
	"sync/atomic"

	"github.com/ejcloud/ejcloud/config"
)

// dependsGuardKey is a node that every write changing the jobs' dependencies, or relying on
// them, sets in its multi at the version it read before it read the jobs. The rules of
// dependsOn (config.CheckDependsOn, config.CheckNoDependents) hold for the jobs as a whole:
// two updates that each close half a cycle, or a deletion beside a new dependency on the
// deleted job, each pass on its own reads. With the guard only the first of two such writes
// is written; the second fails, reads the jobs again and is refused.
//
// A write is one of them when its job depends on others (it relies on them staying waitable
// and on there being no cycle), when its job is not one others may wait for (it relies on
// nobody depending on it), or when it deletes jobs. Others — a job without dependencies that
// others may wait for, as most jobs are — neither rely on the rules nor can break them, and
// do not contend for the guard.
const dependsGuardKey = "state/dependsOn"

// dependsOps reads the guard, then every job, and checks them: the op it returns holds the
// guard at the version read, so the write it goes in fails if another such write came first.
func (s *Store) dependsOps(ctx context.Context, check func(jobs []config.Job) error) ([]any, error) {
	p := s.path(dependsGuardKey)
	n, err := s.get(ctx, p)
	if err != nil {
		return nil, err
	}
	jobs, err := s.Jobs(ctx)
	if err != nil {
		return nil, err
	}
	if err := check(jobs); err != nil {
		return nil, err
	}
	if h := dependsCheckedHook.Load(); h != nil {
		(*h)()
	}
	if !n.exists { // ensureLayout creates it; a namespace another version laid out may lack it
		return []any{s.createOp(p, nil)}, nil
	}
	return []any{setOp(p, n.data, n.version)}, nil
}

// dependsCheckedHook, when set (by a test), runs after a write's check of the jobs passed and
// before its multi: the window in which another write must not slip through.
var dependsCheckedHook atomic.Pointer[func()]

// jobDependsOps is dependsOps for a write of j, or nothing when the write is not one that
// must hold the guard.
func (s *Store) jobDependsOps(ctx context.Context, j config.Job) ([]any, error) {
	if len(j.DependsOn) == 0 && j.Waitable() {
		return nil, nil
	}
	return s.dependsOps(ctx, func(jobs []config.Job) error { return config.CheckDependsOn(j, jobs) })
}

// deleteDependsOps is dependsOps for the deletion of the jobs gone says go.
func (s *Store) deleteDependsOps(ctx context.Context, gone func(job string) bool) ([]any, error) {
	return s.dependsOps(ctx, func(jobs []config.Job) error { return config.CheckNoDependents(jobs, gone) })
}
