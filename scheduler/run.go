// Package scheduler is ejcloud's Mesos framework. Run owns every goroutine of a scheduler
// instance: the HTTP server and the election loop, and, while this instance leads, the
// leader's work.
//
//	Run → state.Connect → HTTP server (/healthz, /readyz; standbys 307 to the leader)
//	    → loop: state.Campaign → lead until Leadership.Lost → campaign again
package scheduler

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	mesos "github.com/mesos/mesos-go/api/v1/lib"
	"github.com/sirupsen/logrus"

	"github.com/ejcloud/ejcloud/console"
	"github.com/ejcloud/ejcloud/state"
)

// shutdownGrace bounds the HTTP server's part of a shutdown; the event trace's writing gets
// traceCloseGrace after it. Together under the 10 s a container runtime or Marathon
// (taskKillGracePeriodSeconds) gives before its SIGKILL.
const shutdownGrace = 4 * time.Second

// Run runs a scheduler instance until ctx ends, then stops cleanly and returns nil. A fatal
// start-up error (ZooKeeper unreachable, address in use) is returned as one line naming it.
func Run(ctx context.Context, cfg Config, log logrus.FieldLogger) error {
	return run(ctx, cfg, log, hooks{})
}

// hooks are what tests and benchmarks put in place of, or beside, the real thing. The
// production path passes none.
type hooks struct {
	// mesos replaces the Mesos master (default: its v1 HTTP scheduler API at cfg.MesosURL).
	mesos mesosAPI
	// started, if set, is given the instance once it serves.
	started func(*instance)
	// updateSeen, if set, is given every status update as the leader receives it, before it
	// is recorded (the latency benchmarks use it).
	updateSeen func(mesos.TaskStatus)
	// confirmed, if set, is told the outcome of every confirmation of the leadership (before
	// a subscription or a kill).
	confirmed func(error)
	// packed, if set, is called when an offer cycle has placed its work, before its
	// write-ahead.
	packed func()
	// writtenAhead, if set, is called after each write-ahead of an offer cycle, before its
	// ACCEPTs.
	writtenAhead func()
}

func run(ctx context.Context, cfg Config, log logrus.FieldLogger, h hooks) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	for _, w := range cfg.Warnings() {
		log.Warn(w)
	}
	timeout := cfg.ZKConnectTimeout
	if timeout == 0 {
		timeout = 15 * time.Second
	}
	connectCtx, cancel := context.WithTimeout(ctx, timeout)
	met := newMetrics()
	store, err := state.Connect(connectCtx, state.Config{
		Servers: cfg.ZKServers, Namespace: cfg.ZKNamespace, Digest: cfg.ZKDigest, SessionTimeout: cfg.ZKSessionTimeout,
		JuteMaxBuffer: cfg.ZKJuteMaxBuffer, QueueSizeLimit: cfg.JobStateQueueSize, Logger: log, ObserveOp: met.observeZK,
	})
	cancel()
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer store.Close()

	trace, err := openTracer(ctx, cfg, log)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer trace.close() // after the leader's work has stopped: every event it queued is written

	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return fmt.Errorf("cannot listen on %s: %w", cfg.HTTPAddr, err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln = cfg.serve(ln, log)
	if cfg.MesosStartupTimeout == 0 {
		cfg.MesosStartupTimeout = time.Minute
	}
	if h.mesos == nil {
		m := httpMesos{cfg: &cfg, log: log}
		if cfg.mesosZK != nil {
			// Every instance follows the masters, standbys too: a new leader subscribes at once.
			connectCtx, cancel := context.WithTimeout(ctx, timeout)
			m.masters, err = state.DetectMesosMaster(connectCtx, *cfg.mesosZK, cfg.ZKSessionTimeout, log)
			cancel()
			if err != nil {
				ln.Close()
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("--mesos-url: %w", err)
			}
			defer m.masters.Close()
		}
		h.mesos = m
	}
	con, err := console.New(console.Config{Root: cfg.AuthRoot, Guest: cfg.AuthGuest})
	if err != nil {
		return err
	}
	s := &instance{cfg: cfg, log: log, store: store, advertised: net.JoinHostPort(cfg.Hostname, strconv.Itoa(port)), metrics: met, hooks: h, trace: trace, console: con}
	srv := newHTTPServer(s.routes(), httpTimeouts)

	ctx, cancel = context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	var fatal error
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.WithError(err).Error("HTTP server stopped")
		}
	}()
	go func() {
		defer wg.Done()
		if fatal = s.elect(ctx); fatal != nil {
			cancel()
		}
	}()
	if h.started != nil {
		h.started(s)
	}
	log.WithFields(logrus.Fields{"http": cfg.scheme() + "://" + ln.Addr().String(), "zk": strings.Join(cfg.ZKServers, ","),
		"namespace": cfg.ZKNamespace}).Info("scheduler started")

	<-ctx.Done()
	shutdownCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	srv.Shutdown(shutdownCtx)
	wg.Wait()
	if fatal != nil {
		return fatal
	}
	log.Info("scheduler stopped")
	return nil
}

// instance is one scheduler process.
type instance struct {
	cfg        Config
	log        logrus.FieldLogger
	store      *state.Store
	advertised string // host:port of this instance's HTTP server, as other instances reach it

	mu         sync.Mutex // guards leader, subscribed and ld
	leader     bool
	subscribed bool
	ld         *leader      // the leader's state while this instance leads
	api        http.Handler // the REST API, bound to the leader's fenced store
	console    http.Handler // the web console, served by every instance

	metrics *metrics
	hooks   hooks
	trace   *tracer // nil without --event-trace-db
	// heard holds the UUIDs of the status updates recorded last, over every term of this
	// instance: one Mesos sends again (its acknowledgement lost, its agent restarted) is
	// counted and traced once.
	heard recentSet
}

func (s *instance) status() (leader, subscribed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leader, s.subscribed
}

func (s *instance) setLeader(v bool) {
	s.mu.Lock()
	s.leader = v
	if !v {
		s.subscribed = false
	}
	s.mu.Unlock()
}

// elect campaigns, leads while elected, and campaigns again after losing leadership, until
// ctx ends or the leader's work fails fatally.
func (s *instance) elect(ctx context.Context) error {
	for ctx.Err() == nil {
		l, err := s.store.Campaign(ctx, s.advertised)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			s.log.WithError(err).Error("election failed; retrying")
			select {
			case <-time.After(time.Second):
			case <-ctx.Done():
			}
			continue
		}
		s.log.WithField("node", l.Path()).Info("elected leader")
		s.metrics.leaderChanges.Inc()
		s.setLeader(true)
		err = s.lead(ctx, l)
		s.setLeader(false)
		if err != nil || ctx.Err() != nil {
			l.Resign(context.Background())
			return err
		}
		s.log.WithError(l.Err()).Warn("lost leadership; stopped leader work, rejoining the election")
	}
	return nil
}
