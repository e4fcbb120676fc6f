package scheduler

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/mesos/mesos-go/api/v1/lib/encoding/codecs"
	"github.com/mesos/mesos-go/api/v1/lib/httpcli"
	"github.com/mesos/mesos-go/api/v1/lib/httpcli/apierrors"
	"github.com/mesos/mesos-go/api/v1/lib/httpcli/httpsched"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler"
	"github.com/mesos/mesos-go/api/v1/lib/scheduler/calls"
	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/state"
)

// errFrameworkRemoved is fatal: Mesos forgot the framework (failover timeout expired or torn
// down), and only an operator can decide to start afresh.
var errFrameworkRemoved = errors.New("Mesos says the framework has been removed (its failover timeout expired or it was torn down); " +
	"its tasks are gone. To register as a new framework, delete the ZooKeeper node /{namespace}/ha/framework_id and restart")

// frameworkInfo is the FrameworkInfo of SPEC §5.2.
func (c *Config) frameworkInfo(id, webui string) *mesos.FrameworkInfo {
	name := c.FrameworkName
	if c.MesosRole != "" && c.MesosRole != "*" {
		name += "-" + c.MesosRole
	}
	ft := c.FailoverTimeout.Seconds()
	info := &mesos.FrameworkInfo{
		User: c.MesosUser, Name: name, FailoverTimeout: &ft, Checkpoint: ptr(true),
		Hostname: ptr(c.Hostname), WebUiURL: ptr(webui), Roles: []string{c.MesosRole},
		Capabilities: []mesos.FrameworkInfo_Capability{
			{Type: mesos.FrameworkInfo_Capability_PARTITION_AWARE},
			{Type: mesos.FrameworkInfo_Capability_MULTI_ROLE},
			{Type: mesos.FrameworkInfo_Capability_TASK_KILLING_STATE},
		},
	}
	if id != "" {
		info.ID = &mesos.FrameworkID{Value: id}
	}
	if c.MesosPrincipal != "" {
		info.Principal = ptr(c.MesosPrincipal)
	}
	return info
}

func ptr[T any](v T) *T { return &v }

// subscription is one SUBSCRIBE: its caller carries the stream id for the other calls.
type subscription struct {
	caller      calls.Caller
	resp        mesos.Response
	frameworkID string
	heartbeat   time.Duration
	master      string // the master URL it was made at ("" in tests' fakes)
	// awaitMove, if set, blocks until another master leads (true) or ctx ends (false).
	awaitMove func(ctx context.Context) bool

	endOnce sync.Once
	ended   context.Context // done once the stream has ended (see end)
	endNow  context.CancelFunc
}

// errStreamEnded is a call given up because its subscription's stream ended: the master takes
// no call of an ended stream, and a call hanging on a master the stream lost (a partition)
// would hold the event loop, and with it the next subscription, until the client gave up.
var errStreamEnded = errors.New("the subscription's event stream ended")

// streamEnded is done once the stream has ended.
func (s *subscription) streamEnded() context.Context {
	s.endOnce.Do(func() { s.ended, s.endNow = context.WithCancel(context.Background()) })
	return s.ended
}

// end marks the stream ended: calls in flight on the subscription are given up.
func (s *subscription) end() {
	s.streamEnded()
	s.endNow()
}

// mesosAPI is the Mesos master as the leader uses it: SUBSCRIBE, which opens the event stream,
// then calls on the subscription (its caller). Tests and benchmarks put fakes in its place.
type mesosAPI interface {
	subscribe(ctx context.Context, frameworkID, webui string) (*subscription, error)
}

// httpMesos is the real master, over the v1 HTTP scheduler API at --mesos-url: the listed
// masters, or the leader that masters (a zk:// --mesos-url) shows.
type httpMesos struct {
	cfg     *Config
	masters *state.MasterDetector // nil unless --mesos-url is zk://
	log     logrus.FieldLogger
}

func (m httpMesos) subscribe(ctx context.Context, frameworkID, webui string) (*subscription, error) {
	if m.masters == nil {
		return m.cfg.subscribe(ctx, frameworkID, webui)
	}
	return m.subscribeToLeader(ctx, frameworkID, webui)
}

