package simulate

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strconv"
	"time"

	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/stats"
	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy"
	"github.com/llmesh/llmesh/sim"
)

// Result is one evaluation: the saturation point and one run per policy and
// load. Its JSON is what `llmesh bench simulate --json` prints.
type Result struct {
	Workload   string         `json:"workload"`
	Profile    string         `json:"profile"`
	Engine     EngineInfo     `json:"engine"`
	Pool       PoolInfo       `json:"pool"`
	Saturation SaturationInfo `json:"saturation"`
	// Engines, Proxies, Routing, Schedulers and HopMs describe the fleet
	// (fleet.go): 1, 1, the routing asked for, shared and 0 for a single
	// host in front of a single engine.
	Engines    int     `json:"engines"`
	Proxies    int     `json:"proxies"`
	Routing    string  `json:"routing"`
	Schedulers string  `json:"schedulers"`
	HopMs      float64 `json:"hop_ms"`
	// RunPastTimeout is Options.RunPastTimeout: the client never gave up.
	RunPastTimeout bool   `json:"run_past_timeout,omitempty"`
	Runs           []*Run `json:"runs"`
	// Floor is the admission floor per load (keyed by loadKey): what the
	// most extreme admission gives the most urgent class on this engine.
	Floor map[string]*Floor `json:"floor"`
}

// EngineInfo is the engine model's configuration with defaults filled in.
type EngineInfo struct {
	MaxNumSeqs          int    `json:"max_num_seqs"`
	MaxNumBatchedTokens int    `json:"max_num_batched_tokens"`
	KVCacheTokens       int    `json:"kv_cache_tokens"`
	Policy              string `json:"policy"`
	// LongPrefillTokenThreshold is vLLM's per-sequence prefill chunk cap;
	// 0: none.
	LongPrefillTokenThreshold int `json:"long_prefill_token_threshold,omitempty"`
}

// PoolInfo is the simulated host's pool configuration.
type PoolInfo struct {
	MaxInflight       int `json:"max_inflight"`
	MaxInflightTokens int `json:"max_inflight_tokens,omitempty"`
	MaxPrefillTokens  int `json:"max_prefill_tokens,omitempty"`
	ReserveUrgent     int `json:"reserve_urgent,omitempty"`
	// Bounds is "derived" when preemptive policies derive the bounds left
	// at 0 (the default), "static" with Options.StaticBounds.
	Bounds string `json:"bounds"`
	// OverloadRelease is the overload release factor when not the
	// default (-1: never).
	OverloadRelease   float64 `json:"overload_release,omitempty"`
	MetricsIntervalMs float64 `json:"metrics_interval_ms"` // 0: static capacity
	AgingS            float64 `json:"aging_s"`
	Predictor         string  `json:"predictor"`
	MinLowerInflight  int     `json:"min_lower_inflight"`
	MinRunTimeMs      float64 `json:"min_run_time_ms"`
	MaxPerRequest     int     `json:"max_per_request"`
	Target            float64 `json:"preemption_target"`
	// Preemptible lists the classes a preemptive policy may stop: every
	// class but the most urgent one.
	Preemptible []string `json:"preemptible"`
}

// Run is one policy at one load: BENCH's run report (the format of
// `llmesh bench run`, fields inlined) plus what only virtual time knows.
type Run struct {
	*result.Report
	// ArrivalRPS is the arrival rate the load factor asked for.
	ArrivalRPS float64 `json:"arrival_rps"`
	// Sim holds the simulation's own counters.
	Sim RunStats `json:"simulation"`
	// PrefixCache is what the engines' prefix caches served, beside what
	// model caches would (prefix.go).
	PrefixCache *PrefixCache `json:"prefix_cache"`
}

