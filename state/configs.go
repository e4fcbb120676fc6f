package state

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/taskid"
)

// CreateApp stores a new app. Of concurrent creates of one name exactly one succeeds; the
// others get ErrExists.
func (s *Store) CreateApp(ctx context.Context, a config.App) error {
	data, err := json.Marshal(a)
	if err != nil {
		return err
	}
	if err := s.multi(ctx, s.createOp(s.path(appsDir, a.AppName), data)); err != nil {
		return fmt.Errorf("create app %q: %w", a.AppName, err)
	}
	return nil
}

// App reads one app.
func (s *Store) App(ctx context.Context, name string) (config.App, error) {
	a, _, err := s.readApp(ctx, name)
	return a, err
}

func (s *Store) readApp(ctx context.Context, name string) (config.App, int32, error) {
	return readConfig(ctx, s, appsDir, "app", name, config.ParseApp)
}

// Apps reads every app, sorted by name.
func (s *Store) Apps(ctx context.Context) ([]config.App, error) {
	return readConfigs(ctx, s, appsDir, "app", config.ParseApp)
}

// readConfig reads and parses one config node with its version.
func readConfig[T any](ctx context.Context, s *Store, dir, kind, name string, parse func([]byte) (T, error)) (T, int32, error) {
	var zero T
	n, err := s.get(ctx, s.path(dir, name))
	if err != nil {
		return zero, 0, err
	}
	if !n.exists {
		return zero, 0, &SubjectError{Kind: kind, Name: name, Err: ErrNotFound}
	}
	c, err := cachedParse(n.mn, kind, name, n.data, parse)
	return c, n.version, err
}

// parseConfig parses a config node's data; bad data is ErrCorrupt, naming the node.
func parseConfig[T any](kind, name string, data []byte, parse func([]byte) (T, error)) (T, error) {
	c, err := parse(data)
	if err != nil {
		return c, fmt.Errorf("%w: %s %q: %v", ErrCorrupt, kind, name, err)
	}
	return c, nil
}

