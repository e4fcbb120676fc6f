// Package taskend is the record of how a shard's run ended that the executor leaves in its
// sandbox until the agent has its final status update.
//
// A run can end and its report be lost: the executor is SIGKILLed, or does not re-register
// after its agent restarts, between the script's end and the agent's receipt of the update.
// The agent then reports the task TASK_FAILED (REASON_EXECUTOR_TERMINATED) or TASK_GONE
// (REASON_EXECUTOR_REREGISTRATION_TIMEOUT), and a scheduler that believed it would run the
// shard again. So the script's supervisor writes this record the moment it reaps the script,
// before anyone reports anything; the executor removes it once the agent acknowledged the
// task's final update. The sandbox outlives the executor (an agent keeps it until its garbage
// collection), and the scheduler reads the record through the agent's /files/read before it
// fails such a task over.
//
// The package imports only the standard library's early packages: the supervisor, which is
// initialized before the executor's heavy packages, writes it (executor/internal/supervise).
package taskend

import (
	"fmt"
	"hash/fnv"
	"os"
	"strconv"
	"strings"
)

// Dir is the folder of the records, in the executor's sandbox.
const Dir = ".ejcloud-ends"

// Record is how a run ended on its own: its script exited with Code, or (Exited false) was
// killed by signal Code. A run the executor killed, or that died with its executor, leaves no
// record.
type Record struct {
	Exited bool
	Code   int
}

// Succeeded reports whether the run ended as a TASK_FINISHED would say.
func (r Record) Succeeded() bool { return r.Exited && r.Code == 0 }

func (r Record) String() string {
	if r.Exited {
		return "exited " + strconv.Itoa(r.Code)
	}
	return "signaled " + strconv.Itoa(r.Code)
}

// Parse reads a record; anything else (an empty file, a foreign one) is an error.
func Parse(b []byte) (Record, error) {
	verb, arg, ok := strings.Cut(strings.TrimSpace(string(b)), " ")
	n, err := strconv.Atoi(arg)
	if !ok || err != nil || n < 0 || (verb != "exited" && verb != "signaled") {
		return Record{}, fmt.Errorf("not a run's end record: %q", b)
	}
	return Record{Exited: verb == "exited", Code: n}, nil
}

// Name is the record's file name for a task: the task id itself where it makes a file name,
// else a 128-bit digest of it (a task id embeds the job name, which may be long). Not a
// cryptographic hash: its packages would initialize before the supervisor.
func Name(taskID string) string {
	if taskID != "" && len(taskID) <= 200 && !strings.ContainsAny(taskID, "/\x00") && taskID != "." && taskID != ".." {
		return taskID
	}
	h := fnv.New128a()
	h.Write([]byte(taskID))
	return fmt.Sprintf("fnv128a-%x", h.Sum(nil))
}

// Path is where the record of taskID lives in sandbox.
func Path(sandbox, taskID string) string {
	return strings.TrimSuffix(sandbox, "/") + "/" + Dir + "/" + Name(taskID)
}

// Write writes r at path whole or not at all (a reader never sees half a record): into a
// temporary file beside it, then renamed over.
func Write(path string, r Record) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(r.String()+"\n"), 0o644); err != nil {
		return fmt.Errorf("write the run's end record: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write the run's end record: %w", err)
	}
	return nil
}
