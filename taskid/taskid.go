// Package taskid formats and parses the identifiers that tie a Mesos task to an ejcloud shard
// (SPEC §1). They are part of the external contract: the same strings appear in ZooKeeper, in
// Mesos and in the REST API, and Elastic-Job-Cloud 2.1.5 tooling splits them on "@-@".
//
//	task id:     {jobName}@-@{shardingItem}@-@{READY|FAILOVER}@-@{agentId}@-@{uuid}
//	meta info:   {jobName}@-@{shardingItem}
//	executor id: {appName}@-@{agentId}
package taskid

import (
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Delimiter separates the parts of every identifier in this package. Job and app names are
// validated never to contain it.
const Delimiter = "@-@"

// Type says why a task was launched: a fresh run from the ready queue or a relaunch from the
// failover queue.
type Type string

const (
	Ready    Type = "READY"
	Failover Type = "FAILOVER"
)

// ErrMalformed is wrapped by every parse error of this package.
var ErrMalformed = errors.New("taskid: malformed")

// Meta identifies one shard of one job; it is the key of the running and failover queues.
type Meta struct {
	JobName string
	Item    int
}

// String returns the "{jobName}@-@{item}" form.
func (m Meta) String() string {
	return m.JobName + Delimiter + strconv.Itoa(m.Item)
}

// ParseMeta parses "{jobName}@-@{item}".
func ParseMeta(s string) (Meta, error) {
	parts := strings.Split(s, Delimiter)
	if len(parts) != 2 {
		return Meta{}, fmt.Errorf("%w meta info %q: want 2 parts separated by %q, got %d", ErrMalformed, s, Delimiter, len(parts))
	}
	return parseMetaParts(s, parts[0], parts[1])
}

func parseMetaParts(s, job, item string) (Meta, error) {
	if job == "" {
		return Meta{}, fmt.Errorf("%w %q: empty job name", ErrMalformed, s)
	}
	n, err := parseItem(item)
	if err != nil {
		return Meta{}, fmt.Errorf("%w %q: sharding item: %v", ErrMalformed, s, err)
	}
	return Meta{JobName: job, Item: n}, nil
}

// parseItem accepts only canonical non-negative decimals ("7", not "+7" or "007"), so that
// format∘parse is the identity and two spellings never name the same shard.
func parseItem(s string) (int, error) {
	if s == "" || len(s) > 9 {
		return 0, fmt.Errorf("%q is not a sharding item", s)
	}
	if len(s) > 1 && s[0] == '0' {
		return 0, fmt.Errorf("%q has a leading zero", s)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%q is not a non-negative integer", s)
		}
	}
	return strconv.Atoi(s)
}

// ID is a parsed task id.
type ID struct {
	Meta
	Type    Type
	AgentID string
	UUID    string
}

// String returns the five-part task id.
func (id ID) String() string {
	return strings.Join([]string{id.JobName, strconv.Itoa(id.Item), string(id.Type), id.AgentID, id.UUID}, Delimiter)
}

// Parse parses a five-part task id.
func Parse(s string) (ID, error) {
	parts := strings.Split(s, Delimiter)
	if len(parts) != 5 {
		return ID{}, fmt.Errorf("%w task id %q: want 5 parts separated by %q, got %d", ErrMalformed, s, Delimiter, len(parts))
	}
	meta, err := parseMetaParts(s, parts[0], parts[1])
	if err != nil {
		return ID{}, err
	}
	t := Type(parts[2])
	if t != Ready && t != Failover {
		return ID{}, fmt.Errorf("%w task id %q: type %q is neither READY nor FAILOVER", ErrMalformed, s, parts[2])
	}
	if parts[3] == "" {
		return ID{}, fmt.Errorf("%w task id %q: empty agent id", ErrMalformed, s)
	}
	if parts[4] == "" {
		return ID{}, fmt.Errorf("%w task id %q: empty uuid", ErrMalformed, s)
	}
	return ID{Meta: meta, Type: t, AgentID: parts[3], UUID: parts[4]}, nil
}

// Executor identifies the one executor of an app on an agent.
type Executor struct {
	AppName string
	AgentID string
}

// String returns "{appName}@-@{agentId}".
func (e Executor) String() string { return e.AppName + Delimiter + e.AgentID }

// ParseExecutor parses "{appName}@-@{agentId}".
func ParseExecutor(s string) (Executor, error) {
	parts := strings.Split(s, Delimiter)
	if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
		return Executor{}, fmt.Errorf("%w executor id %q: want {appName}%s{agentId}", ErrMalformed, s, Delimiter)
	}
	return Executor{AppName: parts[0], AgentID: parts[1]}, nil
}

// New returns a task id for a fresh launch of meta's shard on agentID, with a random
// RFC 4122 version 4 uuid so that every launch of the same shard has a distinct Mesos task id.
func New(meta Meta, t Type, agentID string) ID {
	return NewInRun(meta, t, agentID, "")
}

// runLen is the length of a run id: the uuid's first group, 32 random bits.
const runLen = 8

// NewRun returns a fresh run id: 8 random hex digits.
func NewRun() string {
	var b [runLen / 2]byte
	random(b[:])
	return fmt.Sprintf("%x", b)
}

// NewInRun is New with the uuid's first group set to run (from NewRun; "": a fresh one), so
// that every task of one run, and every relaunch of them, tells its run (ID.Run) however many
// tasks the run has. The uuid stays a version 4 uuid, unique by its other 90 random bits.
func NewInRun(meta Meta, t Type, agentID, run string) ID {
	var b [16]byte
	random(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	u := fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
	if isRun(run) {
		u = run + u[runLen:]
	}
	return ID{Meta: meta, Type: t, AgentID: agentID, UUID: u}
}

// Run returns the run id that begins the uuid, or "" when it begins with none. An id made
// before run ids (or by New) returns its random first group, which names no recorded run.
func (id ID) Run() string {
	if len(id.UUID) > runLen && id.UUID[runLen] == '-' && isRun(id.UUID[:runLen]) {
		return id.UUID[:runLen]
	}
	return ""
}

// RunIn is the run id of task id s (ID.Run) without parsing the rest of it: a job's runs are
// told apart by scanning its tasks, which must stay cheap for jobs of thousands of shards.
func RunIn(s string) string {
	i := strings.LastIndex(s, Delimiter)
	if i < 0 {
		return ""
	}
	return ID{UUID: s[i+len(Delimiter):]}.Run()
}

func random(b []byte) {
	if _, err := rand.Read(b); err != nil {
		// crypto/rand.Read never fails on Linux ≥ 3.17; a failure is an unusable machine.
		panic(fmt.Sprintf("taskid: crypto/rand: %v", err))
	}
}

func isRun(s string) bool {
	if len(s) != runLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !('0' <= s[i] && s[i] <= '9' || 'a' <= s[i] && s[i] <= 'f') {
			return false
		}
	}
	return true
}
