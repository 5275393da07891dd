package scheduler

import (
	"errors"
	"fmt"

	"github.com/llmesh/llmesh/config"
)

// FromMesh compiles the scheduler part of a mesh config: every pool with its
// own scheduler settings, every class, the default class. lookup resolves
// policy names (scheduler/policy.Lookup; policy.FromMesh passes it).
func FromMesh(c *config.Config, lookup func(name string) (Policy, error)) (Config, error) {
	var out Config
	var errs []error
	for i, p := range c.Pools {
		pc, err := PoolFromMesh(p, p.Scheduler, lookup)
		if err != nil {
			errs = append(errs, fmt.Errorf("pools[%d].scheduler: %w", i, err))
			continue
		}
		out.Pools = append(out.Pools, pc)
	}
	for _, cl := range c.Classes {
		out.Classes = append(out.Classes, ClassConfig{
			Name:        cl.Name,
			Priority:    cl.Priority,
			TTFT:        cl.TTFT,
			TPOT:        cl.TPOT,
			Preemptible: cl.Preemptible,
			MaxQueue:    cl.MaxQueue,
			MaxWait:     cl.MaxWait,
		})
	}
	if c.DefaultClass != nil {
		out.DefaultClass = c.DefaultClass.Name
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	return out, out.Validate()
}

// PoolFromMesh compiles one pool with scheduler settings sc: the pool's own
// (p.Scheduler) or an experiment arm's merged ones (Arm.Scheduler), so a
// host can run one scheduler per arm.
func PoolFromMesh(p *config.Pool, sc config.SchedulerConfig, lookup func(name string) (Policy, error)) (PoolConfig, error) {
	pol, err := lookup(sc.Policy)
	if err != nil {
		return PoolConfig{}, fmt.Errorf("policy: %w", err)
	}
	var eps []EndpointConfig
	for _, e := range p.Endpoints {
		eps = append(eps, EndpointConfig{Name: e.Address(), MaxInflight: e.MaxInflight})
	}
	return PoolConfig{
		Endpoints:         eps,
		Name:              p.Name,
		MaxInflight:       p.MaxInflight,
		MaxInflightTokens: p.MaxInflightTokens,
		Policy:            pol,
		BatchWindow:       sc.BatchWindow,
		Aging:             sc.Aging,
		MaxPrefillTokens:  sc.MaxPrefillTokens,
		ReserveUrgent:     sc.ReserveUrgent,
		StaticBounds:      sc.StaticBounds,
		Preemption: PreemptionConfig{
			MinLowerInflight: sc.Preemption.MinLowerInflight,
			MinRunTime:       sc.Preemption.MinRunTime,
			MaxPerRequest:    sc.Preemption.MaxPerRequest,
			Target:           sc.Preemption.Target,
			AbortProbe:       sc.Preemption.AbortProbe,
		},
	}, nil
}

// WithArmPools returns sc with one more pool per experiment arm of c, named
// config.ArmPoolName(pool, arm): the experiment pool's capacity with the
// arm's merged scheduler settings. The shared scheduler service needs them
// because control gives each arm its own pool in the Envoy filter, whose
// admissions then name the arm pool. Pools sc already has (a mesh that
// spells the arm pools out, as the filter's does) are left as they are.
func WithArmPools(sc Config, c *config.Config, lookup func(name string) (Policy, error)) (Config, error) {
	have := map[string]bool{}
	for _, p := range sc.Pools {
		have[p.Name] = true
	}
	pools := append([]PoolConfig(nil), sc.Pools...)
	var errs []error
	for i, e := range c.Experiments {
		for j, a := range e.Arms {
			name := config.ArmPoolName(e.Pool.Name, a.Name)
			if have[name] {
				continue
			}
			pc, err := PoolFromMesh(e.Pool, a.Scheduler, lookup)
			if err != nil {
				errs = append(errs, fmt.Errorf("experiments[%d].arms[%d].scheduler: %w", i, j, err))
				continue
			}
			pc.Name = name
			have[name] = true
			pools = append(pools, pc)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, err
	}
	sc.Pools = pools
	return sc, sc.Validate()
}
