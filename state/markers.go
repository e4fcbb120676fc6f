package state

import (
	"context"
	"errors"
	"fmt"

	"github.com/ejcloud/ejcloud/config"
)

// DisableJob marks a job disabled and drops its pending runs, in one multi; the job must exist.
// Killing its running tasks is the caller's part (SPEC §5.9). Disabling twice is not an error.
func (s *Store) DisableJob(ctx context.Context, job string) error {
	err := retry(ctx, func() error {
		ops := []any{checkOp(s.path(jobsDir, job), -1)}
		more, err := s.disableOps(ctx, disableJobDir, job, []string{job})
		if err != nil || more == nil {
			return err
		}
		return conflictIfExists(s.multi(ctx, append(ops, more...)...))
	})
	if err != nil {
		return fmt.Errorf("disable job %q: %w", job, err)
	}
	return nil
}

// DisableApp marks an app disabled and drops the pending runs of its jobs, in one multi.
func (s *Store) DisableApp(ctx context.Context, app string) error {
	err := retry(ctx, func() error {
		names, err := s.jobsOfApp(ctx, app)
		if err != nil {
			return err
		}
		ops := []any{checkOp(s.path(appsDir, app), -1)}
		more, err := s.disableOps(ctx, disableAppDir, app, names)
		if err != nil || more == nil {
			return err
		}
		return conflictIfExists(s.multi(ctx, append(ops, more...)...))
	})
	if err != nil {
		return fmt.Errorf("disable app %q: %w", app, err)
	}
	return nil
}

// disableOps returns the ops creating a marker and deleting the ready entries of jobs; nil
// ops mean the marker exists already.
func (s *Store) disableOps(ctx context.Context, dir, name string, jobs []string) ([]any, error) {
	marker := s.path(dir, name)
	st, err := s.stat(ctx, marker)
	if err != nil || st != nil {
		return nil, err
	}
	admit, err := s.admit(ctx, dir)
	if err != nil {
		return nil, err
	}
	ops := []any{admit, s.createOp(marker, []byte(name))}
	for _, job := range jobs {
		r, err := s.stat(ctx, s.path(readyDir, job))
		if err != nil {
			return nil, err
		}
		if r != nil {
			ops = append(ops, deleteOp(s.path(readyDir, job), r.Version))
		}
	}
	return ops, nil
}

