package lite

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ejcloud/ejcloud/config"
	"github.com/ejcloud/ejcloud/cron"
	"github.com/ejcloud/ejcloud/scheduler/sharding"
)

// Job types, as in the cloud mode (SPEC §3.2).
const (
	Simple   = "SIMPLE"
	Dataflow = "DATAFLOW"
	Script   = "SCRIPT"
)

// JobConfig is a lite job's configuration, stored as JSON in /{namespace}/{jobName}/config.
// The copy in ZooKeeper wins over the one a starting instance brings, unless that instance
// sets Options.Overwrite (as Elastic-Job-Lite's overwrite flag): so a change made in
// ZooKeeper (cron, shard count, failover) reaches every running instance.
type JobConfig struct {
	JobName                string `json:"jobName"`
	JobType                string `json:"jobType"`
	Cron                   string `json:"cron"`
	TimeZone               string `json:"timeZone,omitempty"` // IANA; default the process's zone
	ShardingTotalCount     int    `json:"shardingTotalCount"`
	ShardingItemParameters string `json:"shardingItemParameters,omitempty"`
	JobParameter           string `json:"jobParameter,omitempty"`
	// Failover: the items of an instance that disappears are run by the survivors at once.
	// It needs MonitorExecution, as in Elastic-Job-Lite.
	Failover bool `json:"failover"`
	// Misfire: a fire that comes while this instance still runs the previous one is run as
	// soon as it finishes, and items still running elsewhere are run once they finish,
	// instead of being skipped.
	Misfire bool `json:"misfire"`
	// MonitorExecution writes running markers (sharding/{item}/running) and each item's last
	// fire, so that resharding waits for running items, failover knows what was interrupted,
	// and no item runs twice for one fire. Off, a run costs no ZooKeeper write (for jobs that
	// fire every few seconds), at the price of those guarantees.
	MonitorExecution        bool   `json:"monitorExecution"`
	StreamingProcess        bool   `json:"streamingProcess,omitempty"`
	ScriptCommandLine       string `json:"scriptCommandLine,omitempty"`
	JobShardingStrategyType string `json:"jobShardingStrategyType,omitempty"` // default AVG_ALLOCATION
	Description             string `json:"description,omitempty"`
}

// parsed is a validated config with what it derives.
type parsed struct {
	JobConfig
	schedule *cron.Schedule
	loc      *time.Location
	params   map[int]string
}

func (c JobConfig) parse() (*parsed, error) {
	if !validName(c.JobName) {
		return nil, fmt.Errorf("lite: jobName %q must be 1-100 of [A-Za-z0-9_.-], not . or ..", c.JobName)
	}
	switch c.JobType {
	case Simple, Dataflow:
	case Script:
		if c.ScriptCommandLine == "" {
			return nil, errors.New("lite: scriptCommandLine is required for a SCRIPT job")
		}
	default:
		return nil, fmt.Errorf("lite: jobType %q is not SIMPLE, DATAFLOW or SCRIPT", c.JobType)
	}
	if c.ShardingTotalCount < 1 || c.ShardingTotalCount > 10000 {
		return nil, fmt.Errorf("lite: shardingTotalCount %d is outside [1,10000]", c.ShardingTotalCount)
	}
	if c.Failover && !c.MonitorExecution {
		return nil, errors.New("lite: failover needs monitorExecution")
	}
	if c.JobShardingStrategyType == "" {
		c.JobShardingStrategyType = sharding.AvgAllocation
	}
	if _, err := sharding.Shard(c.JobShardingStrategyType, 0, c.JobName, 0); err != nil {
		return nil, fmt.Errorf("lite: jobShardingStrategyType: %w", err)
	}
	p := &parsed{JobConfig: c}
	var err error
	if p.schedule, err = cron.Parse(c.Cron); err != nil {
		return nil, fmt.Errorf("lite: cron: %w", err)
	}
	// time.LoadLocation("") is UTC, not the process's zone that an unset timeZone means (as
	// the JVM's default zone in Elastic-Job-Lite).
	p.loc = time.Local
	if c.TimeZone != "" {
		if p.loc, err = time.LoadLocation(c.TimeZone); err != nil {
			return nil, fmt.Errorf("lite: timeZone: %w", err)
		}
	}
	if p.params, err = config.ParseShardingItemParameters(c.ShardingItemParameters, c.ShardingTotalCount); err != nil {
		return nil, fmt.Errorf("lite: shardingItemParameters: %w", err)
	}
	return p, nil
}

func decodeConfig(data []byte) (*parsed, error) {
	var c JobConfig
	if err := json.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("lite: unreadable config: %w", err)
	}
	return c.parse()
}

// validName: the job name is a ZooKeeper path element, so it follows the cloud mode's rule.
func validName(n string) bool {
	if n == "" || len(n) > 100 || n == "." || n == ".." {
		return false
	}
	for _, r := range n {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '.' || r == '-') {
			return false
		}
	}
	return true
}

func jsonConfig(c JobConfig) ([]byte, error) {
	data, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("lite: encode config: %w", err)
	}
	return data, nil
}
