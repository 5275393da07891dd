package simulate

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/sim"
)

// Predictors of admit→first-token time for the preemptive policy.
const (
	// PredictObserved is what the hosts do: the scheduler's moving average
	// of observed admit→first-token times.
	PredictObserved = "observed"
	// PredictTiming asks the engine's timing model for the prompt's prefill
	// steps next to the engine's current decode batch.
	PredictTiming = "timing"
)

// Defaults mirror the pool that llmesh demo configures in front of the
// simulated engine, so that virtual time evaluates what the hosts run.
const (
	DefaultMaxInflight     = 64
	DefaultMetricsInterval = 250 * time.Millisecond
	DefaultAging           = 60 * time.Second
	DefaultMinRunTime      = 20 * time.Millisecond
	DefaultMaxPerRequest   = 2
	// DefaultPrefixWeight lets a full prefix match outweigh one engine's
	// whole slot count of load (scheduler.PrefixRouting).
	DefaultPrefixWeight = 1.0
)

// Options configure a simulation. The zero value is the demo's pool in front
// of the workload's engine profile with sim's default engine limits.
type Options struct {
	// Profile names the engine profile; empty means the workload's profile,
	// else sim.DefaultProfile.
	Profile string
	// Engine sizes the engine model; zero fields take sim's defaults
	// (max_num_seqs 256, max_num_batched_tokens 8192, the profile's KV
	// cache, FCFS).
	Engine sim.Config
	// MaxInflight is the pool's static capacity (max_inflight); 0 means
	// DefaultMaxInflight.
	MaxInflight int
	// MaxInflightTokens bounds prompt+max tokens in flight; 0 means none.
	MaxInflightTokens int
	// MaxPrefillTokens bounds the prompt tokens admitted but not yet
	// prefilled (first token not seen) of every class but the most urgent
	// (the pool's max_prefill_tokens); 0 means none. The saturation
	// measurement runs without it, so load factors mean the same with and
	// without the bound.
	MaxPrefillTokens int
	// ReserveUrgent is the number of slots held for the most urgent class
	// (the pool's reserve_urgent); 0 means none. Like MaxPrefillTokens it
	// is not applied when measuring saturation.
	ReserveUrgent int
	// StaticBounds keeps MaxPrefillTokens and ReserveUrgent as given (0:
	// off) for preemptive policies too; by default those derive each bound
	// left at 0 from what the pool observes (scheduler.PoolConfig.StaticBounds).
	StaticBounds bool
	// OverloadRelease is the pool's overload release factor
	// (scheduler.PoolConfig.OverloadRelease): 0 means the default, negative
	// never.
	OverloadRelease float64
	// LateHandoff makes the engine start its next step as soon as a step's
	// tokens are out, as a real engine loop does, so that what the host
	// admits in reaction to them (a first token freeing prefill budget, a
	// finish freeing a slot) reaches the step after. By default such
	// admissions join the very next step, which is optimistic when work is
	// handed over one request at a time (a small MaxPrefillTokens).
	LateHandoff bool
	// MetricsInterval is how often the pool's limit is re-derived from the
	// engine's load (running, waiting, KV usage) with scheduler/capacity's
	// rule, as the hosts do from the engine's /metrics; 0 means
	// DefaultMetricsInterval, negative keeps the static capacity.
	MetricsInterval time.Duration
	// Aging is the scheduler's aging step; 0 means DefaultAging, negative
	// disables aging.
	Aging time.Duration
	// Preemption holds the guard rails of preemptive policies. When
	// MaxPerRequest is 0 the demo's rails are used (min_lower_inflight 1,
	// min_run_time DefaultMinRunTime, max_per_request
	// DefaultMaxPerRequest), keeping Target. Target 0 means 1.
	Preemption scheduler.PreemptionConfig
	// Predictor is PredictObserved (default) or PredictTiming.
	Predictor string
	// Duration, when positive, replaces the workload's measured duration
	// (arrival processes other than trace).
	Duration time.Duration
	// Seed, when non-zero, replaces the workload's seed.
	Seed int64
	// Parallel bounds the runs (policy and load pairs) that execute at
	// once; 0: two per processor, and fewer where runs of a fleet far past
	// its saturation would together keep more than runBudget in waiting
	// requests (runFootprint: about 560 MB per policy at 5,000 req/s on 64
	// engines for 10 minutes, so those run one at a time). Results do not
	// depend on it.
	Parallel int
	// SkipFloor leaves out the floor run of each load (Result.Floor stays
	// empty, the comparison's floor ratio 0): one run fewer per load, for
	// callers that only compare policies.
	SkipFloor bool
	// SaturationRequests is the backlog used to measure saturation; 0
	// means 2000.
	SaturationRequests int
	// Engines is the number of engine replicas behind the pool (fleet.go);
	// 0 means 1. Every pool option above is per engine: a fleet's pool has
	// Engines times MaxInflight, MaxInflightTokens, MaxPrefillTokens and
	// ReserveUrgent, and load 1.0 is Engines times one engine's saturation.
	Engines int
	// Proxies is the number of hosts in front of the engines; 0 means 1.
	// Requests are spread over them round-robin.
	Proxies int
	// Schedulers is the fleet's scheduler layout: SchedulersShared (empty:
	// the default), one machine for every proxy, or SchedulersPerProxy,
	// one per proxy with its share of every bound (layout.go).
	Schedulers string
	// Routing is RoutingEndpointAware (empty: the default), RoutingPool,
	// RoutingPrefixAware or RoutingPrefixPrecise.
	Routing string
	// PrefixWeight is the prefix rule's weight under RoutingPrefixAware
	// and RoutingPrefixPrecise
	// (scheduler.PrefixRouting.Weight: what a full match is worth in load
	// score); 0 means DefaultPrefixWeight. Other routings ignore it.
	PrefixWeight float64
	// Hop is the one-way network delay of every message between a proxy
	// and the scheduler and between a proxy and an engine; 0 means none.
	Hop time.Duration
	// RunPastTimeout lets every request run to its end, reporting one
	// that took longer than the workload's timeout as a timeout after the
	// fact. By default the simulated client gives up at the timeout, as
	// the harness's client does (bench/runner puts each request under the
	// workload's timeout): a waiting request is withdrawn from the
	// scheduler's queue, a running one is cancelled on its engine and its
	// lease released as cancelled.
	RunPastTimeout bool
	// Records, when set, receives every request's record as one JSON
	// object per line (the format result.ReadRecords reads), each run's
	// in item order with Run set to "POLICY/load=LOAD"; runs write in
	// parallel, whole lines at a time. Nil: no record is kept beyond the
	// report.
	Records *RecordWriter
}

