package scheduler

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/llmesh/llmesh/prefixindex"
)

// Config is the runtime form of the scheduler's configuration: every
// duration parsed, every policy resolved. Hosts build it from the mesh config
// (FromMesh) or directly in code and tests.
type Config struct {
	// Pools are the upstreams; at least one. The first is the default pool
	// for requests that name none.
	Pools []PoolConfig
	// Classes are the priority classes; at least one.
	Classes []ClassConfig
	// DefaultClass schedules requests whose class is empty or unknown;
	// empty means the first class.
	DefaultClass string
	// PrefillPredictor, when non-nil, predicts how long a request takes from
	// admission to its first token (its prefill) on a pool. When nil the
	// machine uses the moving average of admit→first-token times it observed
	// on that pool (zero until the first observation).
	PrefillPredictor func(pool string, promptTokens int) time.Duration
}

// PoolConfig is one pool's capacity and scheduling parameters.
type PoolConfig struct {
	// Name is unique among pools.
	Name string
	// MaxInflight is the number of admitted requests at once; at least 1.
	// It is the static capacity; SetLimit can lower or restore it at run
	// time (capacity learned from the engine).
	MaxInflight int
	// MaxInflightTokens bounds the sum of PromptTokens+MaxTokens in flight;
	// 0 means no token bound.
	MaxInflightTokens int
	// MaxPrefillTokens bounds the prompt tokens of admitted requests whose
	// first token has not been seen yet: the prefill work the engine still
	// owes. Engines run unfinished prefill chunks before anything new, so a
	// large backlog of low-priority prefill makes every step long and an
	// urgent request waits for it. Requests of the pool's most urgent class
	// priority are exempt (they are admitted past the bound, and their own
	// prefill counts against it); a request is admitted whatever its size
	// when nothing is in prefill, so a prompt larger than the bound still
	// runs. 0 means no bound.
	MaxPrefillTokens int
	// ReserveUrgent is the number of the pool's slots (of its current
	// limit) that only requests of the most urgent class priority may take:
	// requests of other classes are admitted only while fewer than
	// limit − ReserveUrgent are in flight, so an urgent request finds a
	// free slot instead of waiting for one or preempting. At most
	// limit − 1 slots are reserved, so other classes always keep one.
	// Aging does not open the reserve (it goes by class priority). 0 means
	// no reserve.
	ReserveUrgent int
	// StaticBounds keeps MaxPrefillTokens and ReserveUrgent as given, 0
	// meaning off. When false (the default) a pool whose policy preempts
	// derives each bound left at 0, and its preemption budget, from what
	// it observes (the urgent class's arrival rate, the other classes'
	// finish rate, the prefill time per prompt token; scheduler/tune.go).
	// Policies that do not preempt never derive bounds.
	StaticBounds bool
	// OverloadRelease is the factor of the overload release (tune.go): the
	// derived bounds give way while a less urgent request has waited more
	// than OverloadRelease × its class's TTFT objective. 0 means
	// DefaultOverloadRelease; negative means never.
	OverloadRelease float64
	// Policy orders waiting requests and says whether preemption is allowed;
	// required.
	Policy Policy
	// BatchWindow > 0 releases admissions together every window; 0 admits
	// continuously.
	BatchWindow time.Duration
	// Aging raises a waiting request's effective priority by one level per
	// Aging waited (LOWER value = more urgent, so the value drops); 0
	// disables aging. Policies that order by priority use it.
	Aging time.Duration
	// Preemption holds the guard rails used when Policy is a Preemptor.
	Preemption PreemptionConfig
	// Endpoints are the pool's engine replicas (endpoint.go); empty means
	// one unnamed endpoint with the pool's MaxInflight, the host's upstream.
	Endpoints []EndpointConfig
	// PrefixRouting makes the endpoint picker prefer an endpoint that was
	// sent the request's leading prompt blocks before (endpoint.go, rule
	// 3); the zero value leaves it off.
	PrefixRouting PrefixRouting
	// Ejection leaves an endpoint out of the picker for a while after
	// outcomes that show it failing (eject.go); the zero value is on with
	// its defaults.
	Ejection Ejection
}

