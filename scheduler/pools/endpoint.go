package pools

import (
	"fmt"

	"github.com/llmesh/llmesh/scheduler"
)

// Endpoint state (limit learned from the engine, health, load report) is
// set on the pool's current scheduler. A scheduler that replaces it after
// a config change starts from the endpoints' static settings; the capacity
// watchers set the learned state again at their next scrape.

// SetEndpointLimit sets one endpoint's learned limit (see
// scheduler.Machine.SetEndpointLimit).
func (s *Set) SetEndpointLimit(pool, endpoint string, n int) error {
	return s.onCurrent(pool, func(sc *scheduler.Scheduler) error { return sc.SetEndpointLimit(pool, endpoint, n) })
}

// SetEndpointHealth drains an endpoint or brings it back (see
// scheduler.Machine.SetEndpointHealth).
func (s *Set) SetEndpointHealth(pool, endpoint string, healthy bool) error {
	return s.onCurrent(pool, func(sc *scheduler.Scheduler) error { return sc.SetEndpointHealth(pool, endpoint, healthy) })
}

// SetEndpointLoad records an endpoint's own load report (see
// scheduler.Machine.SetEndpointLoad).
func (s *Set) SetEndpointLoad(pool, endpoint string, l scheduler.EndpointLoad) error {
	return s.onCurrent(pool, func(sc *scheduler.Scheduler) error { return sc.SetEndpointLoad(pool, endpoint, l) })
}

func (s *Set) onCurrent(pool string, f func(*scheduler.Scheduler) error) error {
	s.mu.Lock()
	sl := s.slots[pool]
	if sl == nil || sl.cur == nil {
		s.mu.Unlock()
		return fmt.Errorf("scheduler: unknown pool %q", pool)
	}
	sc := sl.cur.sched
	s.mu.Unlock()
	// Outside mu: the scheduler takes its own lock and may hand out
	// admissions, whose trackedLease bookkeeping takes mu.
	return f(sc)
}
