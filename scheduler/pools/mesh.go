package pools

import (
	"context"
	"fmt"
	"sync"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/capacity"
	"github.com/llmesh/llmesh/scheduler/policy"
)

// Config is the scheduler config of a mesh config, the one place a mesh
// becomes scheduler config for every host: every pool with its own
// scheduler settings, plus one pool per experiment arm named
// config.ArmPoolName(pool, arm) (scheduler.FromMesh says how), with policy
// names resolved in the one registry (scheduler/policy).
func Config(c *config.Config) (scheduler.Config, error) {
	return scheduler.FromMesh(c, policy.Lookup)
}

// MeshSet is Set kept in step with a mesh config: Apply
// updates the schedulers and restarts the capacity watchers (pools with
// capacity.metrics.url) and the KV-cache event subscribers (pools with
// prefix_routing.kv_events) for the new config.
//
// Goroutines: Start runs one goroutine per capacity watcher and per
// subscribed endpoint; Apply stops
// them (and waits) before starting the new config's; Close stops them.
// mu guards the watcher group and the current config.
type MeshSet struct {
	*Set
	clk clock.Clock

	mu      sync.Mutex
	mesh    *config.Config
	ctx     context.Context // from Start; nil before
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	stopped bool
}

// NewMesh builds the schedulers for c on clk (nil: the real clock).
// Capacity watchers run only after Start.
func NewMesh(c *config.Config, clk clock.Clock) (*MeshSet, error) {
	sc, err := Config(c)
	if err != nil {
		return nil, err
	}
	if _, err := capacityWatchers(c, nil, clk); err != nil {
		return nil, err
	}
	s, err := New(sc, clk)
	if err != nil {
		return nil, err
	}
	return &MeshSet{Set: s, clk: clk, mesh: c}, nil
}

// Start runs the capacity watchers of the current config until ctx ends or
// Close. Calling it again is a no-op.
func (m *MeshSet) Start(ctx context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ctx != nil || m.stopped {
		return nil
	}
	m.ctx = ctx
	return m.startLocked()
}

func (m *MeshSet) startLocked() error {
	ws, err := capacityWatchers(m.mesh, m.Set, m.clk)
	if err != nil {
		return err
	}
	subs, err := kvSubscribers(m.mesh, m.Set)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(m.ctx)
	m.cancel = cancel
	for _, sub := range subs {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			_ = sub.Run(ctx) // endpoints were checked by config; ends with ctx
		}()
	}
	for _, w := range ws {
		m.wg.Add(1)
		go func() {
			defer m.wg.Done()
			_ = w.Run(ctx) // ends with ctx's error only
		}()
	}
	return nil
}

func (m *MeshSet) stopLocked() {
	if m.cancel != nil {
		m.cancel()
		m.wg.Wait()
		m.cancel = nil
	}
}

// Apply makes c the running config (see Set.Update for what happens
// to waiting and admitted requests) and returns the pools whose scheduler
// was (re)built. On error nothing changes.
func (m *MeshSet) Apply(c *config.Config) ([]string, error) {
	sc, err := Config(c)
	if err != nil {
		return nil, err
	}
	// Check the watchers' settings before touching anything.
	if _, err := capacityWatchers(c, nil, m.clk); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stopped {
		return nil, scheduler.ErrClosed
	}
	built, err := m.update(sc)
	if err != nil {
		return nil, err
	}
	m.mesh = c
	learned := learnedPools(c)
	for _, p := range sc.Pools {
		if !learned[p.Name] {
			m.ForgetLimit(p.Name)
		}
	}
	if m.ctx != nil {
		m.stopLocked()
		if err := m.startLocked(); err != nil {
			return built, err // checked above; cannot happen
		}
	}
	return built, nil
}

// Mesh returns the running mesh config.
func (m *MeshSet) Mesh() *config.Config {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mesh
}

// Close stops the capacity watchers (waiting for them) and closes the
// schedulers.
func (m *MeshSet) Close() error {
	m.mu.Lock()
	m.stopped = true
	m.stopLocked()
	m.mu.Unlock()
	return m.Set.Close()
}

// learnedPools names the pools whose limit a capacity watcher sets: every
// pool with an engine metrics URL and its experiment arms' pools.
func learnedPools(c *config.Config) map[string]bool {
	out := map[string]bool{}
	for _, p := range c.Pools {
		if p.Metrics == nil || p.Metrics.URL == "" {
			continue
		}
		out[p.Name] = true
		if e := p.Experiment; e != nil {
			for _, a := range e.Arms {
				out[config.ArmPoolName(p.Name, a.Name)] = true
			}
		}
	}
	return out
}

// capacityWatchers builds c's capacity watchers on s (nil: only to check
// their settings). A pool's learned limit also applies to its experiment
// arms' pools: they share the engine.
func capacityWatchers(c *config.Config, s *Set, clk clock.Clock) ([]*capacity.Watcher, error) {
	ws, err := capacity.FromMesh(c, armFanout{s: s, c: c}, clk, nil)
	if err != nil {
		return nil, fmt.Errorf("capacity: %w", err)
	}
	return ws, nil
}

// armFanout sets a learned limit on a pool and on its experiment's arm
// pools.
type armFanout struct {
	s *Set
	c *config.Config
}

func (f armFanout) SetLimit(pool string, n int) error {
	err := f.s.SetLimit(pool, n)
	if p := f.c.Pool(pool); p != nil && p.Experiment != nil {
		for _, a := range p.Experiment.Arms {
			if aerr := f.s.SetLimit(config.ArmPoolName(pool, a.Name), n); err == nil {
				err = aerr
			}
		}
	}
	return err
}

func (f armFanout) SetEndpointLimit(pool, endpoint string, n int) error {
	return f.each(pool, func(p string) error { return f.s.SetEndpointLimit(p, endpoint, n) })
}

func (f armFanout) SetEndpointHealth(pool, endpoint string, healthy bool) error {
	return f.each(pool, func(p string) error { return f.s.SetEndpointHealth(p, endpoint, healthy) })
}

func (f armFanout) SetEndpointLoad(pool, endpoint string, l scheduler.EndpointLoad) error {
	return f.each(pool, func(p string) error { return f.s.SetEndpointLoad(p, endpoint, l) })
}

// each calls set on pool and on its experiment's arm pools (they share the
// engines); the first error wins.
func (f armFanout) each(pool string, set func(pool string) error) error {
	err := set(pool)
	if p := f.c.Pool(pool); p != nil && p.Experiment != nil {
		for _, a := range p.Experiment.Arms {
			if aerr := set(config.ArmPoolName(pool, a.Name)); err == nil {
				err = aerr
			}
		}
	}
	return err
}
