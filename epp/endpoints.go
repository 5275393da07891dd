package epp

import (
	"fmt"
	"slices"
)

// SetEndpoints replaces the endpoints the picker picks from in pool (its
// fail-open and subset picks; the scheduler's own picks come from the
// scheduler's config, which the caller updates first). nil or empty
// leaves the pool with no ready endpoint: requests that need a pick from
// the picker get 503. It is safe to call while streams run; a stream sees
// the old or the new set.
func (s *Server) SetEndpoints(pool string, eps []string) error {
	pi := s.pools[pool]
	if pi == nil {
		return fmt.Errorf("epp: SetEndpoints: no pool %q", pool)
	}
	c := slices.Clone(eps)
	pi.live.Store(&c)
	return nil
}

// current is pi's endpoints: the last SetEndpoints, else the mesh's.
func (pi *poolInfo) current() []string {
	if p := pi.live.Load(); p != nil {
		return *p
	}
	return pi.endpoints
}