// subscribeToLeader subscribes at the master ZooKeeper shows as leading. While there is none,
// or it does not answer (a killed master leads in ZooKeeper until its session expires), it
// tries again at every change of leader and every few seconds, until ctx ends: a new leader
// gets the subscription as soon as it is published.
//
// A redirect is not followed: a master that ZooKeeper shows as leading but that has not seen
// its own election yet still sends frameworks to the master it knew, which may be the hung one
// it replaces, where mesos-go's retries would wait a minute. It is asked again shortly.
func (m httpMesos) subscribeToLeader(ctx context.Context, frameworkID, webui string) (*subscription, error) {
	retry := 250 * time.Millisecond
	last := fmt.Errorf("no Mesos master leads under %s", m.cfg.mesosZK)
	for {
		leader, ok, changed := m.masters.Leader()
		if ok {
			url := m.cfg.detectedScheme() + "://" + leader.Address
			sub, err := m.cfg.subscribeAt(ctx, url, subscribeDetected, frameworkID, webui)
			var refusal refused
			switch {
			case err == nil:
				sub.awaitMove = func(ctx context.Context) bool { return m.awaitMove(ctx, leader) }
				return sub, nil
			case errors.As(err, &refusal), errors.Is(err, errFrameworkRemoved), ctx.Err() != nil:
				return nil, err
			}
			last = fmt.Errorf("the leading master (%s in %s): %w", leader.Address, m.cfg.mesosZK, err)
			m.log.WithError(err).WithField("master", url).Warn("cannot subscribe at the leading Mesos master; waiting for it or for another to lead")
		}
		select {
		case <-changed:
		case <-time.After(retry):
			retry = min(2*retry, 5*time.Second)
		case <-ctx.Done():
			return nil, last
		}
	}
}