// EnableJob removes a job's disable marker and its stop mark (stopped.go) in one multi, and
// says whether there was a stop mark: enabling is how an operator tells a stopped job to try
// again, and an enable written is never one left stopped. The job must exist.
func (s *Store) EnableJob(ctx context.Context, job string) (clearedStop bool, err error) {
	err = retry(ctx, func() error {
		ops := []any{checkOp(s.path(jobsDir, job), -1)}
		more, stops, err := s.enableOps(ctx, disableJobDir, job, []string{job})
		if err != nil {
			return err
		}
		if err := s.multi(ctx, append(ops, more...)...); err != nil {
			return notFoundAs(err, s.path(jobsDir, job), "job", job)
		}
		clearedStop = len(stops) > 0
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("enable job %q: %w", job, err)
	}
	return clearedStop, nil
}

// EnableApp removes an app's disable marker and the stop marks of its jobs in one multi, and
// returns the jobs whose stop it cleared. The app must exist.
func (s *Store) EnableApp(ctx context.Context, app string) (clearedStops []string, err error) {
	err = retry(ctx, func() error {
		names, err := s.jobsOfApp(ctx, app)
		if err != nil {
			return err
		}
		// The app's node set again as it is: a job created for the app meanwhile (its create
		// sets the app too, appOp) fails the multi, which reads the jobs again.
		n, err := s.get(ctx, s.path(appsDir, app))
		if err != nil {
			return err
		}
		if !n.exists {
			return &SubjectError{Kind: "app", Name: app, Err: ErrNotFound}
		}
		hold := setOp(s.path(appsDir, app), n.data, n.version)
		more, stops, err := s.enableOps(ctx, disableAppDir, app, names)
		if err != nil {
			return err
		}
		if err := s.multi(ctx, append([]any{hold}, more...)...); err != nil {
			return err
		}
		clearedStops = stops
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("enable app %q: %w", app, err)
	}
	return clearedStops, nil
}

// notFoundAs is a multi's error, with a failed check of p's existence said as the missing
// kind name.
func notFoundAs(err error, p, kind, name string) error {
	var op *OpError
	if errors.As(err, &op) && op.Path == p && errors.Is(err, ErrNotFound) {
		return &SubjectError{Kind: kind, Name: name, Err: ErrNotFound}
	}
	return err
}

// jobsOfApp names the app's jobs.
func (s *Store) jobsOfApp(ctx context.Context, app string) ([]string, error) {
	jobs, err := s.Jobs(ctx)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, j := range jobs {
		if j.AppName == app {
			names = append(names, j.JobName)
		}
	}
	return names, nil
}

// enableOps returns the ops deleting a disable marker, if there is one, and the stop marks of
// jobs, with the jobs that have one.
func (s *Store) enableOps(ctx context.Context, dir, name string, jobs []string) (ops []any, stopped []string, err error) {
	if st, err := s.stat(ctx, s.path(dir, name)); err != nil {
		return nil, nil, err
	} else if st != nil {
		ops = append(ops, deleteOp(s.path(dir, name), st.Version))
	}
	for _, job := range jobs {
		p := s.path(stoppedDir, job)
		st, err := s.stat(ctx, p)
		if err != nil {
			return nil, nil, err
		}
		if st != nil {
			ops = append(ops, deleteOp(p, st.Version))
			stopped = append(stopped, job)
		}
	}
	return ops, stopped, nil
}

// JobDisabled reports whether the job itself is disabled (not counting its app).
func (s *Store) JobDisabled(ctx context.Context, job string) (bool, error) {
	st, err := s.stat(ctx, s.path(disableJobDir, job))
	return st != nil, err
}

// AppDisabled reports whether the app is disabled.
func (s *Store) AppDisabled(ctx context.Context, app string) (bool, error) {
	st, err := s.stat(ctx, s.path(disableAppDir, app))
	return st != nil, err
}

// JobOrAppDisabled reports whether a job or its app is disabled (GET /api/job/{job}/disable).
func (s *Store) JobOrAppDisabled(ctx context.Context, j config.Job) (bool, error) {
	if d, err := s.JobDisabled(ctx, j.JobName); err != nil || d {
		return d, err
	}
	return s.AppDisabled(ctx, j.AppName)
}

// Disabled returns the names of the disabled apps and jobs.
func (s *Store) Disabled(ctx context.Context) (apps, jobs map[string]bool, err error) {
	list := func(dir string) (map[string]bool, error) {
		names, err := s.children(ctx, s.path(dir))
		m := make(map[string]bool, len(names))
		for _, n := range names {
			m[n] = true
		}
		return m, err
	}
	if apps, err = list(disableAppDir); err != nil {
		return nil, nil, err
	}
	jobs, err = list(disableJobDir)
	return apps, jobs, err
}

// FrameworkID returns the persisted Mesos FrameworkID, or ErrNotFound.
func (s *Store) FrameworkID(ctx context.Context) (string, error) {
	n, err := s.get(ctx, s.path(frameworkIDKey))
	if err != nil {
		return "", err
	}
	if !n.exists || len(n.data) == 0 {
		return "", fmt.Errorf("framework id: %w", ErrNotFound)
	}
	return string(n.data), nil
}

// SaveFrameworkID persists the FrameworkID Mesos assigned.
func (s *Store) SaveFrameworkID(ctx context.Context, id string) error {
	p := s.path(frameworkIDKey)
	err := retry(ctx, func() error {
		n, err := s.get(ctx, p)
		if err != nil {
			return err
		}
		switch {
		case !n.exists:
			return conflictIfExists(s.multi(ctx, s.createOp(p, []byte(id))))
		case string(n.data) == id:
			return nil
		default:
			return s.multi(ctx, setOp(p, []byte(id), n.version))
		}
	})
	if err != nil {
		return fmt.Errorf("save framework id: %w", err)
	}
	return nil
}

// DeleteFrameworkID forgets the FrameworkID, so that the next leader registers afresh.
func (s *Store) DeleteFrameworkID(ctx context.Context) error {
	err := s.multi(ctx, deleteOp(s.path(frameworkIDKey), -1))
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("delete framework id: %w", err)
	}
	return nil
}
