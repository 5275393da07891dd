// Package process builds what one Envoy process hosting the llmesh filter
// shares between the many configs Envoy parses (listener updates, per
// worker): the scheduler set with its capacity watchers, the clients of a
// shared scheduler service, and the OTLP pipelines. It is the filter's
// process wiring, kept out of envoyfilter so that the adapter links
// neither gRPC clients, HTTP scrapers nor exporters of its own.
//
// Goroutines: the scheduler set's capacity watchers run from the first
// admitter handed out until Close; Schedulers' mu guards the set, the
// clients and the watchers' context. Telemetry's mu guards its providers.
package process

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/envoyfilter"
	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/client"
	"github.com/llmesh/llmesh/scheduler/pools"
	"github.com/llmesh/llmesh/telemetry"
)

// Env returns the filter's environment wired to s and t.
func Env(s *Schedulers, t *Telemetry) envoyfilter.Env {
	return envoyfilter.Env{NewAdmitter: s.NewAdmitter, NewRecorder: t.NewRecorder}
}

// Schedulers hands out the admitters of an Envoy process: the process's one
// scheduler set (scheduler/pools, as `llmesh scheduler serve` and the
// gateway run), with a capacity watcher for every pool and endpoint that
// names its engine's /metrics (capacity.metrics.url, metrics_url,
// capacity.metrics.url_template); or, when the mesh config names a
// scheduler_service, one client of that shared service per address. Its
// NewAdmitter method fits envoyfilter.Env.NewAdmitter.
//
// The set follows the configs Envoy hands the filter: a config with a mesh
// different from the running one is applied to it (pools.MeshSet.Apply),
// so an xDS update replaces only the pools whose settings changed, and
// their queues and leases carry over. Configs still in use with an older
// mesh share the set; a pool the newer mesh dropped refuses their requests
// as an unknown pool, as the gateway does after a reload.
type Schedulers struct {
	// Clock drives the schedulers and the watchers; nil means clock.Real.
	Clock clock.Clock

	mu      sync.Mutex
	set     *pools.MeshSet
	cancel  context.CancelFunc // stops the set's capacity watchers
	clients map[string]*client.Client
	closed  bool
}

// NewAdmitter returns the admitter for mc, creating it on first use.
func (s *Schedulers) NewAdmitter(mc *config.Config) (scheduler.Admitter, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, scheduler.ErrClosed
	}
	if svc := mc.SchedulerService; svc != nil {
		key := fmt.Sprintf("%s|%v|%v|%s|%+v|%s", svc.Address, svc.FailOpen, svc.Timeout, svc.Transport, svc.TLS, svc.TokenFile)
		if c := s.clients[key]; c != nil {
			return c, nil
		}
		tlsCfg, err := svc.ServiceTLS()
		if err != nil {
			return nil, fmt.Errorf("mesh.%w", err)
		}
		token, err := svc.ServiceToken()
		if err != nil {
			return nil, fmt.Errorf("mesh.%w", err)
		}
		c, err := client.New(svc.Address, client.Options{FailOpen: svc.FailOpen, Clock: s.Clock, Timeout: svc.Timeout, Transport: svc.Transport,
			ReportDelay: client.ReportDelayOf(svc.ReportDelay), TLS: tlsCfg, Token: token})
		if err != nil {
			return nil, fmt.Errorf("mesh.scheduler_service: %w", err)
		}
		if s.clients == nil {
			s.clients = map[string]*client.Client{}
		}
		s.clients[key] = c
		return c, nil
	}
	if s.set == nil {
		set, err := pools.NewMesh(mc, s.Clock)
		if err != nil {
			return nil, fmt.Errorf("mesh: %w", err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		if err := set.Start(ctx); err != nil {
			cancel()
			_ = set.Close()
			return nil, fmt.Errorf("mesh: %w", err)
		}
		s.set, s.cancel = set, cancel
		return set, nil
	}
	if !reflect.DeepEqual(s.set.Mesh().Source, mc.Source) {
		if _, err := s.set.Apply(mc); err != nil {
			return nil, fmt.Errorf("mesh: %w", err)
		}
	}
	return s.set, nil
}

// Stats returns the scheduler set's pools (none before the first in-process
// admitter).
func (s *Schedulers) Stats() []scheduler.PoolStats {
	s.mu.Lock()
	set := s.set
	s.mu.Unlock()
	if set == nil {
		return nil
	}
	return set.Stats()
}

// Close stops the capacity watchers and closes the scheduler set and every
// client handed out; later NewAdmitter calls fail.
func (s *Schedulers) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	var errs []error
	if s.set != nil {
		s.cancel()
		errs = append(errs, s.set.Close())
		s.set = nil
	}
	for k, c := range s.clients {
		errs = append(errs, c.Close())
		delete(s.clients, k)
	}
	return errors.Join(errs...)
}

// Telemetry hands out OpenTelemetry recorders, one provider per distinct
// telemetry setting. In Envoy only OTLP export makes sense (nothing serves
// a Prometheus endpoint inside Envoy; its own stats are the counters and
// gauges), so configs without an OTLP endpoint get no recorder. Its
// NewRecorder method fits envoyfilter.Env.NewRecorder.
type Telemetry struct {
	mu        sync.Mutex
	providers map[config.Telemetry]*telemetry.Provider
}

// NewRecorder returns the recorder for mc's telemetry section; nil when
// OTLP export is off.
func (t *Telemetry) NewRecorder(mc *config.Config) (envoyfilter.Recorder, error) {
	tc := mc.Telemetry
	if tc.OTLPEndpoint == "" {
		return nil, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	p := t.providers[tc]
	if p == nil {
		opts := telemetry.OptionsFromConfig(tc)
		opts.Prometheus = false
		// SLO violations are judged against the classes' objectives.
		for _, c := range mc.Classes {
			opts.Recorder.Classes = append(opts.Recorder.Classes, exchange.Class{
				Name: c.Name, Priority: c.Priority, TTFT: c.TTFT, TPOT: c.TPOT, Preemptible: c.Preemptible})
		}
		var err error
		if p, err = telemetry.New(context.Background(), opts); err != nil {
			return nil, fmt.Errorf("mesh.telemetry: %w", err)
		}
		if t.providers == nil {
			t.providers = map[config.Telemetry]*telemetry.Provider{}
		}
		t.providers[tc] = p
	}
	return telemetry.HostRecorder{R: p.Recorder}, nil
}

// Shutdown flushes and stops every provider.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var errs []error
	for k, p := range t.providers {
		errs = append(errs, p.Shutdown(ctx))
		delete(t.providers, k)
	}
	return errors.Join(errs...)
}

var _ envoyfilter.Recorder = telemetry.HostRecorder{}
