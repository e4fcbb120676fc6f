package state

import (
	"fmt"
	"strings"
)

// Subjects. Errors of this package say which app, job or queue they are about in words a
// user reads (`job "c1"`), so that the REST API can answer with them and never with a
// ZooKeeper path or a client library's message.

// SubjectError is a failed operation on a named app or job.
type SubjectError struct {
	Kind string // "app" or "job"
	Name string
	Err  error // wraps a sentinel
}

func (e *SubjectError) Error() string   { return e.Subject() + ": " + e.Err.Error() }
func (e *SubjectError) Unwrap() error   { return e.Err }
func (e *SubjectError) Subject() string { return fmt.Sprintf("%s %q", e.Kind, e.Name) }

// Subject names what the node at the failed operation's path belongs to, from the layout of
// SPEC §4, or "" for a node that belongs to no app or job.
func (e *OpError) Subject() string {
	for _, d := range []struct{ dir, kind string }{
		{appsDir, "app"}, {disableAppDir, "app"},
		{jobsDir, "job"}, {disableJobDir, "job"}, {readyDir, "job"}, {runningDir, "job"}, {failoverDir, "job"},
	} {
		i := strings.Index(e.Path, "/"+d.dir+"/")
		if i < 0 {
			continue
		}
		name, _, _ := strings.Cut(e.Path[i+len(d.dir)+2:], "/")
		return fmt.Sprintf("%s %q", d.kind, name)
	}
	for _, d := range []struct{ dir, what string }{
		{readyDir, "the ready queue"}, {runningDir, "the running queue"}, {failoverDir, "the failover queue"},
		{disableAppDir, "the app disable markers"}, {disableJobDir, "the job disable markers"},
	} {
		if strings.HasSuffix(e.Path, "/"+d.dir) {
			return d.what
		}
	}
	return ""
}