// RunStats are counters of one run. Report.RecomputedTokensFraction is
// RecomputedTokens over measured output tokens (BENCH's definition);
// RecomputedOfComputed relates them to all tokens the engine computed.
type RunStats struct {
	ComputedTokens       int64   `json:"computed_tokens"`
	RecomputedTokens     int64   `json:"recomputed_tokens"`
	RecomputedOfComputed float64 `json:"recomputed_of_computed"`
	Preemptions          int     `json:"preemptions"`
	Requeues             int     `json:"requeues"`
	Continuations        int     `json:"continuations"`
	// LateFinishes are preemptions that arrived while the victim finished
	// in the engine step in flight, so nothing was stopped.
	LateFinishes           int     `json:"late_finishes"`
	EnginePreemptions      int64   `json:"engine_preemptions"`
	EngineRecomputedTokens int64   `json:"engine_recomputed_tokens"`
	EngineSteps            int64   `json:"engine_steps"`
	MinPoolLimit           int     `json:"min_pool_limit"`
	VirtualSeconds         float64 `json:"virtual_seconds"`
	Requests               int     `json:"requests"`
	// TimeoutsQueued and TimeoutsRunning are the requests whose client
	// gave up at the workload's timeout (timeout.go): withdrawn while
	// waiting for admission (or for the proxy to learn of it), and
	// cancelled while running.
	TimeoutsQueued  int `json:"timeouts_queued,omitempty"`
	TimeoutsRunning int `json:"timeouts_running,omitempty"`
	// Breakdown splits each class's TTFT (measured requests that completed,
	// the ones whose TTFT the class report counts) into waiting in the scheduler and the engine's part.
	Breakdown map[string]Breakdown `json:"ttft_breakdown"`
	// Bounds are the pool's admission bounds in effect, sampled at every
	// metrics tick (absent with static capacity).
	Bounds *BoundsStats `json:"bounds,omitempty"`
	// ITLOmitted is set when the run was too large to keep every token's
	// time, so ITL statistics are empty.
	ITLOmitted bool `json:"itl_omitted,omitempty"`
	// Endpoints is what each engine did, in engine order; Imbalance is
	// the most completed tokens of one engine over the mean (1: even).
	Endpoints []EndpointUtil `json:"endpoints"`
	Imbalance float64        `json:"imbalance"`
}

// BoundsStats summarize the admission bounds a run applied: derived ones
// change with what the pool observes.
type BoundsStats struct {
	Samples           int     `json:"samples"`
	ReserveUrgentMean float64 `json:"reserve_urgent_mean"`
	// ReserveUrgentShare is the share of samples at each reserve.
	ReserveUrgentShare   map[string]float64 `json:"reserve_urgent_share"`
	MaxPrefillTokensMean float64            `json:"max_prefill_tokens_mean"`
	MaxPrefillTokensMin  int                `json:"max_prefill_tokens_min"`
	MaxPrefillTokensMax  int                `json:"max_prefill_tokens_max"`
}

// itlTokenBudget bounds the token times one run keeps for ITL statistics
// (8 bytes each).
const itlTokenBudget = 8_000_000

// maxItems bounds the requests of one run.
const maxItems = 5_000_000

