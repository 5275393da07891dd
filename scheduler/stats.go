package scheduler

import "time"

// Counters are cumulative per-pool event counts since the machine started.
type Counters struct {
	Arrived   uint64 // accepted into a queue (requeues included)
	Requeued  uint64 // arrivals that were requeues after preemption
	Admitted  uint64
	Rejected  uint64 // ErrRejected: can never fit, unknown pool, max wait passed
	QueueFull uint64 // ErrQueueFull
	Cancelled uint64 // left the queue or ended by the caller
	Done      uint64
	Failed    uint64
	// Preempted counts preemption decisions; PreemptedDone counts leases
	// released with the Preempted outcome.
	Preempted     uint64
	PreemptedDone uint64
}

// PoolStats is a snapshot of one pool for metrics and admin pages.
type PoolStats struct {
	Name string
	// Limit is the current admission limit (MaxInflight or learned).
	Limit          int
	MaxInflight    int
	InFlight       int
	InFlightTokens int
	// PrefillTokens is the prompt tokens of in-flight requests without a
	// first token: what max_prefill_tokens bounds.
	PrefillTokens int
	// Preempting counts in-flight requests asked to stop but not released.
	Preempting int
	// Queued is the number of waiting requests per class name.
	Queued map[string]int
	// PrefillEstimate and TPOTEstimate are the moving averages used for TTFT
	// predictions; zero until observed.
	PrefillEstimate time.Duration
	TPOTEstimate    time.Duration
	// Endpoints are the pool's endpoints, in configuration order.
	Endpoints []EndpointStats
	// AbortUnhonoured is true once the pool's engine kept running a
	// preempted request (abort.go); the pool preempts nothing more.
	AbortUnhonoured bool
	// Bounds are the admission bounds and preemption budget in effect,
	// static or derived (tune.go).
	Bounds Bounds
	Counters
}

// Stats returns a snapshot of every pool, in configuration order.
func (m *Machine) Stats() []PoolStats {
	out := make([]PoolStats, 0, len(m.pools))
	for _, p := range m.pools {
		ps := PoolStats{
			Name:            p.Name,
			Limit:           p.limit,
			MaxInflight:     p.MaxInflight,
			InFlight:        p.inflight,
			InFlightTokens:  p.tokens,
			PrefillTokens:   p.prefilling,
			Preempting:      p.preempting,
			Queued:          map[string]int{},
			PrefillEstimate: p.prefill.value(),
			TPOTEstimate:    p.tpot.value(),
			Counters:        p.counts,
			Endpoints:       p.endpointStats(),
			AbortUnhonoured: p.abort.marked,
			Bounds:          m.bounds(p),
		}
		for ci := range p.queues {
			ps.Queued[m.classes[ci].Name] = p.queues[ci].live
		}
		out = append(out, ps)
	}
	return out
}
