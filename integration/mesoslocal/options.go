package mesoslocal

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
)

// Options configures a Cluster. Every knob defaults to the value real Mesos uses (MESOS.md
// §11), so that a framework tested against mesos-local sees what it will see in production;
// tests shorten them.
type Options struct {
	Addr           string // master listen address; default 127.0.0.1:0
	Agents         int    // default 1
	AgentResources string // e.g. "cpus:4;mem:4096;disk:10000;ports:[31000-32000]"; default "cpus:4;mem:4096"
	WorkDir        string // sandboxes and fetcher cache; required

	HeartbeatInterval             time.Duration // scheduler HEARTBEAT; 15s
	AllocationInterval            time.Duration // 1s
	OfferTimeout                  time.Duration // 0 = offers never expire
	AgentPingTimeout              time.Duration // 15s
	MaxAgentPingTimeouts          int           // 5
	AgentReregisterTimeout        time.Duration // 10m
	StatusUpdateRetryMin          time.Duration // 10s
	StatusUpdateRetryMax          time.Duration // 10m
	ExecutorRegistrationTimeout   time.Duration // 1m
	ExecutorShutdownGracePeriod   time.Duration // 5s
	ExecutorReregistrationTimeout time.Duration // 2s
	RecoveryTimeout               time.Duration // 15m
	ExecutorHeartbeatInterval     time.Duration // 30m
	MaxCompletedFrameworks        int           // 50

	// StandbyAddr, if set, starts a second listener that answers every scheduler call with a
	// 307 to the master, as a non-leading master does.
	StandbyAddr string

	Clock  Clock              // default: the real clock
	Logger logrus.FieldLogger // default: logrus standard logger
}

func (o *Options) setDefaults() error {
	if o.WorkDir == "" {
		return fmt.Errorf("mesoslocal: WorkDir is required")
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if o.Addr == "" {
		o.Addr = "127.0.0.1:0"
	}
	if o.Agents == 0 {
		o.Agents = 1
	}
	if o.AgentResources == "" {
		o.AgentResources = "cpus:4;mem:4096"
	}
	def(&o.HeartbeatInterval, 15*time.Second)
	def(&o.AllocationInterval, time.Second)
	def(&o.AgentPingTimeout, 15*time.Second)
	if o.MaxAgentPingTimeouts == 0 {
		o.MaxAgentPingTimeouts = 5
	}
	def(&o.AgentReregisterTimeout, 10*time.Minute)
	def(&o.StatusUpdateRetryMin, 10*time.Second)
	def(&o.StatusUpdateRetryMax, 10*time.Minute)
	def(&o.ExecutorRegistrationTimeout, time.Minute)
	def(&o.ExecutorShutdownGracePeriod, 5*time.Second)
	def(&o.ExecutorReregistrationTimeout, 2*time.Second)
	def(&o.RecoveryTimeout, 15*time.Minute)
	def(&o.ExecutorHeartbeatInterval, 30*time.Minute)
	if o.MaxCompletedFrameworks == 0 {
		o.MaxCompletedFrameworks = 50
	}
	if o.Clock == nil {
		o.Clock = RealClock{}
	}
	if o.Logger == nil {
		o.Logger = logrus.StandardLogger()
	}
	return nil
}

// StoutDuration formats d the way Mesos (stout) does in executor environment variables:
// a whole number with the largest unit that keeps it whole (5s → "5secs", 1.5s → "1500ms").
// mesos-go's executor config rejects Go's "5s".
func StoutDuration(d time.Duration) string {
	units := []struct {
		name string
		size time.Duration
	}{
		{"weeks", 7 * 24 * time.Hour}, {"days", 24 * time.Hour}, {"hrs", time.Hour},
		{"mins", time.Minute}, {"secs", time.Second}, {"ms", time.Millisecond}, {"us", time.Microsecond},
	}
	for _, u := range units {
		if d >= u.size && d%u.size == 0 {
			return strconv.FormatInt(int64(d/u.size), 10) + u.name
		}
	}
	return strconv.FormatInt(int64(d), 10) + "ns"
}

// parseResources parses "cpus:4;mem:4096;ports:[31000-32000]".
func parseResources(s string) (map[string]float64, [][2]uint64, error) {
	scalars := map[string]float64{}
	var ports [][2]uint64
	for _, part := range strings.Split(s, ";") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, value, ok := strings.Cut(part, ":")
		if !ok {
			return nil, nil, fmt.Errorf("resource %q: want name:value", part)
		}
		if strings.HasPrefix(value, "[") {
			for _, r := range strings.Split(strings.Trim(value, "[]"), ",") {
				a, b, ok := strings.Cut(strings.TrimSpace(r), "-")
				lo, err1 := strconv.ParseUint(a, 10, 64)
				hi, err2 := strconv.ParseUint(b, 10, 64)
				if !ok || err1 != nil || err2 != nil || lo > hi {
					return nil, nil, fmt.Errorf("resource %q: bad range %q", part, r)
				}
				ports = append(ports, [2]uint64{lo, hi})
			}
			if name != "ports" {
				return nil, nil, fmt.Errorf("resource %q: only ports may be a range", part)
			}
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil || v < 0 {
			return nil, nil, fmt.Errorf("resource %q: %q is not a non-negative number", part, value)
		}
		scalars[name] = v
	}
	if len(scalars) == 0 {
		return nil, nil, fmt.Errorf("no resources in %q", s)
	}
	return scalars, ports, nil
}
