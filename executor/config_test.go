package executor

import (
	"strings"
	"testing"
	"time"
)

func TestFromEnv(t *testing.T) {
	t.Parallel()
	full := map[string]string{
		"MESOS_FRAMEWORK_ID": "fw", "MESOS_EXECUTOR_ID": "app@-@S0", "MESOS_DIRECTORY": "/s", "MESOS_SANDBOX": "/s",
		"MESOS_AGENT_ENDPOINT": "127.0.0.2:5051", "MESOS_EXECUTOR_SHUTDOWN_GRACE_PERIOD": "5secs",
		"MESOS_CHECKPOINT": "1", "MESOS_RECOVERY_TIMEOUT": "15mins", "MESOS_SUBSCRIPTION_BACKOFF_MAX": "2secs",
	}
	c, err := FromEnv(func(k string) string { return full[k] })
	if err != nil || !c.Checkpoint || c.RecoveryTimeout != 15*time.Minute || c.ShutdownGracePeriod != 5*time.Second || c.SubscriptionBackoffMax != 2*time.Second {
		t.Fatalf("FromEnv(full) = %+v, %v", c, err)
	}
	_, err = FromEnv(func(k string) string {
		if k == "MESOS_EXECUTOR_ID" || k == "MESOS_AGENT_ENDPOINT" {
			return ""
		}
		if k == "MESOS_RECOVERY_TIMEOUT" {
			return "15m"
		}
		return full[k]
	})
	if err == nil || !strings.Contains(err.Error(), "MESOS_EXECUTOR_ID, MESOS_AGENT_ENDPOINT") || !strings.Contains(err.Error(), "MESOS_RECOVERY_TIMEOUT") {
		t.Fatalf("FromEnv with two missing and one bad variable: %v; want all three named in one error", err)
	}
	_, err = FromEnv(func(string) string { return "" })
	for _, v := range []string{"MESOS_FRAMEWORK_ID", "MESOS_EXECUTOR_ID", "MESOS_DIRECTORY", "MESOS_SANDBOX", "MESOS_AGENT_ENDPOINT", "MESOS_EXECUTOR_SHUTDOWN_GRACE_PERIOD"} {
		if err == nil || !strings.Contains(err.Error(), v) {
			t.Fatalf("FromEnv with nothing set: %v; want %s named", err, v)
		}
	}
}
