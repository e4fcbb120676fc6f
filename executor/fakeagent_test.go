package executor

import (
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ejcloud/ejcloud/integration/mesostest"
	"github.com/ejcloud/ejcloud/internal/await"
)

// An agent's ERROR event ends the subscription, and the executor subscribes again (MESOS.md
// §6.4), checkpointing or not: the agent is there. The recovery timeout counts from the end of
// the subscription the agent took, not from an older, healed loss: with checkpointing, the
// first SUBSCRIBE is refused (a loss that an executor without checkpointing ends at), and the
// ERROR comes on the next subscription after more than the recovery timeout.
func TestAnAgentErrorMakesTheExecutorSubscribeAgain(t *testing.T) {
	t.Parallel()
	for _, checkpoint := range []bool{true, false} {
		t.Run(fmt.Sprintf("checkpoint=%v", checkpoint), func(t *testing.T) {
			const recovery = time.Second
			var attempts atomic.Int32
			if !checkpoint {
				attempts.Store(1) // no refusal first
			}
			var refused atomic.Int64 // when the first SUBSCRIBE was refused (unix nanos)
			done := make(chan struct{})
			agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				if !strings.Contains(string(body), "SUBSCRIBE") {
					w.WriteHeader(http.StatusAccepted)
					return
				}
				switch attempts.Add(1) {
				case 1:
					refused.Store(time.Now().UnixNano())
					w.WriteHeader(http.StatusServiceUnavailable)
					return
				case 2:
					w.Header().Set("Content-Type", "application/json")
					writeEvent(w, subscribedEvent)
					// The loss that the first refusal began is older than the recovery timeout now.
					for time.Since(time.Unix(0, refused.Load())) <= recovery+100*time.Millisecond {
						select {
						case <-time.After(10 * time.Millisecond):
						case <-r.Context().Done():
							return
						}
					}
					writeEvent(w, `{"type":"ERROR","error":{"message":"boom"}}`)
					return
				}
				subscribeAndHold(w, r, done)
			}))
			defer agent.Close()
			defer close(done)
			// As an agent configures it: without checkpointing, no recovery timeout at all.
			cfg := agentConfig(t, agent.Listener.Addr().String(), checkpoint, nil)
			if checkpoint && cfg.RecoveryTimeout != recovery {
				t.Fatalf("recovery timeout %v; want %v", cfg.RecoveryTimeout, recovery)
			}
			ctx, cancel := context.WithCancel(context.Background())
			ran := make(chan error, 1)
			go func() { ran <- New(cfg, mesostest.QuietLogger()).Run(ctx) }()
			await.True(t, 10*time.Second, "the executor subscribes after the ERROR", func() bool {
				select {
				case err := <-ran:
					t.Fatalf("the executor ended after %d subscriptions: %v", attempts.Load(), err)
				default:
				}
				return attempts.Load() >= 3
			})
			cancel()
			<-ran
		})
	}
}

// agentConfig is the configuration of an executor started by an agent at endpoint (MESOS.md
// §6.2), read by FromEnv as in production: the recovery timeout (1 s) and backoff maximum
// (100 ms) only when checkpointing, as an agent gives them. extra adds or overrides variables.
func agentConfig(t *testing.T, endpoint string, checkpoint bool, extra map[string]string) Config {
	t.Helper()
	sandbox := t.TempDir()
	env := map[string]string{"MESOS_FRAMEWORK_ID": "f", "MESOS_EXECUTOR_ID": "e", "MESOS_DIRECTORY": sandbox, "MESOS_SANDBOX": sandbox,
		"MESOS_AGENT_ENDPOINT": endpoint, "MESOS_EXECUTOR_SHUTDOWN_GRACE_PERIOD": "1secs", "MESOS_SLAVE_ID": "a", "MESOS_CHECKPOINT": "0"}
	if checkpoint {
		env["MESOS_CHECKPOINT"], env["MESOS_RECOVERY_TIMEOUT"], env["MESOS_SUBSCRIPTION_BACKOFF_MAX"] = "1", "1secs", "100ms"
	}
	maps.Copy(env, extra)
	cfg, err := FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// subscribedEvent is an agent's SUBSCRIBED, in the executor API's JSON.
const subscribedEvent = `{"type":"SUBSCRIBED","subscribed":{"executor_info":{"executor_id":{"value":"e"},"command":{}},"framework_info":{"user":"u","name":"f"},"agent_info":{"hostname":"h"}}}`

// subscribeAndHold answers a SUBSCRIBE with SUBSCRIBED and keeps the stream open until done
// closes or the executor goes.
func subscribeAndHold(w http.ResponseWriter, r *http.Request, done <-chan struct{}) {
	w.Header().Set("Content-Type", "application/json")
	writeEvent(w, subscribedEvent)
	select {
	case <-done:
	case <-r.Context().Done():
	}
}

// writeEvent writes one RecordIO record of the event stream and flushes it.
func writeEvent(w http.ResponseWriter, ev string) {
	fmt.Fprintf(w, "%d\n%s", len(ev), ev)
	w.(http.Flusher).Flush()
}

// With executor authentication on, the agent gives the executor a token
// (MESOS_EXECUTOR_AUTHENTICATION_TOKEN), and refuses its calls without it as a bearer token.
func TestTheExecutorSendsItsAuthenticationToken(t *testing.T) {
	t.Parallel()
	var authorized, refused atomic.Int32
	done := make(chan struct{})
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" {
			refused.Add(1)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		authorized.Add(1)
		subscribeAndHold(w, r, done)
	}))
	defer agent.Close()
	defer close(done)
	env := map[string]string{"MESOS_FRAMEWORK_ID": "f", "MESOS_EXECUTOR_ID": "e", "MESOS_DIRECTORY": t.TempDir(), "MESOS_SANDBOX": t.TempDir(),
		"MESOS_AGENT_ENDPOINT": strings.TrimPrefix(agent.URL, "http://"), "MESOS_EXECUTOR_SHUTDOWN_GRACE_PERIOD": "1secs",
		"MESOS_EXECUTOR_AUTHENTICATION_TOKEN": "s3cret"}
	cfg, err := FromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ran := make(chan error, 1)
	go func() { ran <- New(cfg, mesostest.QuietLogger()).Run(ctx) }()
	await.True(t, 10*time.Second, "the executor subscribes with its token", func() bool { return authorized.Load() > 0 })
	cancel()
	<-ran
	if refused.Load() != 0 {
		t.Fatalf("%d calls without the token", refused.Load())
	}
}