// PrefixRouting weighs an endpoint's likely prefix-cache hit against its
// load when the picker chooses among endpoints with room.
type PrefixRouting struct {
	// Weight is what a full match is worth in load score: an endpoint that
	// holds every block of the request's prompt scores Weight lower, one
	// that holds half of them Weight/2 lower. The load score of an idle
	// endpoint is 0 and of a full one about 1 (plus its KV usage), so a
	// weight of 1 lets a full match outweigh one endpoint's whole slot
	// count. 0 (the default) turns prefix routing off.
	Weight float64
	// CapacityBlocks is how many prompt blocks the picker remembers per
	// endpoint (least recently used forgotten first): that engine's KV
	// cache in blocks, so that the picker forgets about when the engine
	// evicts. Required (at least 1) when Weight is set and Precise is
	// not; at most prefixindex.MaxCapacity. Under Precise it bounds each
	// endpoint's exact set instead (0: prefixindex.MaxCapacity).
	CapacityBlocks int
	// Precise makes the index exact (prefixindex.Exact): each endpoint's
	// set is what its engine reports holding, fed through
	// Machine.EndpointBlocks (engine KV-cache events, package kvevents),
	// and admissions teach it nothing. An endpoint whose engine reports
	// nothing never matches.
	Precise bool
}

// enabled reports whether the picker uses prefix matches.
func (r PrefixRouting) enabled() bool { return r.Weight > 0 }

// PreemptionConfig holds the preemption guard rails (docs/architecture.md, Scheduling semantics).
type PreemptionConfig struct {
	// MinLowerInflight: preemption for a waiting request happens only while
	// at least this many strictly-lower-priority requests are in flight and
	// not already being preempted; 0 behaves as 1.
	MinLowerInflight int
	// MinRunTime: requests admitted less than this long ago are not victims.
	MinRunTime time.Duration
	// MaxPerRequest: a request preempted this many times (counted by its
	// Request.ID across requeues) is no longer preemptible; 0 disables
	// preemption entirely.
	MaxPerRequest int
	// Target is the share of a class's TTFT objective that a waiting
	// request's predicted TTFT may reach before preemption starts: at 1
	// preemption protects the objective itself; lower values keep urgent
	// requests near their unloaded TTFT at the cost of more preemptions.
	// 0 means 1.
	Target float64
	// AbortProbe is how long a pool marked "abort not honoured" (abort.go)
	// waits before one probe preemption: honoured lifts the mark, not
	// honoured keeps it and doubles the wait (up to 16× AbortProbe). 0
	// means never: the mark stays until a restart or reload.
	AbortProbe time.Duration
}

// ClassConfig is a priority class.
type ClassConfig struct {
	// Name is unique among classes.
	Name string
	// Priority follows vLLM: a LOWER value is served first.
	Priority int
	// TTFT is the time-to-first-token objective, counted from arrival; 0
	// means none (such requests never cause preemption). EDF's deadline is
	// Arrival+TTFT.
	TTFT time.Duration
	// TPOT is the time-per-output-token objective; 0 means none. It is the
	// prior for decode speed before any was observed.
	TPOT time.Duration
	// Preemptible lets a preemptive policy stop this class's requests.
	Preemptible bool
	// MaxQueue bounds the class's waiting requests (requeued requests do not
	// count against it); 0 means no bound.
	MaxQueue int
	// MaxWait rejects requests waiting longer than this since arrival; 0
	// means no limit.
	MaxWait time.Duration
}

// Validate checks the config and names the offending field in each error;
// all problems are reported at once.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(c.Pools) == 0 {
		bad("pools: at least one pool is required")
	}
	if len(c.Classes) == 0 {
		bad("classes: at least one class is required")
	}
	seen := map[string]bool{}
	for i, p := range c.Pools {
		path := fmt.Sprintf("pools[%d]", i)
		switch {
		case p.Name == "":
			bad("%s.name: must not be empty", path)
		case seen[p.Name]:
			bad("%s.name: duplicate pool %q", path, p.Name)
		}
		seen[p.Name] = true
		validatePool(path, &p, bad)
	}
	seen = map[string]bool{}
	for i, cl := range c.Classes {
		path := fmt.Sprintf("classes[%d]", i)
		switch {
		case cl.Name == "":
			bad("%s.name: must not be empty", path)
		case seen[cl.Name]:
			bad("%s.name: duplicate class %q", path, cl.Name)
		}
		seen[cl.Name] = true
		validateClass(path, &cl, bad)
	}
	if c.DefaultClass != "" && !seen[c.DefaultClass] {
		bad("default_class: %q is not a class", c.DefaultClass)
	}
	return errors.Join(errs...)
}