// awaitMove waits until the leader is no longer the master subscribed to.
func (m httpMesos) awaitMove(ctx context.Context, subscribed state.MesosMaster) bool {
	for {
		leader, ok, changed := m.masters.Leader()
		if !ok || leader != subscribed {
			return true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

// subscribe subscribes to the first of the masters (--mesos-url, in order) that answers,
// following leader redirects, and waits for SUBSCRIBED. A master that answers and refuses (bad
// credentials, the framework removed) ends the attempt: another master would say the same.
func (c *Config) subscribe(ctx context.Context, frameworkID, webui string) (*subscription, error) {
	urls := c.MesosURLs()
	var errs []error
	for _, u := range urls {
		how := subscribeOnly
		if len(urls) > 1 {
			how = subscribeFirst
		}
		sub, err := c.subscribeAt(ctx, u, how, frameworkID, webui)
		var refusal refused
		switch {
		case err == nil:
			return sub, nil
		case errors.As(err, &refusal), errors.Is(err, errFrameworkRemoved), ctx.Err() != nil:
			return nil, err
		}
		errs = append(errs, err)
	}
	return nil, allFailed(errs)
}

// allFailed is every master's failure, on one line (SPEC §2: a fatal error is one line;
// errors.Join puts each on a line of its own).
type allFailed []error

func (e allFailed) Error() string {
	msgs := make([]string, len(e))
	for i, err := range e {
		msgs[i] = err.Error()
	}
	return strings.Join(msgs, "; ")
}

func (e allFailed) Unwrap() []error { return e }

// refused is a master's answer that another master would give too.
type refused struct{ error }

func (r refused) Unwrap() error { return r.error }

// subscribeMode says how subscribeAt treats a master that does not answer or redirects.
type subscribeMode int

const (
	// subscribeOnly: the one master there is. mesos-go retries every failed call as if the
	// master had moved (up to 9 times, ≈ 40 s), and follows its redirects.
	subscribeOnly subscribeMode = iota
	// subscribeFirst: one of a list, tried in order. A master that does not answer is not
	// retried here (the next one is tried); redirects to the leader are followed.
	subscribeFirst
	// subscribeDetected: the master ZooKeeper shows as leading. Neither retried nor redirected:
	// the caller asks again at the leader ZooKeeper shows then.
	subscribeDetected
)

// subscribeAt subscribes at one master, retrying and following redirects as how says. A master
// that refused the credentials is never retried: a 401 does not get better.
func (c *Config) subscribeAt(ctx context.Context, master string, how subscribeMode, frameworkID, webui string) (*subscription, error) {
	cfg := []httpcli.ConfigOpt{httpcli.Timeout(30 * time.Second), httpcli.TLSConfig(c.mesosTLS.Clone())}
	if c.mesosSecret != "" {
		cfg = append(cfg, httpcli.BasicAuth(c.MesosPrincipal, c.mesosSecret))
	}
	var unauthorized, subscribing, untrusted atomic.Bool
	endpoint := strings.TrimSuffix(master, "/") + "/api/v1/scheduler"
	cli := httpcli.New(
		httpcli.Endpoint(endpoint),
		httpcli.Codec(codecs.ByMediaType[codecs.MediaTypeProtobuf]),
		httpcli.Do(noteUntrusted(httpcli.With(cfg...), &untrusted)),
		httpcli.ErrorMapper(func(res *http.Response) error {
			if res != nil && res.StatusCode == http.StatusUnauthorized {
				unauthorized.Store(true)
			}
			return apierrors.FromResponse(res)
		}),
	)
	opts := []httpsched.Option{httpsched.AllowReconnection(true), httpsched.EndpointCandidates(func() string {
		if unauthorized.Swap(false) || untrusted.Load() || how != subscribeOnly && subscribing.Load() {
			return "" // no retry
		}
		return endpoint
	})}
	if how == subscribeDetected {
		opts = append(opts, httpsched.MaxRedirects(0))
	}
	caller := httpsched.NewCaller(cli, opts...)
	call := calls.Subscribe(c.frameworkInfo(frameworkID, webui))
	if frameworkID != "" {
		call = call.With(calls.SubscribeTo(frameworkID))
	}
	subscribing.Store(true)
	resp, err := caller.Call(ctx, call)
	subscribing.Store(false)
	if apierrors.CodeNotAuthenticated.Matches(err) {
		if c.mesosSecret == "" {
			return nil, refused{fmt.Errorf("subscribe to Mesos at %s: it requires framework authentication (401): set --mesos-principal and --mesos-secret-file: %w", master, err)}
		}
		return nil, refused{fmt.Errorf("subscribe to Mesos at %s: it refused the secret of principal %q from --mesos-secret-file (401): %w", master, c.MesosPrincipal, err)}
	}
	if err != nil && untrusted.Load() {
		return nil, c.untrustedError(master, err)
	}
	if err != nil {
		return nil, fmt.Errorf("subscribe to Mesos at %s: %w", master, err)
	}
	var ev scheduler.Event
	if err := resp.Decode(&ev); err != nil {
		resp.Close()
		return nil, fmt.Errorf("subscribe to Mesos at %s: %w", master, err)
	}
	switch ev.Type {
	case scheduler.Event_SUBSCRIBED:
	case scheduler.Event_ERROR:
		resp.Close()
		if strings.Contains(ev.Error.Message, "removed") {
			return nil, errFrameworkRemoved
		}
		return nil, refused{fmt.Errorf("Mesos at %s refused the subscription: %s", master, ev.Error.Message)}
	default:
		resp.Close()
		return nil, fmt.Errorf("Mesos sent %v before SUBSCRIBED", ev.Type)
	}
	hb := 15 * time.Second
	if s := ev.Subscribed.GetHeartbeatIntervalSeconds(); s > 0 {
		hb = time.Duration(s * float64(time.Second))
	}
	return &subscription{caller: caller, resp: resp, frameworkID: ev.Subscribed.FrameworkID.Value, heartbeat: hb, master: master}, nil
}

// call sends a call for the framework; a 202 is a nil error.
func (s *subscription) call(ctx context.Context, c *scheduler.Call) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(s.streamEnded(), func() { cancel(errStreamEnded) })
	defer stop()
	resp, err := s.caller.Call(ctx, c.With(calls.Framework(s.frameworkID)))
	if resp != nil {
		resp.Close()
	}
	if err != nil && errors.Is(context.Cause(ctx), errStreamEnded) {
		return fmt.Errorf("%s: %w", c.Type, errStreamEnded)
	}
	return err
}

// events reads the stream into out until it ends, ctx ends, or no event (heartbeats included)
// has come for five heartbeat intervals: a half-open connection Mesos will not notice. The
// five intervals count time spent waiting on the wire only: while out is full (the event loop
// busy, say on a slow ZooKeeper) nothing is read, and that silence is ours, not the master's.
func (s *subscription) events(ctx context.Context, out chan<- scheduler.Event) error {
	defer s.end()
	got := make(chan struct{}, 1)
	var sending atomic.Bool
	watch, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		timer := time.NewTimer(5 * s.heartbeat)
		defer timer.Stop()
		for {
			select {
			case <-got:
				timer.Reset(5 * s.heartbeat)
			case <-timer.C:
				select {
				case <-got: // heard as the timer fired
					timer.Reset(5 * s.heartbeat)
					continue
				default:
				}
				if sending.Load() {
					timer.Reset(5 * s.heartbeat) // got comes when the send is done
					continue
				}
				s.resp.Close()
				return
			case <-watch.Done():
				s.resp.Close()
				return
			}
		}
	}()
	heard := func() {
		select {
		case got <- struct{}{}:
		default:
		}
	}
	for {
		var ev scheduler.Event
		if err := s.resp.Decode(&ev); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("Mesos event stream: %w", err)
		}
		heard()
		if ev.Type == scheduler.Event_ERROR {
			if strings.Contains(ev.Error.Message, "removed") {
				return errFrameworkRemoved
			}
			return fmt.Errorf("Mesos: %s", ev.Error.Message)
		}
		sending.Store(true)
		select {
		case out <- ev:
		case <-ctx.Done():
			return ctx.Err()
		}
		heard() // the wait on the wire starts now; before sending is cleared, so no gap
		sending.Store(false)
	}
}
