package envoy

import (
	"errors"
	"fmt"
	"sync"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy"
)

// SchedulerConfig maps the mesh config's pools and classes to the
// in-process scheduler's config. Errors name the field path.
func SchedulerConfig(mc *config.Config) (scheduler.Config, error) {
	var sc scheduler.Config
	var errs []error
	for i, p := range mc.Pools {
		pol, err := policy.Lookup(p.Scheduler.Policy)
		if err != nil {
			errs = append(errs, fmt.Errorf("mesh.pools[%d].scheduler.policy: %w", i, err))
			continue
		}
		sc.Pools = append(sc.Pools, scheduler.PoolConfig{
			Name:              p.Name,
			MaxInflight:       p.MaxInflight,
			MaxInflightTokens: p.MaxInflightTokens,
			Policy:            pol,
			BatchWindow:       p.Scheduler.BatchWindow,
			Aging:             p.Scheduler.Aging,
			Preemption: scheduler.PreemptionConfig{
				MinLowerInflight: p.Scheduler.Preemption.MinLowerInflight,
				MinRunTime:       p.Scheduler.Preemption.MinRunTime,
				MaxPerRequest:    p.Scheduler.Preemption.MaxPerRequest,
			},
		})
	}
	for _, c := range mc.Classes {
		sc.Classes = append(sc.Classes, scheduler.ClassConfig{
			Name: c.Name, Priority: c.Priority, TTFT: c.TTFT, TPOT: c.TPOT,
			Preemptible: c.Preemptible, MaxQueue: c.MaxQueue, MaxWait: c.MaxWait,
		})
	}
	if mc.DefaultClass != nil {
		sc.DefaultClass = mc.DefaultClass.Name
	}
	if len(errs) > 0 {
		return sc, errors.Join(errs...)
	}
	return sc, sc.Validate()
}

// Schedulers hands out one in-process scheduler per distinct scheduling
// config, so that the many configs Envoy parses (one per listener update
// and worker) share capacity instead of each getting its own. Its
// NewAdmitter method fits Env.NewAdmitter.
type Schedulers struct {
	// Clock drives the schedulers; nil means clock.Real.
	Clock clock.Clock

	mu sync.Mutex
	by map[string]*scheduler.Scheduler
}

// NewAdmitter returns the scheduler for mc's pools and classes, creating
// it on first use.
func (s *Schedulers) NewAdmitter(mc *config.Config) (scheduler.Admitter, error) {
	sc, err := SchedulerConfig(mc)
	if err != nil {
		return nil, err
	}
	key := fingerprint(sc)
	s.mu.Lock()
	defer s.mu.Unlock()
	if x := s.by[key]; x != nil {
		return x, nil
	}
	x, err := scheduler.New(sc, s.Clock)
	if err != nil {
		return nil, err
	}
	if s.by == nil {
		s.by = map[string]*scheduler.Scheduler{}
	}
	s.by[key] = x
	return x, nil
}

// Close closes every scheduler handed out.
func (s *Schedulers) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	for k, x := range s.by {
		errs = append(errs, x.Close())
		delete(s.by, k)
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