// readConfigs reads and parses every config node of a directory, sorted by name.
func readConfigs[T any](ctx context.Context, s *Store, dir, kind string, parse func([]byte) (T, error)) ([]T, error) {
	nodes, err := s.readDir(ctx, dir)
	if err != nil {
		return nil, err
	}
	out := make([]T, 0, len(nodes))
	for _, n := range nodes {
		c, err := cachedParse(n.mn, kind, n.name, n.data, parse)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, nil
}

// UpdateApp applies change to the stored app and writes the result if the app did not change
// meanwhile (read-modify-write under a version check, retried on conflict). change must not
// rename the app.
func (s *Store) UpdateApp(ctx context.Context, name string, change func(config.App) (config.App, error)) (config.App, error) {
	var out config.App
	err := retry(ctx, func() error {
		cur, version, err := s.readApp(ctx, name)
		if err != nil {
			return err
		}
		next, err := change(cur)
		if err != nil {
			return err
		}
		if next.AppName != name {
			return fmt.Errorf("update app %q: the name cannot change", name)
		}
		data, err := json.Marshal(next)
		if err != nil {
			return err
		}
		if err := s.multi(ctx, setOp(s.path(appsDir, name), data, version)); err != nil {
			return fmt.Errorf("update app %q: %w", name, err)
		}
		out = next
		return nil
	})
	return out, err
}

// DeleteApp removes an app, its disable marker and every job of the app with the job's
// queue entries and markers, in one multi. It returns the names of the deleted jobs, whose
// running tasks the caller must kill. Running nodes stay until those tasks end.
func (s *Store) DeleteApp(ctx context.Context, name string) ([]string, error) {
	var deleted []string
	err := retry(ctx, func() error {
		// A job of another app may not depend on one of the app's; its own jobs go together.
		guard, err := s.dependsOps(ctx, func(jobs []config.Job) error {
			of := map[string]bool{}
			for _, j := range jobs {
				of[j.JobName] = j.AppName == name
			}
			return config.CheckNoDependents(jobs, func(j string) bool { return of[j] })
		})
		if err != nil {
			return fmt.Errorf("delete app %q: %w", name, err)
		}
		_, version, err := s.readApp(ctx, name)
		if err != nil {
			return err
		}
		jobs, err := s.readDir(ctx, jobsDir)
		if err != nil {
			return err
		}
		ops := append(guard, deleteOp(s.path(appsDir, name), version))
		marker, err := s.stat(ctx, s.path(disableAppDir, name))
		if err != nil {
			return err
		}
		if marker != nil {
			ops = append(ops, deleteOp(s.path(disableAppDir, name), marker.Version))
		} else {
			// A disable written since the read would outlive the app, and an app registered
			// again under its name would begin disabled: its marker must still be absent.
			ops = append(ops, s.absentOps(s.path(disableAppDir, name))...)
		}
		deleted = deleted[:0]
		for _, n := range jobs {
			j, err := config.ParseJob(n.data)
			if err != nil || j.AppName != name {
				continue
			}
			jobOps, err := s.deleteJobOps(ctx, n.name, n.version)
			if err != nil {
				return err
			}
			ops = append(ops, jobOps...)
			deleted = append(deleted, n.name)
		}
		if err := s.multi(ctx, ops...); err != nil {
			return fmt.Errorf("delete app %q: %w", name, conflictIfExists(err)) // a marker made since the read: read again
		}
		return nil
	})
	return deleted, err
}

// CreateJob stores a new job. The job's app must exist, checked in the same transaction so
// that a job can never be created for an app being deleted (appOps). Of concurrent creates of
// one name exactly one succeeds; the others get ErrExists. An unknown app is ErrAppNotFound.
func (s *Store) CreateJob(ctx context.Context, j config.Job) error {
	if err := s.launchFits(j); err != nil {
		return err
	}
	data, err := json.Marshal(j)
	if err != nil {
		return err
	}
	return retry(ctx, func() error {
		guard, err := s.jobDependsOps(ctx, j)
		if err != nil {
			return fmt.Errorf("create job %q: %w", j.JobName, err)
		}
		app, err := s.appOp(ctx, j.AppName)
		if err != nil {
			return fmt.Errorf("create job %q: %w", j.JobName, err)
		}
		leftovers, err := s.jobStateOps(ctx, j.JobName)
		if err != nil {
			return fmt.Errorf("create job %q: %w", j.JobName, err)
		}
		ops := append(append(guard, app, s.createOp(s.path(jobsDir, j.JobName), data)), leftovers...)
		if err := s.multi(ctx, ops...); err != nil {
			return fmt.Errorf("create job %q: %w", j.JobName, appMissing(err, s.path(appsDir, j.AppName)))
		}
		return nil
	})
}

// appOp returns the op that holds a job's app in place while the job is written: the app's
// node set again, as it is, at the version read. A check of its existence would not do:
// DeleteApp reads the app's jobs and deletes them with the app in one multi, and a job written
// after that read, under a mere check, would outlive its app (a job's node is not the app's
// child, so writing it does not change the app's version). Setting the app does, and the
// delete, checked against the version it read, fails and reads the jobs again.
func (s *Store) appOp(ctx context.Context, app string) (any, error) {
	p := s.path(appsDir, app)
	n, err := s.get(ctx, p)
	if err != nil {
		return nil, err
	}
	if !n.exists {
		return nil, &SubjectError{Kind: "app", Name: app, Err: ErrAppNotFound}
	}
	return setOp(p, n.data, n.version), nil
}

// appMissing turns a failed check of the app's node into ErrAppNotFound.
func appMissing(err error, appPath string) error {
	var op *OpError
	if errors.As(err, &op) && op.Path == appPath && errors.Is(err, ErrNotFound) {
		return &SubjectError{Kind: "app", Name: base(appPath), Err: ErrAppNotFound}
	}
	return err
}

// Job reads one job.
func (s *Store) Job(ctx context.Context, name string) (config.Job, error) {
	j, _, err := s.readJob(ctx, name)
	return j, err
}

func (s *Store) readJob(ctx context.Context, name string) (config.Job, int32, error) {
	return readConfig(ctx, s, jobsDir, "job", name, config.ParseJob)
}

// Jobs reads every job, sorted by name.
func (s *Store) Jobs(ctx context.Context) ([]config.Job, error) {
	return readConfigs(ctx, s, jobsDir, "job", config.ParseJob)
}

// JobsJSON returns every job's config as the API shows it (json.Marshal of config.Job),
// sorted by name. With the leader's model each node is encoded once per version: listing
// 10,000 jobs is then a copy, not 10,000 encodings.
func (s *Store) JobsJSON(ctx context.Context) ([]json.RawMessage, error) {
	nodes, err := s.readDir(ctx, jobsDir)
	if err != nil {
		return nil, err
	}
	out := make([]json.RawMessage, 0, len(nodes))
	for _, n := range nodes {
		e, err := cachedJSON(n.mn, "job", n.name, n.data, config.ParseJob)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// JobsNamed reads the named jobs at once (pipelined); a job that does not exist is absent from
// the result. The offer cycle uses it to read only the jobs that have work queued, rather
// than every job.
func (s *Store) JobsNamed(ctx context.Context, names []string) (map[string]config.Job, map[string]int32, error) {
	paths := make([]string, len(names))
	for i, n := range names {
		paths[i] = s.path(jobsDir, n)
	}
	nodes, err := s.getMany(ctx, paths)
	if err != nil {
		return nil, nil, err
	}
	out := make(map[string]config.Job, len(names))
	versions := make(map[string]int32, len(names))
	for i, n := range nodes {
		if !n.exists {
			continue
		}
		j, err := cachedParse(n.mn, "job", names[i], n.data, config.ParseJob)
		if err != nil {
			return nil, nil, err
		}
		out[names[i]], versions[names[i]] = j, n.version
	}
	return out, versions, nil
}

// UpdateJob replaces a job's config and returns the previous one, which the caller compares
// (config.Job.RestartsTasks) to decide whether running tasks must be killed; such an update
// records, in the same multi, the tasks running now in the job's restart list (restarts.go).
// The job's stop mark, if any, goes in the multi too.
// The job must exist (ErrNotFound) and its app too (ErrAppNotFound).
func (s *Store) UpdateJob(ctx context.Context, j config.Job) (config.Job, error) {
	return s.UpdateJobFrom(ctx, j, time.Time{})
}

// UpdateJobFrom is UpdateJob that, when the update changes the cron or zone the job is fired
// by (config.Job.FiredCron), records in the same multi that the new one takes effect from
// (the fire ledger's Cron, Zone and From; Last stays the old cron's last slot). The caller
// has had every slot of the old cron up to from decided and written: so no leader, however
// soon it takes over, finds the new config beside a ledger of the old cron, and every slot is
// the old cron's up to from and the new one's after it.
func (s *Store) UpdateJobFrom(ctx context.Context, j config.Job, from time.Time) (config.Job, error) {
	if err := s.launchFits(j); err != nil {
		return config.Job{}, err
	}
	data, err := json.Marshal(j)
	if err != nil {
		return config.Job{}, err
	}
	var prev config.Job
	err = retry(ctx, func() error {
		guard, err := s.jobDependsOps(ctx, j)
		if err != nil {
			return fmt.Errorf("update job %q: %w", j.JobName, err)
		}
		cur, version, err := s.readJob(ctx, j.JobName)
		if err != nil {
			return err
		}
		app, err := s.appOp(ctx, j.AppName)
		if err != nil {
			return fmt.Errorf("update job %q: %w", j.JobName, err)
		}
		ops := append(guard, app, setOp(s.path(jobsDir, j.JobName), data, version))
		if cur.RestartsTasks(j) {
			restart, err := s.restartOps(ctx, j.JobName)
			if err != nil {
				return err
			}
			ops = append(ops, restart...)
		}
		// An update is how an operator tells a stopped job to try again (stopped.go): its stop
		// mark goes in the same multi, so that an update written is never one left stopped.
		sp := s.path(stoppedDir, j.JobName)
		if st, err := s.stat(ctx, sp); err != nil {
			return err
		} else if st != nil {
			ops = append(ops, deleteOp(sp, st.Version))
		}
		if cur.JobExecutionType == config.Daemon && j.JobExecutionType != config.Daemon {
			// A DAEMON's ready entry asks for its missing shards to be started (a rerun), not
			// for a run: left to the TRANSIENT job, it would be one nobody asked for.
			rp := s.path(readyDir, j.JobName)
			st, err := s.stat(ctx, rp)
			if err != nil {
				return err
			}
			if st != nil {
				ops = append(ops, deleteOp(rp, st.Version))
			}
		}
		if !from.IsZero() {
			change, err := s.cronChangeOps(ctx, cur, j, from)
			if err != nil {
				return err
			}
			ops = append(ops, change...)
		}
		err = s.multi(ctx, ops...)
		if err != nil {
			return fmt.Errorf("update job %q: %w", j.JobName, appMissing(err, s.path(appsDir, j.AppName)))
		}
		prev = cur
		return nil
	})
	return prev, err
}

// cronChangeOps returns the op that records in the job's fire ledger a change from cur's fired
// cron to next's at from; none when the fired cron is the same, or the job has no ledger (a
// leader then starts it at its takeover, missing nothing).
func (s *Store) cronChangeOps(ctx context.Context, cur, next config.Job, from time.Time) ([]any, error) {
	oldCron, oldZone := cur.FiredCron()
	cron, zone := next.FiredCron()
	if cron == oldCron && zone == oldZone {
		return nil, nil
	}
	led, n, err := s.readLedger(ctx, next.JobName)
	if err != nil || !n.exists {
		return nil, err
	}
	led.Cron, led.Zone = cron, zone
	if from.After(led.From) {
		led.From = from
	}
	data, err := json.Marshal(led)
	if err != nil {
		return nil, fmt.Errorf("encode the fire ledger: %w", err)
	}
	return []any{setOp(s.path(firesDir, next.JobName), data, n.version)}, nil
}

// DeleteJob removes a job's config, ready entry, failover entries, disable marker and restart
// list in one multi. Its running nodes stay until the caller's kills end the tasks (SPEC §5.9).
func (s *Store) DeleteJob(ctx context.Context, name string) error { return s.deleteJob(ctx, name, nil) }

// deleteJob is DeleteJob; a test's between runs after each attempt's reads.
func (s *Store) deleteJob(ctx context.Context, name string, between func()) error {
	return retry(ctx, func() error {
		guard, err := s.deleteDependsOps(ctx, func(j string) bool { return j == name })
		if err != nil {
			return fmt.Errorf("delete job %q: %w", name, err)
		}
		_, version, err := s.readJob(ctx, name)
		if err != nil {
			return err
		}
		ops, err := s.deleteJobOps(ctx, name, version)
		if err != nil {
			return err
		}
		ops = append(ops, guard...)
		if between != nil {
			between()
		}
		if err := s.multi(ctx, ops...); err != nil {
			return fmt.Errorf("delete job %q: %w", name, conflictIfExists(err)) // a marker made since the read: read again
		}
		return nil
	})
}

// deleteJobOps reads what a job has in the queues and returns the ops that remove it all.
func (s *Store) deleteJobOps(ctx context.Context, name string, version int32) ([]any, error) {
	state, err := s.jobStateOps(ctx, name)
	if err != nil {
		return nil, err
	}
	return append([]any{deleteOp(s.path(jobsDir, name), version)}, state...), nil
}

// jobStateOps reads what a job's name has in the state (queues, markers, ledger, retries,
// restarts; not its running tasks) and returns the ops that remove it all, with checks that
// the markers and ledger absent now are still absent. DeleteJob removes it with the config;
// CreateJob removes what a config deleted behind ejcloud's back (by an operator, or a 2.1.5
// tool) left, so that a job registered again under the name does not begin disabled,
// stopped, queued, or catching up from the old job's ledger.
func (s *Store) jobStateOps(ctx context.Context, name string) ([]any, error) {
	var ops []any
	// A disable, a stop or a fire written between the read and the multi would outlive the job
	// (neither checks the job's version), and a job registered again under its name would
	// begin disabled, stopped, or catching up from the old ledger: where absent, these must
	// still be, or the multi fails and reads again.
	mustStayAbsent := map[string]bool{s.path(disableJobDir, name): true, s.path(stoppedDir, name): true, s.path(firesDir, name): true}
	for _, p := range []string{s.path(readyDir, name), s.path(disableJobDir, name), s.path(stoppedDir, name), s.path(firesDir, name), s.path(restartsDir, name)} {
		st, err := s.stat(ctx, p)
		if err != nil {
			return nil, err
		}
		switch {
		case st != nil:
			ops = append(ops, deleteOp(p, st.Version))
		case mustStayAbsent[p]:
			ops = append(ops, s.absentOps(p)...)
		}
	}
	// Each deletion is checked against the version read, so that an entry a launch or a retry
	// took meanwhile fails the multi as a conflict, which is read again, rather than as the
	// job's being gone (404 for a job that exists).
	versioned := func(p string) error {
		st, err := s.stat(ctx, p)
		if err == nil && st != nil {
			ops = append(ops, deleteOp(p, st.Version))
		}
		return err
	}
	retries, err := s.children(ctx, s.path(retryDir))
	if err != nil {
		return nil, err
	}
	for _, r := range retries {
		if m, err := taskid.ParseMeta(r); err == nil && m.JobName == name {
			if err := versioned(s.path(retryDir, r)); err != nil {
				return nil, err
			}
		}
	}
	parent := s.path(failoverDir, name)
	items, err := s.children(ctx, parent)
	if err != nil {
		return nil, err
	}
	for _, item := range items {
		if err := versioned(parent + "/" + item); err != nil {
			return nil, err
		}
	}
	// The parent itself, if there: the model lists an empty one's children as none, like an
	// absent one's, so its existence is read, not inferred from them.
	if err := versioned(parent); err != nil {
		return nil, err
	}
	s.parents.Delete(parent)
	return ops, nil
}

// namedNode is a child read by readDir.
type namedNode struct {
	name string
	node
}

// readDir reads every child of a directory, sorted by name, skipping children deleted
// between the listing and the read.
func (s *Store) readDir(ctx context.Context, dir string) ([]namedNode, error) {
	return s.readChildren(ctx, s.path(dir))
}

func (s *Store) readChildren(ctx context.Context, p string) ([]namedNode, error) {
	if s.mv != nil && s.mv.m.covered(p) {
		return s.mirroredReadChildren(ctx, p)
	}
	names, err := s.children(ctx, p)
	if err != nil {
		return nil, err
	}
	paths := make([]string, len(names))
	for i, n := range names {
		paths[i] = p + "/" + n
	}
	nodes, err := s.getMany(ctx, paths)
	if err != nil {
		return nil, err
	}
	out := make([]namedNode, 0, len(nodes))
	for i, n := range nodes {
		if n.exists {
			out = append(out, namedNode{name: names[i], node: n})
		}
	}
	return out, nil
}
