package executor

import (
	"fmt"
	"strings"
	"time"

	mesostime "github.com/mesos/mesos-go/api/v1/lib/time"
)

// Config is what the agent tells its executor through the environment (MESOS.md §6.2).
type Config struct {
	FrameworkID            string
	ExecutorID             string
	AgentID                string
	Directory              string
	Sandbox                string
	AgentEndpoint          string // host:port of the agent's executor API
	Checkpoint             bool
	ShutdownGracePeriod    time.Duration
	RecoveryTimeout        time.Duration // how long to keep trying to reach a restarting agent
	SubscriptionBackoffMax time.Duration
	// AuthToken is the agent's token for this executor, sent as a bearer token on every call:
	// an agent with executor authentication on refuses calls without it.
	AuthToken string
}

// FromEnv reads the configuration through getenv (os.Getenv in main). Every missing or
// malformed variable is reported, together, in one error.
func FromEnv(getenv func(string) string) (Config, error) {
	var missing, bad []string
	str := func(name string) string {
		v := getenv(name)
		if v == "" {
			missing = append(missing, name)
		}
		return v
	}
	dur := func(name string) time.Duration {
		v := str(name)
		if v == "" {
			return 0
		}
		d, err := mesostime.ParseDuration(v)
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s=%q (want a Mesos duration such as 5secs)", name, v))
		}
		return d
	}
	c := Config{
		FrameworkID:         str("MESOS_FRAMEWORK_ID"),
		ExecutorID:          str("MESOS_EXECUTOR_ID"),
		Directory:           str("MESOS_DIRECTORY"),
		Sandbox:             str("MESOS_SANDBOX"),
		AgentEndpoint:       str("MESOS_AGENT_ENDPOINT"),
		ShutdownGracePeriod: dur("MESOS_EXECUTOR_SHUTDOWN_GRACE_PERIOD"),
		AgentID:             getenv("MESOS_SLAVE_ID"),
		AuthToken:           getenv("MESOS_EXECUTOR_AUTHENTICATION_TOKEN"),
	}
	switch cp := getenv("MESOS_CHECKPOINT"); cp {
	case "1", "true":
		c.Checkpoint = true
		c.RecoveryTimeout = dur("MESOS_RECOVERY_TIMEOUT")
		c.SubscriptionBackoffMax = dur("MESOS_SUBSCRIPTION_BACKOFF_MAX")
	case "", "0", "false":
	default:
		bad = append(bad, fmt.Sprintf("MESOS_CHECKPOINT=%q (want 1 or 0)", cp))
	}
	var problems []string
	if len(missing) > 0 {
		problems = append(problems, "missing "+strings.Join(missing, ", "))
	}
	if len(bad) > 0 {
		problems = append(problems, "invalid "+strings.Join(bad, ", "))
	}
	if len(problems) > 0 {
		return Config{}, fmt.Errorf("not started by a Mesos agent: %s", strings.Join(problems, "; "))
	}
	return c, nil
}
