// Command sdk-executor is an example of an executor built with the job SDK: it registers one
// SIMPLE and one DATAFLOW job and runs them for the jobs whose jobClass names them. Build it,
// ship it in your app's tarball, and point the app's bootstrapScript at it:
//
//	go build -o sdk-executor ./executor/examples/sdk-executor
//	tar czf app.tar.gz sdk-executor   # appURL: .../app.tar.gz, bootstrapScript: ./sdk-executor
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/ejcloud/ejcloud/executor"
	"github.com/ejcloud/ejcloud/executor/job"
)

func main() {
	job.Register("example.hello", job.SimpleFunc(hello))
	job.RegisterDataflow("example.countdown", &countdown{left: map[string]int{}})
	executor.Main()
}

// hello writes a greeting into the sandbox; the shard parameter "fail" makes it fail.
func hello(ctx context.Context, sc job.ShardingContext) error {
	if sc.ShardingParameter == "fail" {
		return errors.New("asked to fail by the sharding parameter")
	}
	msg := fmt.Sprintf("hello from shard %d of %d (%s)\n", sc.ShardingItem, sc.ShardingTotalCount, sc.JobParameter)
	return os.WriteFile(sandbox(fmt.Sprintf("hello-%d.txt", sc.ShardingItem)), []byte(msg), 0o644)
}

// countdown is a DATAFLOW job: each task fetches the numbers from jobParameter (default 10)
// down to 1, three at a time, and processes them by appending them to a sandbox file.
type countdown struct {
	mu   sync.Mutex // guards left
	left map[string]int
}

func (c *countdown) Fetch(ctx context.Context, sc job.ShardingContext) ([]any, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n, ok := c.left[sc.TaskID]
	if !ok {
		n = 10
		if v, err := strconv.Atoi(sc.JobParameter); err == nil {
			n = v
		}
	}
	var batch []any
	for ; n > 0 && len(batch) < 3; n-- {
		batch = append(batch, n)
	}
	c.left[sc.TaskID] = n
	return batch, nil
}

func (c *countdown) Process(ctx context.Context, sc job.ShardingContext, data []any) error {
	f, err := os.OpenFile(sandbox(fmt.Sprintf("countdown-%d.txt", sc.ShardingItem)), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, d := range data {
		fmt.Fprintln(f, d)
	}
	return nil
}

func sandbox(name string) string { return filepath.Join(os.Getenv("MESOS_SANDBOX"), name) }
