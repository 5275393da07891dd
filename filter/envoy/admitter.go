package envoy

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/filter"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/client"
	"github.com/llmesh/llmesh/scheduler/policy"
	"github.com/llmesh/llmesh/telemetry"
)

// Schedulers hands out the admitters of an Envoy process: one in-process
// scheduler per distinct pool/class setting, so that the many configs Envoy
// parses (listener updates, per worker) share capacity instead of each
// getting its own; or, when the mesh config names a scheduler_service, one
// client of that shared service per address. Its NewAdmitter method fits
// Env.NewAdmitter.
type Schedulers struct {
	// Clock drives the schedulers; nil means clock.Real.
	Clock clock.Clock

	mu      sync.Mutex
	local   map[string]*scheduler.Scheduler
	clients map[string]*client.Client
}

// NewAdmitter returns the admitter for mc, creating it on first use.
func (s *Schedulers) NewAdmitter(mc *config.Config) (scheduler.Admitter, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if svc := mc.SchedulerService; svc != nil {
		key := fmt.Sprintf("%s|%v", svc.Address, svc.FailOpen)
		if c := s.clients[key]; c != nil {
			return c, nil
		}
		c, err := client.New(svc.Address, client.Options{FailOpen: svc.FailOpen, Clock: s.Clock})
		if err != nil {
			return nil, fmt.Errorf("mesh.scheduler_service: %w", err)
		}
		if s.clients == nil {
			s.clients = map[string]*client.Client{}
		}
		s.clients[key] = c
		return c, nil
	}
	sc, err := scheduler.FromMesh(mc, policy.Lookup)
	if err != nil {
		return nil, fmt.Errorf("mesh.%w", err)
	}
	key := fingerprint(sc)
	if x := s.local[key]; x != nil {
		return x, nil
	}
	x, err := scheduler.New(sc, s.Clock)
	if err != nil {
		return nil, err
	}
	if s.local == nil {
		s.local = map[string]*scheduler.Scheduler{}
	}
	s.local[key] = x
	return x, nil
}

// Close closes every scheduler and client handed out.
func (s *Schedulers) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for k, x := range s.local {
		errs = append(errs, x.Close())
		delete(s.local, k)
	}
	for k, c := range s.clients {
		errs = append(errs, c.Close())
		delete(s.clients, k)
	}
	return errors.Join(errs...)
}

func fingerprint(sc scheduler.Config) string {
	b := fmt.Sprintf("default=%q;", sc.DefaultClass)
	for _, p := range sc.Pools {
		b += fmt.Sprintf("pool=%q,%d,%d,%s,%v,%v,%+v;", p.Name, p.MaxInflight, p.MaxInflightTokens,
			p.Policy.Name(), p.BatchWindow, p.Aging, p.Preemption)
	}
	for _, c := range sc.Classes {
		b += fmt.Sprintf("class=%+v;", c)
	}
	return b
}

// Telemetry hands out OpenTelemetry recorders, one provider per distinct
// telemetry setting. In Envoy only OTLP export makes sense (nothing serves
// a Prometheus endpoint inside Envoy; its own stats are the counters and
// gauges), so configs without an OTLP endpoint get no recorder. Its
// NewRecorder method fits Env.NewRecorder.
type Telemetry struct {
	mu        sync.Mutex
	providers map[config.Telemetry]*telemetry.Provider
}

// NewRecorder returns the recorder for mc's telemetry section; nil when
// OTLP export is off.
func (t *Telemetry) NewRecorder(mc *config.Config) (Recorder, error) {
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
			opts.Recorder.Classes = append(opts.Recorder.Classes, filter.Class{
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
	return telemetry.PointerRecorder{R: p.Recorder}, nil
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

var _ Recorder = telemetry.PointerRecorder{}