// Evaluate measures the saturation rate of w on the engine, then runs every
// policy at every load (load × saturation requests per second; no loads
// means the workload's own rate). Runs execute in parallel, two per CPU;
// each is deterministic, so the result is too.
func Evaluate(w *workload.Workload, policies []string, loads []float64, o Options) (*Result, error) {
	o, err := o.withDefaults(w)
	if err != nil {
		return nil, err
	}
	if w.Closed() {
		return nil, errors.New("simulate: closed-loop workloads are not supported; use an open arrival process or --trace")
	}
	if len(policies) == 0 {
		policies = policy.Names()
	}
	pols := make([]scheduler.Policy, len(policies))
	var errs []error
	for i, n := range policies {
		if pols[i], err = policy.Lookup(n); err != nil {
			errs = append(errs, fmt.Errorf("policies: %w", err))
		}
	}
	for _, l := range loads {
		if !(l > 0 && l <= maxLoad) {
			errs = append(errs, fmt.Errorf("loads: %v must be in (0, %d]", l, maxLoad))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	w = o.prepare(w)
	sat, err := saturation(w, o)
	if err != nil {
		return nil, err
	}
	if n := o.Engines; n > 1 {
		sat.RPS *= float64(n)
		sat.OutputTokensPerS *= float64(n)
		sat.Method += fmt.Sprintf("; times %d engines", n)
	}
	res := &Result{Workload: w.Spec.Name, Profile: o.Profile, Saturation: *sat, Pool: poolInfo(w, o),
		Engines: o.Engines, Proxies: o.Proxies, Routing: o.Routing, Schedulers: o.Schedulers, HopMs: ms(o.Hop),
		RunPastTimeout: o.RunPastTimeout}
	if err := res.fillEngine(o); err != nil {
		return nil, err
	}
	natural := naturalRate(w)
	if len(loads) == 0 {
		loads = []float64{natural / sat.RPS}
	}
	type job struct {
		pol   scheduler.Policy // nil: the floor run
		load  float64
		floor int // index into floors
	}
	var jobs []job
	floors := make([]*Floor, len(loads))
	for i, l := range loads {
		for _, p := range pols {
			jobs = append(jobs, job{pol: p, load: l})
		}
		if !o.SkipFloor && !o.fleet() {
			// The floor is one engine's; a fleet has none.
			jobs = append(jobs, job{load: l, floor: i})
		}
	}
	runs := make([]*Run, len(jobs))
	runErrs := make([]error, len(jobs))
	// Twice as many runs at once as processors: with one each, the last
	// jobs run on fewer processors than there are (three equal runs on two
	// take twice one run, not one and a half). By default fewer where
	// their requests in flight would not fit runBudget together
	// (runFootprint); a run always may start when none executes.
	workers := 2 * runtime.GOMAXPROCS(0)
	budget := int64(runBudget)
	if o.Parallel > 0 {
		workers, budget = o.Parallel, math.MaxInt64
	}
	done := make(chan int64, len(jobs))
	var inUse int64
	running := 0
	for i, j := range jobs {
		need := int64(0)
		if j.pol != nil {
			need = runFootprint(w, o, j.load*sat.RPS, sat.RPS)
		}
		for running > 0 && (running >= workers || inUse+need > budget) {
			inUse -= <-done
			running--
		}
		inUse += need
		running++
		go func(i int, j job, need int64) {
			defer func() { done <- need }()
			sw := w.ScaleRate(j.load * sat.RPS / natural)
			if j.pol == nil {
				floors[j.floor], runErrs[i] = floorRun(sw, j.load, o)
				return
			}
			runs[i], runErrs[i] = simulate(sw, j.pol, j.load, o)
		}(i, j, need)
	}
	for ; running > 0; running-- {
		<-done
	}
	if err := errors.Join(runErrs...); err != nil {
		return nil, err
	}
	for _, r := range runs {
		if r != nil {
			res.Runs = append(res.Runs, r)
		}
	}
	res.Floor = map[string]*Floor{}
	for i, l := range loads {
		if floors[i] != nil {
			res.Floor[loadKey(l)] = floors[i]
		}
	}
	return res, nil
}

// runBudget is the memory, by runFootprint's estimate, that the runs
// executing at once may hold in requests in flight when Options.Parallel
// is 0. With the bench commands' garbage collector target (400%,
// bench/harness/gc.go) the heap may grow to five times what it keeps, so
// runs far past saturation are held to about this much together, where
// the process's soft memory limit (SoftMemoryLimit) still leaves the
// collector room.
const runBudget = 512 << 20

// SoftMemoryLimit is the soft memory limit (runtime/debug.SetMemoryLimit)
// that `llmesh bench simulate` runs under unless the GOMEMLIMIT
// environment variable sets one: below it the collector keeps the bench
// commands' target, near it it collects more often, so a run far past
// saturation that keeps half a gigabyte stays under 2 GB of resident
// memory instead of growing to five times what it keeps.
const SoftMemoryLimit = 1600 << 20

// bytesPerWaiting is what a fleet holds per request in flight: its window
// entry (vreq, 80 B), the scheduler's entry (288 B) and its share of the
// indexes, the queue and its id (docs/results/fleet.md).
const bytesPerWaiting = 420

// runFootprint estimates the memory a fleet run at rate (req/s) holds in
// requests in flight when the fleet completes about sat req/s: what
// arrives beyond sat piles up until the client gives up at the workload's
// timeout, or for every arrival without one. Zero for a run within
// saturation and for one engine, whose runs are not held to the budget.
func runFootprint(w *workload.Workload, o Options, rate, sat float64) int64 {
	if !o.fleet() || rate <= sat {
		return 0
	}
	span := w.Spec.Warmup.Duration.D() + w.Spec.Duration.D()
	if to := w.Spec.Timeout.D(); to > 0 && to < span && !o.RunPastTimeout {
		span = to
	}
	return int64((rate - sat) * span.Seconds() * bytesPerWaiting)
}

func simulate(w *workload.Workload, pol scheduler.Policy, load float64, o Options) (*Run, error) {
	kv, err := kvCacheTokens(o)
	if err != nil {
		return nil, err
	}
	engines := 1
	if o.fleet() {
		engines = o.Engines
	}
	sc, err := scan(w, engines*kv/sim.BlockSize)
	if err != nil {
		return nil, err
	}
	recordAll := sc.tokens <= itlTokenBudget
	var clients clientTimeouts
	if !o.RunPastTimeout {
		clients = newClientTimeouts(w.Spec.Timeout.D())
	}
	out := newSink(w, stats.Meta{Workload: w, Target: "virtual-time " + o.Profile, Policy: pol.Name(), Load: load}, o)
	newRun := newLoop
	if o.fleet() {
		newRun = newFleet
	}
	f, err := newRun(w, pol, o)
	if err != nil {
		return nil, err
	}
	f.recordAll = recordAll
	f.clients = clients
	if err := f.stream(w.Source().Next, sc.n, sc.segments, out.add); err != nil {
		return nil, fmt.Errorf("%s at load %g: %w", pol.Name(), load, err)
	}
	c := f.c
	var util []EndpointUtil
	var engs []*sim.Engine
	for _, e := range f.engines {
		util = append(util, e.util)
		engs = append(engs, e.eng)
	}
	// routed: a fleet's per-engine prefix model (routed.go).
	routed := f.routed
	rep := out.st.Report()
	run := &Run{Report: rep, ArrivalRPS: naturalRate(w), Sim: RunStats{
		ComputedTokens: c.computed, RecomputedTokens: c.recomputed,
		Preemptions: c.preemptions, Requeues: c.requeues, Continuations: c.continuations, LateFinishes: c.lateFinish,
		EnginePreemptions: c.enginePreempts, EngineRecomputedTokens: c.engineRecomputed, EngineSteps: c.steps,
		MinPoolLimit: c.limitMin, VirtualSeconds: c.end.Sub(epoch).Seconds(), Requests: sc.n, ITLOmitted: !recordAll,
		TimeoutsQueued: c.timeoutsQueued, TimeoutsRunning: c.timeoutsRunning,
	}}
	run.Sim.Endpoints, run.Sim.Imbalance = utilisation(util, c.end.Sub(epoch))
	run.PrefixCache = sc.prefix.bounds()
	if hits, ok := engineHits(engs); ok {
		run.PrefixCache.HitTokens = &hits
	}
	if routed != nil {
		h := routed.hits
		run.PrefixCache.RoutedHitTokens = &h
	}
	run.Sim.Breakdown = out.breakdown()
	if b := c.bounds; b.n > 0 {
		bs := &BoundsStats{Samples: b.n, ReserveUrgentMean: float64(b.reserve) / float64(b.n),
			MaxPrefillTokensMean: float64(b.prefill) / float64(b.n), MaxPrefillTokensMin: b.prefillMin, MaxPrefillTokensMax: b.prefMx,
			ReserveUrgentShare: map[string]float64{}}
		for r, n := range b.reserveHist {
			bs.ReserveUrgentShare[strconv.Itoa(r)] = float64(n) / float64(b.n)
		}
		run.Sim.Bounds = bs
	}
	if c.computed > 0 {
		run.Sim.RecomputedOfComputed = float64(c.recomputed) / float64(c.computed)
	}
	return run, nil
}

// scanned is what a run needs to know of its items before it starts.
type scanned struct {
	n, tokens int
	// segments: some prompt has an identity.
	segments bool
	// prefix has seen every item: the model caches' bounds.
	prefix *prefixReplay
}

// scan draws every item of w's source without keeping them; the pooled
// prefix model holds capacityBlocks blocks.
func scan(w *workload.Workload, capacityBlocks int) (scanned, error) {
	sc := scanned{prefix: newPrefixReplay(capacityBlocks)}
	src := w.Source()
	for {
		it, ok := src.Next()
		if !ok {
			break
		}
		if sc.n >= maxItems {
			return sc, fmt.Errorf("simulate: more than %d requests in one run; shorten the duration", maxItems)
		}
		sc.n++
		sc.tokens += it.MaxTokens
		sc.segments = sc.segments || it.Segments != nil
		sc.prefix.observe(it)
	}
	if sc.n == 0 {
		return sc, errors.New("simulate: the workload yields no requests")
	}
	return sc, nil
}

// kvCacheTokens is one engine's KV cache with o's engine configuration.
func kvCacheTokens(o Options) (int, error) {
	prof, err := sim.LookupProfile(o.Profile)
	if err != nil {
		return 0, err
	}
	e, err := sim.NewEngine(prof, o.Engine)
	if err != nil {
		return 0, fmt.Errorf("engine: %w", err)
	}
	return e.Config().KVCacheTokens, nil
}

// naturalRate is w's own request rate in requests per second: the arrival
// rate times the requests per arrival (a session's turns), or a replayed
// trace's request count over its span.
func naturalRate(w *workload.Workload) float64 {
	if w.Spec.Arrival.Process != workload.ArrivalTrace {
		return w.RequestRate()
	}
	rows := w.Trace
	if len(rows) < 2 {
		return 1
	}
	span := float64(rows[len(rows)-1].At-rows[0].At) * w.Spec.Arrival.TimeScale / float64(time.Second)
	if span <= 0 {
		return 1
	}
	return float64(len(rows)-1) / span
}

func poolInfo(w *workload.Workload, o Options) PoolInfo {
	p := PoolInfo{
		MaxInflight: o.MaxInflight, MaxInflightTokens: o.MaxInflightTokens, MaxPrefillTokens: o.MaxPrefillTokens,
		ReserveUrgent: o.ReserveUrgent, AgingS: o.Aging.Seconds(), Predictor: o.Predictor, Bounds: "derived",
		MinLowerInflight: o.Preemption.MinLowerInflight, MinRunTimeMs: ms(o.Preemption.MinRunTime),
		MaxPerRequest: o.Preemption.MaxPerRequest, Target: o.Preemption.Target,
	}
	if p.Target == 0 {
		p.Target = 1
	}
	if o.StaticBounds {
		p.Bounds = "static"
	}
	if o.OverloadRelease != 0 && o.OverloadRelease != scheduler.DefaultOverloadRelease {
		p.OverloadRelease = max(o.OverloadRelease, -1)
	}
	if o.MetricsInterval > 0 {
		p.MetricsIntervalMs = ms(o.MetricsInterval)
	}
	cfg := schedulerConfig(w, policyNone{}, o)
	for _, c := range cfg.Classes {
		if c.Preemptible {
			p.Preemptible = append(p.Preemptible, c.Name)
		}
	}
	return p
}

func (r *Result) fillEngine(o Options) error {
	prof, err := sim.LookupProfile(o.Profile)
	if err != nil {
		return err
	}
	e, err := sim.NewEngine(prof, o.Engine)
	if err != nil {
		return fmt.Errorf("engine: %w", err)
	}
	c := e.Config()
	r.Engine = EngineInfo{MaxNumSeqs: c.MaxNumSeqs, MaxNumBatchedTokens: c.MaxNumBatchedTokens, KVCacheTokens: c.KVCacheTokens, Policy: c.Policy.String(),
		LongPrefillTokenThreshold: c.LongPrefillTokenThreshold}
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// policyNone stands in where only the classes of a config are read.
type policyNone struct{}

var _ scheduler.Policy = policyNone{}

func (policyNone) Name() string                    { return "none" }
func (policyNone) Less(a, b *scheduler.Entry) bool { return a.Seq < b.Seq }

// Breakdown is one class's TTFT split, in milliseconds: QueueMs is arrival
// to first admission by the scheduler, UpstreamMs the latest admission to
// the first token (the engine's queue and prefill). UpstreamMs splits
// further into EngineWaitMs, admission to the start of the first engine
// step that computes the request (the step in flight, then steps that had
// no room for it), and PrefillMs, from there to the first token (the
// request's own prefill steps, shared with the running batch).
type Breakdown struct {
	QueueMs      Quantiles `json:"queue_ms"`
	UpstreamMs   Quantiles `json:"upstream_ms"`
	EngineWaitMs Quantiles `json:"engine_wait_ms"`
	PrefillMs    Quantiles `json:"prefill_ms"`
}

// Quantiles are exact order statistics (nearest rank).
type Quantiles struct {
	P50 float64 `json:"p50"`
	P90 float64 `json:"p90"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

func quantiles(ds []time.Duration) Quantiles {
	if len(ds) == 0 {
		return Quantiles{}
	}
	slices.Sort(ds)
	at := func(q float64) float64 {
		i := max(0, int(math.Ceil(q*float64(len(ds))))-1)
		return ms(ds[i])
	}
	return Quantiles{P50: at(0.5), P90: at(0.9), P99: at(0.99), Max: ms(ds[len(ds)-1])}
}

// sink is where a run's requests go once final, in item order: the
// report's stream and the TTFT breakdown's durations.
type sink struct {
	st      *stats.Stream
	classes []workload.Class
	// timeout, with Options.RunPastTimeout: a completed request that ran
	// longer is reported as a timeout.
	timeout time.Duration
	// q, u, ew and pf are the breakdown's durations per class.
	q, u, ew, pf [][]time.Duration
	// records and run: Options.Records, and the run's name there.
	records *RecordWriter
	run     string
}

func newSink(w *workload.Workload, m stats.Meta, o Options) *sink {
	s := &sink{st: stats.NewStream(m), classes: w.Classes, records: o.Records, run: m.Policy + "/load=" + loadKey(m.Load)}
	if o.RunPastTimeout {
		s.timeout = w.Spec.Timeout.D()
	}
	n := len(w.Classes)
	s.q, s.u, s.ew, s.pf = make([][]time.Duration, n), make([][]time.Duration, n), make([][]time.Duration, n), make([][]time.Duration, n)
	return s
}

// add takes v's record and timings; it keeps neither v nor its record.
func (s *sink) add(v *vreq) error {
	r := v.rec
	if to := s.timeout; to > 0 && r.Status == result.StatusOK && time.Duration(r.DoneNS-r.SentNS) > to {
		r.Status, r.Error = result.StatusTimeout, fmt.Sprintf("ran %v, past the workload's timeout %v", time.Duration(r.DoneNS-r.SentNS), to)
	}
	if s.records != nil {
		r.Run = s.run
		err := s.records.write(r)
		r.Run = ""
		if err != nil {
			return fmt.Errorf("records: %w", err)
		}
	}
	if !v.it.Warmup && r.Status == result.StatusOK {
		c := v.it.Class
		s.q[c] = append(s.q[c], v.queued)
		s.u[c] = append(s.u[c], v.upstream)
		s.ew[c] = append(s.ew[c], v.waitEng)
		s.pf[c] = append(s.pf[c], v.prefill)
	}
	return s.st.Add(r)
}

// breakdown is each class's TTFT split over its measured requests that
// completed.
func (s *sink) breakdown() map[string]Breakdown {
	out := map[string]Breakdown{}
	for i, c := range s.classes {
		out[c.Name] = Breakdown{QueueMs: quantiles(s.q[i]), UpstreamMs: quantiles(s.u[i]),
			EngineWaitMs: quantiles(s.ew[i]), PrefillMs: quantiles(s.pf[i])}
	}
	return out
}