// validatePool checks one pool's fields other than its name.
func validatePool(path string, p *PoolConfig, bad func(string, ...any)) {
	if p.MaxInflight < 1 {
		bad("%s.max_inflight: %d must be at least 1", path, p.MaxInflight)
	}
	if p.MaxInflightTokens < 0 {
		bad("%s.max_inflight_tokens: %d must not be negative", path, p.MaxInflightTokens)
	}
	if p.MaxPrefillTokens < 0 {
		bad("%s.max_prefill_tokens: %d must not be negative", path, p.MaxPrefillTokens)
	}
	if p.ReserveUrgent < 0 {
		bad("%s.reserve_urgent: %d must not be negative", path, p.ReserveUrgent)
	}
	if p.Policy == nil {
		bad("%s.policy: must be set", path)
	}
	if p.BatchWindow < 0 {
		bad("%s.batch_window: %v must not be negative", path, p.BatchWindow)
	}
	if p.Aging < 0 {
		bad("%s.aging: %v must not be negative", path, p.Aging)
	}
	validatePreemption(path+".preemption", p.Preemption, bad)
	validateEndpoints(path, p.Endpoints, bad)
	validateEjection(path, p.Ejection, bad)
	validatePrefixRouting(path+".prefix_routing", p.PrefixRouting, bad)
}

// validatePreemption checks a pool's preemption section at path.
func validatePreemption(path string, pr PreemptionConfig, bad func(string, ...any)) {
	if pr.MinLowerInflight < 0 {
		bad("%s.min_lower_inflight: %d must not be negative", path, pr.MinLowerInflight)
	}
	if pr.MinRunTime < 0 {
		bad("%s.min_run_time: %v must not be negative", path, pr.MinRunTime)
	}
	if t := pr.Target; t < 0 || t > 1 || t != t {
		bad("%s.target: %v must be in (0, 1] (0: default 1)", path, t)
	}
	if pr.AbortProbe < 0 {
		bad("%s.abort_probe: %v must not be negative (0: never)", path, pr.AbortProbe)
	}
	if pr.MaxPerRequest < 0 {
		bad("%s.max_per_request: %d must not be negative", path, pr.MaxPerRequest)
	}
}

// validatePrefixRouting checks a pool's prefix_routing section at path.
func validatePrefixRouting(path string, pr PrefixRouting, bad func(string, ...any)) {
	if w := pr.Weight; w < 0 || math.IsNaN(w) || math.IsInf(w, 0) {
		bad("%s.weight: %v must be a finite number, at least 0 (0: off)", path, w)
	}
	if c := pr.CapacityBlocks; c < 0 || c > prefixindex.MaxCapacity || (pr.Weight > 0 && c == 0 && !pr.Precise) {
		bad("%s.capacity_blocks: %d must be in [1, %d] when prefix routing is on", path, c, prefixindex.MaxCapacity)
	}
}

// validateClass checks one class's fields other than its name.
func validateClass(path string, cl *ClassConfig, bad func(string, ...any)) {
	if cl.TTFT < 0 {
		bad("%s.slo.ttft: %v must not be negative", path, cl.TTFT)
	}
	if cl.TPOT < 0 {
		bad("%s.slo.tpot: %v must not be negative", path, cl.TPOT)
	}
	if cl.MaxQueue < 0 {
		bad("%s.queue.max_length: %d must not be negative", path, cl.MaxQueue)
	}
	if cl.MaxWait < 0 {
		bad("%s.queue.max_wait: %v must not be negative", path, cl.MaxWait)
	}
}
