package scheduler

import (
	"errors"
	"fmt"

	"github.com/llmesh/llmesh/config"
)

// FromMesh compiles the scheduler part of a mesh config: every pool with its
// own scheduler settings, then one pool per experiment arm
// (config.Config.ArmPools: the experiment pool's capacity with the arm's
// merged scheduler settings, named config.ArmPoolName(pool, arm)), every
// class, the default class. Control gives each arm its own filter pool
// under that name and the gateway admits arm traffic under it too, so the
// shared service, the filter and the gateway agree on pool names; an arm
// pool the mesh already spells out (the filter's mesh does) is not added
// twice. lookup resolves policy names (scheduler/policy.Lookup; hosts call
// pools.Config, which passes it).
func FromMesh(c *config.Config, lookup func(name string) (Policy, error)) (Config, error) {
	var out Config
	var errs []error
	have := map[string]bool{}
	for i, p := range c.Pools {
		pc, err := poolFromMesh(p, lookup)
		if err != nil {
			errs = append(errs, fmt.Errorf("pools[%d].scheduler: %w", i, err))
			continue
		}
		have[p.Name] = true
		out.Pools = append(out.Pools, pc)
	}
	arms := map[*config.Experiment]int{}
	for i, e := range c.Experiments {
		arms[e] = i
	}
	for _, ap := range c.ArmPools() {
		if have[ap.Pool.Name] {
			continue
		}
		pc, err := poolFromMesh(ap.Pool, lookup)
		if err != nil {
			j := 0
			for k, a := range ap.Experiment.Arms {
				if a == ap.Arm {
					j = k
				}
			}
			errs = append(errs, fmt.Errorf("experiments[%d].arms[%d].scheduler: %w", arms[ap.Experiment], j, err))
			continue
		}
		have[ap.Pool.Name] = true
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

// poolFromMesh compiles one pool with its scheduler settings (an arm pool
// carries the arm's).
func poolFromMesh(p *config.Pool, lookup func(name string) (Policy, error)) (PoolConfig, error) {
	sc := p.Scheduler
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
		OverloadRelease:   sc.OverloadRelease,
		Ejection:          Ejection{Base: p.Ejection.Base, Max: p.Ejection.Max, Burst: p.Ejection.Failures},
		PrefixRouting:     PrefixRouting{Weight: p.PrefixWeight, CapacityBlocks: p.PrefixCapacityBlocks, Precise: p.PrefixKVEvents != nil},
		Preemption: PreemptionConfig{
			MinLowerInflight: sc.Preemption.MinLowerInflight,
			MinRunTime:       sc.Preemption.MinRunTime,
			MaxPerRequest:    sc.Preemption.MaxPerRequest,
			Target:           sc.Preemption.Target,
			AbortProbe:       sc.Preemption.AbortProbe,
		},
	}, nil
}