// fleet reports whether o asks for more than today's single host in
// front of a single engine. Both run fleet.go's event loop: a fleet with
// its messages and hops (newFleet), or the single host, a fleet of one
// that acts at once (newLoop).
func (o Options) fleet() bool { return o.Engines > 1 || o.Proxies > 1 || o.Hop > 0 }

// maxLoad bounds load factors so that a typo cannot ask for a simulation
// that never ends.
const maxLoad = 100

func (o Options) withDefaults(w *workload.Workload) (Options, error) {
	var errs []error
	if o.Profile == "" {
		o.Profile = w.Spec.Profile
	}
	if o.Profile == "" {
		o.Profile = sim.DefaultProfile
	}
	if o.MaxInflight == 0 {
		o.MaxInflight = DefaultMaxInflight
	}
	if o.MaxInflight < 0 {
		errs = append(errs, fmt.Errorf("max_inflight: %d must be positive", o.MaxInflight))
	}
	if o.Parallel < 0 {
		errs = append(errs, fmt.Errorf("parallel: %d must not be negative (0: two runs per processor)", o.Parallel))
	}
	if o.MaxInflightTokens < 0 {
		errs = append(errs, fmt.Errorf("max_inflight_tokens: %d must not be negative", o.MaxInflightTokens))
	}
	if o.MaxPrefillTokens < 0 {
		errs = append(errs, fmt.Errorf("max_prefill_tokens: %d must not be negative", o.MaxPrefillTokens))
	}
	if o.ReserveUrgent < 0 || (o.MaxInflight > 0 && o.ReserveUrgent >= o.MaxInflight) {
		errs = append(errs, fmt.Errorf("reserve_urgent: %d must be in [0, max_inflight)", o.ReserveUrgent))
	}
	if o.MetricsInterval == 0 {
		o.MetricsInterval = DefaultMetricsInterval
	}
	if o.MetricsInterval > 0 && o.MetricsInterval < time.Millisecond {
		errs = append(errs, fmt.Errorf("metrics_interval: %v must be at least 1ms (or negative for static capacity)", o.MetricsInterval))
	}
	if o.Aging == 0 {
		o.Aging = DefaultAging
	}
	if o.Aging < 0 {
		o.Aging = 0
	}
	if o.Preemption.MaxPerRequest == 0 {
		t := o.Preemption.Target
		o.Preemption = scheduler.PreemptionConfig{MinLowerInflight: 1, MinRunTime: DefaultMinRunTime, MaxPerRequest: DefaultMaxPerRequest, Target: t}
	}
	if t := o.Preemption.Target; t < 0 || t > 1 || t != t {
		errs = append(errs, fmt.Errorf("preemption.target: %v must be in (0, 1]", t))
	}
	switch o.Predictor {
	case "":
		o.Predictor = PredictObserved
	case PredictObserved, PredictTiming:
	default:
		errs = append(errs, fmt.Errorf("predictor: %q must be %s or %s", o.Predictor, PredictObserved, PredictTiming))
	}
	if o.Duration < 0 {
		errs = append(errs, fmt.Errorf("duration: %v must not be negative", o.Duration))
	}
	if o.SaturationRequests == 0 {
		o.SaturationRequests = 2000
	}
	if o.SaturationRequests < 100 {
		errs = append(errs, fmt.Errorf("saturation_requests: %d must be at least 100", o.SaturationRequests))
	}
	if o.Engines == 0 {
		o.Engines = 1
	}
	if o.Engines < 0 || o.Engines > maxEngines {
		errs = append(errs, fmt.Errorf("engines: %d must be in [1, %d]", o.Engines, maxEngines))
	}
	if o.Proxies == 0 {
		o.Proxies = 1
	}
	if o.Proxies < 0 || o.Proxies > maxEngines {
		errs = append(errs, fmt.Errorf("proxies: %d must be in [1, %d]", o.Proxies, maxEngines))
	}
	switch o.Routing {
	case "":
		o.Routing = RoutingEndpointAware
	case RoutingEndpointAware, RoutingPool, RoutingPrefixAware, RoutingPrefixPrecise:
	default:
		errs = append(errs, fmt.Errorf("routing: %q must be one of %s", o.Routing, strings.Join(Routings(), ", ")))
	}
	if o.PrefixWeight == 0 {
		o.PrefixWeight = DefaultPrefixWeight
	}
	if w := o.PrefixWeight; w < 0 || math.IsNaN(w) || math.IsInf(w, 0) {
		errs = append(errs, fmt.Errorf("prefix_weight: %v must be a finite number above 0 (0: default %v)", w, DefaultPrefixWeight))
	}
	if o.Hop < 0 {
		errs = append(errs, fmt.Errorf("hop: %v must not be negative", o.Hop))
	}
	switch o.Schedulers {
	case "":
		o.Schedulers = SchedulersShared
	case SchedulersShared:
	case SchedulersPerProxy:
		// Every proxy needs a slot of its own on every endpoint (or in the
		// pool, under pool routing): a share of 0 would mean no bound.
		least, of := o.MaxInflight, "max_inflight"
		if o.Routing == RoutingPool {
			least, of = o.MaxInflight*o.Engines, "max_inflight × engines"
		}
		if o.MaxInflight > 0 && least < o.Proxies {
			errs = append(errs, fmt.Errorf("schedulers: %s gives each of %d proxies a share of every limit; %s %d is less than that", SchedulersPerProxy, o.Proxies, of, least))
		}
	default:
		errs = append(errs, fmt.Errorf("schedulers: %q must be %s or %s", o.Schedulers, SchedulersShared, SchedulersPerProxy))
	}
	if o.fleet() && o.Predictor == PredictTiming {
		errs = append(errs, fmt.Errorf("predictor: %s asks one engine's timing model; a fleet (engines %d, proxies %d, hop %v) uses %s", PredictTiming, o.Engines, o.Proxies, o.Hop, PredictObserved))
	}
	if _, err := sim.LookupProfile(o.Profile); err != nil {
		errs = append(errs, fmt.Errorf("profile: %w", err))
	}
	return o, errors.Join(errs...)
}

// prepare applies Duration and Seed to a copy of w.
func (o Options) prepare(w *workload.Workload) *workload.Workload {
	c := *w
	if o.Duration > 0 && c.Spec.Arrival.Process != workload.ArrivalTrace {
		c.Spec.Duration = workload.Duration(o.Duration)
		c.Spec.Requests = 0
	}
	if o.Seed != 0 {
		c.Spec.Seed = o.Seed
	}
	return &c
}
