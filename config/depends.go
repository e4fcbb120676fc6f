package config

import (
	"fmt"
	"slices"
	"strings"
)

// Waitable says whether other jobs may depend on j: a TRANSIENT job with a cron and without
// concurrencyPolicy Allow (whose overlapping runs give a logical time no single run to wait for).
func (j Job) Waitable() bool {
	return j.JobExecutionType == Transient && j.Cron != "" && j.ConcurrencyPolicy != Allow
}

// CheckDependsOn validates j's dependsOn against jobs, every job stored (j's old config among
// them, if any): each dependency names a waitable job, and together they close no cycle — a
// job in a cycle would wait for itself. A job others depend on must stay waitable. The error is
// a FieldError naming the field (and the cycle).
func CheckDependsOn(j Job, jobs []Job) error {
	deps := map[string][]string{}
	byName := map[string]Job{}
	waitable := j.Waitable()
	for _, o := range jobs {
		deps[o.JobName], byName[o.JobName] = o.DependsOn, o
		if !waitable && o.JobName != j.JobName && slices.Contains(o.DependsOn, j.JobName) {
			switch {
			case j.ConcurrencyPolicy == Allow:
				return depErr("concurrencyPolicy", "job %q depends on this job: a job others depend on cannot have concurrencyPolicy Allow", o.JobName)
			case j.JobExecutionType != Transient:
				return depErr("jobExecutionType", "job %q depends on this job: a job others depend on must be TRANSIENT", o.JobName)
			default:
				return depErr("cron", "job %q depends on this job: a job others depend on must have a cron", o.JobName)
			}
		}
	}
	deps[j.JobName] = j.DependsOn
	for _, d := range j.DependsOn {
		o, ok := byName[d]
		switch {
		case d == j.JobName:
		case !ok:
			return depErr("dependsOn", "dependsOn names job %q, which does not exist", d)
		case o.JobExecutionType != Transient || o.Cron == "":
			return depErr("dependsOn", "dependsOn names job %q, which is not a TRANSIENT job with a cron", d)
		case o.ConcurrencyPolicy == Allow:
			return depErr("dependsOn", "dependsOn names job %q, whose concurrencyPolicy is Allow (its runs overlap: a logical time has no single run to wait for)", d)
		}
	}
	if c := Cycle(deps, j.JobName); c != nil {
		return depErr("dependsOn", "dependsOn would close a cycle: %s", strings.Join(c, " → "))
	}
	return nil
}

// depErr is a FieldError whose message names the field itself, or need not.
func depErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Message: fmt.Sprintf(format, args...)}
}

// DependentError is a job that cannot go because another, staying, depends on it.
type DependentError struct {
	Job, DependsOn string
}

func (e *DependentError) Error() string {
	return fmt.Sprintf("job %q depends on job %q: take it out of %q's dependsOn first", e.Job, e.DependsOn, e.Job)
}

// CheckNoDependents returns a DependentError when a job of jobs that stays depends on one that
// gone says is going: its runs would wait for ever for a run that never comes.
func CheckNoDependents(jobs []Job, gone func(job string) bool) error {
	for _, o := range jobs {
		if gone(o.JobName) {
			continue
		}
		for _, d := range o.DependsOn {
			if gone(d) {
				return &DependentError{Job: o.JobName, DependsOn: d}
			}
		}
	}
	return nil
}

// Cycle returns a dependency cycle through job, given every job's dependsOn with job's own
// (proposed) list in it, as the path job → … → job; nil when there is none. Registration refuses
// a job that would close one: its dependencies could never all have run first.
func Cycle(deps map[string][]string, job string) []string {
	// Depth-first from job's dependencies; a path that comes back to job is the cycle. Jobs seen
	// once need no second visit: from them job is not reachable, or the first visit found it.
	seen := map[string]bool{}
	var path []string
	var walk func(n string) bool
	walk = func(n string) bool {
		path = append(path, n)
		for _, d := range slices.Sorted(slices.Values(deps[n])) {
			if d == job {
				path = append(path, d)
				return true
			}
			if seen[d] {
				continue
			}
			seen[d] = true
			if walk(d) {
				return true
			}
		}
		path = path[:len(path)-1]
		return false
	}
	if walk(job) {
		return path
	}
	return nil
}
