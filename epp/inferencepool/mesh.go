package inferencepool

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/scheduler/pools"
)

// Picker is the part of the picker (epp.Server) that takes a pool's
// endpoint set.
type Picker interface {
	SetEndpoints(pool string, eps []string) error
}

// Mesh keeps one pool of a running mesh in step with a discovered endpoint
// set: Set rewrites the pool's endpoints in the mesh's source, compiles it
// and applies it to the schedulers (pools.MeshSet.Apply, the path of a mesh
// reload: an unchanged pool keeps its scheduler, a changed one is rebuilt
// with its waiting and admitted requests moved), then hands the set to the
// picker. The pool's other settings (capacity, scheduler, metrics
// url_template) stay the mesh file's.
//
// An empty set cannot be compiled (a pool needs an endpoint), so it drains
// the scheduler's current endpoints instead: nothing new is admitted and
// requests queue until pods are ready again or their class's max_wait ends.
type Mesh struct {
	Base   *config.Config // the mesh as loaded; its Source is rewritten
	Pool   string         // the mesh pool that the InferencePool feeds
	Sched  *pools.MeshSet
	Picker Picker // nil: only the scheduler is updated

	mu      sync.Mutex
	cur     *config.Config // last applied; Base before the first Set
	drained bool
}

// Check reports whether m.Pool is a pool of m.Base.
func (m *Mesh) Check() error {
	if m.Base == nil || m.Sched == nil {
		return errors.New("inferencepool: Mesh: Base and Sched are required")
	}
	if m.Base.Pool(m.Pool) == nil {
		return fmt.Errorf("inferencepool: no pool %q in the mesh config", m.Pool)
	}
	return nil
}

// Set makes eps the pool's endpoints. On error (the rewritten mesh does
// not compile, for example a kv_events map naming the file's endpoints)
// the running set is kept.
func (m *Mesh) Set(eps []string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.cur == nil {
		m.cur = m.Base
	}
	if len(eps) == 0 {
		if m.Picker != nil {
			if err := m.Picker.SetEndpoints(m.Pool, nil); err != nil {
				return err
			}
		}
		for _, e := range m.cur.Pool(m.Pool).Endpoints {
			_ = m.Sched.SetEndpointHealth(m.Pool, e.Address(), false) // the pool exists; Check
		}
		m.drained = true
		return nil
	}
	next, err := m.withEndpoints(eps)
	if err != nil {
		return err
	}
	if _, err := m.Sched.Apply(next); err != nil {
		return fmt.Errorf("inferencepool: apply endpoints to pool %q: %w", m.Pool, err)
	}
	if m.drained {
		// An unchanged set kept its scheduler and with it the drain.
		for _, e := range eps {
			_ = m.Sched.SetEndpointHealth(m.Pool, e, true)
		}
		m.drained = false
	}
	m.cur = next
	if m.Picker != nil {
		return m.Picker.SetEndpoints(m.Pool, eps)
	}
	return nil
}

// withEndpoints is Base with the pool's endpoints replaced by eps.
func (m *Mesh) withEndpoints(eps []string) (*config.Config, error) {
	src := *m.Base.Source
	src.Pools = slices.Clone(src.Pools)
	found := false
	for i := range src.Pools {
		if src.Pools[i].Name != m.Pool {
			continue
		}
		found = true
		src.Pools[i].Endpoints = make([]config.EndpointSpec, len(eps))
		for j, e := range eps {
			src.Pools[i].Endpoints[j] = config.EndpointSpec{Address: e}
		}
	}
	if !found {
		return nil, fmt.Errorf("inferencepool: no pool %q in the mesh config", m.Pool)
	}
	c, err := config.Compile(&src)
	if err != nil {
		return nil, fmt.Errorf("inferencepool: pool %q with the discovered endpoints: %w", m.Pool, err)
	}
	return c, nil
}
