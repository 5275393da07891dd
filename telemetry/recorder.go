package telemetry

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"

	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/telemetry/attainment"
)

// Metric names. GenAI semantic-convention names where they exist.
const (
	MetricTTFT          = "gen_ai.server.time_to_first_token"
	MetricTPOT          = "gen_ai.server.time_per_output_token"
	MetricDuration      = "gen_ai.server.request.duration"
	MetricTokenUsage    = "gen_ai.client.token.usage"
	MetricQueue         = "llmesh.queue.duration"
	MetricUpstreamTTFT  = "llmesh.upstream.time_to_first_token"
	MetricDecodeSteps   = "llmesh.decode.steps"
	MetricInterChunk    = "llmesh.inter_chunk.duration"
	MetricRequests      = "llmesh.requests"
	MetricPreemptions   = "llmesh.preemptions"
	MetricSLOViolations = "llmesh.slo.violations"
	MetricRelocations   = "llmesh.relocations"
	MetricRelocated     = "llmesh.relocated.bytes"
	// MetricPassthrough counts requests that are not generation calls
	// (model lists, health, tokenize…): proxied without admission and kept
	// out of every generation metric.
	MetricPassthrough = "llmesh.passthrough.requests"
)

// scopeName is the instrumentation scope of the Recorder's instruments.
const scopeName = "github.com/llmesh/llmesh/telemetry"

const descInterChunk = "Gap between consecutive token-bearing chunks."

// Attribute keys.
const (
	AttrClass      = attribute.Key("llmesh.class")
	AttrModel      = attribute.Key("gen_ai.request.model")
	AttrTokenType  = attribute.Key("gen_ai.token.type")
	AttrErrorType  = attribute.Key("error.type")
	AttrSLO        = attribute.Key("llmesh.slo")
	AttrSLOMet     = attribute.Key("llmesh.slo.met")
	AttrRelocation = attribute.Key("llmesh.relocation.protocol")
)

// Histogram bucket boundaries, chosen for LLM serving: TTFT from a
// millisecond (cached prefix on an idle H200) to a minute (long prompts
// behind a queue); per-token times from 1 ms to 2.5 s.
var (
	BucketsTTFT     = []float64{0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.25, 0.35, 0.5, 0.75, 1, 1.5, 2.5, 5, 7.5, 10, 20, 30, 60}
	BucketsTPOT     = []float64{0.001, 0.0025, 0.005, 0.0075, 0.01, 0.0125, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 2.5}
	BucketsDuration = []float64{0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92, 163.84, 327.68}
	BucketsQueue    = []float64{0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120}
	BucketsTokens   = []float64{1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576}
	BucketsSteps    = []float64{0, 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384}
)

// DefaultMaxModels bounds the distinct model label values (the model comes
// from client request bodies; an unbounded label would let clients blow up
// the metric cardinality).
const DefaultMaxModels = 64

// OtherModel is the model label once DefaultMaxModels distinct values were
// seen.
const OtherModel = "other"

// RecorderOptions configure a Recorder.
type RecorderOptions struct {
	// Classes give the SLOs that llmesh.slo.violations and the
	// llmesh.slo.met attribute are judged against; a class not listed has
	// no SLO (never violated except by failing).
	Classes []exchange.Class
	// MaxModels bounds distinct model labels; 0 means DefaultMaxModels.
	MaxModels int
}

// Recorder records per-request measurements. Hosts call Record once per
// finished request and the counters as events happen. Safe for concurrent
// use.
type Recorder struct {
	// agg, when set, aggregates every per-request instrument in place of
	// the SDK instruments below (see aggregation); the Provider makes it a
	// Producer of its readers. Relocations stay on the SDK: they are
	// counted per relocated prompt, not per request.
	agg                                      *aggregation
	ttft, upTTFT, tpot, duration, queue, itl metric.Float64Histogram
	tokens, steps                            metric.Int64Histogram
	requests, preemptions, violations        metric.Int64Counter
	relocations, relocated                   metric.Int64Counter
	passthrough                              metric.Int64Counter
	tracer                                   trace.Tracer
	// noTrace is set when no span can reach an exporter (a no-op tracer
	// provider): Trace then returns at once instead of building spans
	// that every request would pay for and nothing would see.
	noTrace bool

	slos      map[string]exchange.Class
	maxModels int

	// last is the series the previous request was recorded under, tried
	// before the map: a host's requests mostly share their class and
	// model, and comparing two short strings touches less memory than
	// hashing them and probing the map under mu, which is what recording
	// costs once streaming has evicted it from the caches.
	last atomic.Pointer[series]

	mu     sync.Mutex
	models map[string]struct{}
	series map[labelKey]*series
}

type labelKey struct{ class, model string }

// NewRecorder creates the instruments on mp and the tracer on tp; nil
// providers mean no-op ones. Its measurements go through the SDK
// instruments, which every reader of mp sees; a Provider's Recorder
// aggregates them itself instead (cheaper, the same output).
func NewRecorder(mp metric.MeterProvider, tp trace.TracerProvider, opts RecorderOptions) (*Recorder, error) {
	return newRecorder(mp, tp, opts, nil)
}

// newRecorder is NewRecorder; a non-nil agg takes the per-request
// measurements instead of instruments on mp (the caller makes it a
// Producer of mp's readers).
func newRecorder(mp metric.MeterProvider, tp trace.TracerProvider, opts RecorderOptions, agg *aggregation) (*Recorder, error) {
	if mp == nil {
		mp = noop.NewMeterProvider()
	}
	noTrace := tp == nil
	if _, ok := tp.(tracenoop.TracerProvider); ok {
		noTrace = true
	}
	if tp == nil {
		tp = tracenoop.NewTracerProvider()
	}
	m := mp.Meter(scopeName)
	r := &Recorder{
		tracer:    tp.Tracer(scopeName),
		noTrace:   noTrace,
		agg:       agg,
		slos:      map[string]exchange.Class{},
		maxModels: opts.MaxModels,
		models:    map[string]struct{}{},
		series:    map[labelKey]*series{},
	}
	if r.maxModels <= 0 {
		r.maxModels = DefaultMaxModels
	}
	for _, c := range opts.Classes {
		r.slos[c.Name] = c
	}
	var errs []error
	ic := func(name, desc, unit string) metric.Int64Counter {
		c, err := m.Int64Counter(name, metric.WithDescription(desc), metric.WithUnit(unit))
		errs = append(errs, err)
		return c
	}
	if agg == nil {
		insts := instruments()
		fh := func(i int) metric.Float64Histogram {
			d := insts[i]
			h, err := m.Float64Histogram(d.name, metric.WithDescription(d.desc), metric.WithUnit(d.unit), metric.WithExplicitBucketBoundaries(d.bounds...))
			errs = append(errs, err)
			return h
		}
		ih := func(i int) metric.Int64Histogram {
			d := insts[i]
			h, err := m.Int64Histogram(d.name, metric.WithDescription(d.desc), metric.WithUnit(d.unit), metric.WithExplicitBucketBoundaries(d.bounds...))
			errs = append(errs, err)
			return h
		}
		c := func(i int) metric.Int64Counter { return ic(insts[i].name, insts[i].desc, insts[i].unit) }
		r.ttft, r.upTTFT, r.tpot, r.duration, r.queue, r.itl = fh(iTTFT), fh(iUpTTFT), fh(iTPOT), fh(iDuration), fh(iQueue), fh(iITL)
		r.tokens, r.steps = ih(iTokens), ih(iSteps)
		r.requests, r.preemptions, r.violations = c(iRequests), c(iPreemptions), c(iViolations)
	}
	r.relocations = ic(MetricRelocations, "Prompts relocated from metadata or headers into the body.", "{relocation}")
	r.relocated = ic(MetricRelocated, "Bytes relocated from metadata or headers into the body.", "By")
	r.passthrough = ic(MetricPassthrough, "Requests that are not generation calls, proxied without admission.", "{request}")
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return r, nil
}

// labels returns the cached series of class and model, folding models
// beyond the cap into OtherModel.
func (r *Recorder) labels(class, model string) *series {
	if s := r.last.Load(); s != nil && s.model == model && s.class == class {
		return s
	}
	s := r.lookup(class, model)
	if s.model == model { // not folded into OtherModel
		r.last.Store(s)
	}
	return s
}

// lookup is labels without the last-series shortcut.
func (r *Recorder) lookup(class, model string) *series {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.series[labelKey{class, model}]; s != nil {
		return s // model is known (or is OtherModel itself)
	}
	if _, ok := r.models[model]; !ok {
		if len(r.models) >= r.maxModels {
			model = OtherModel
		} else {
			r.models[model] = struct{}{}
		}
	}
	k := labelKey{class, model}
	s := r.series[k]
	if s == nil {
		s = newSeries(class, model, r.slos[class], r.agg == nil, r.agg)
		r.series[k] = s
	}
	return s
}

// SLOResult is how one request fared against its class's SLOs.
type SLOResult = attainment.Result

// JudgeSLO applies the attainment rule the bench applies too
// (telemetry/attainment, docs/architecture.md Definitions) to an observation: a
// failed request misses; TTFT (proxy-side) must be at most the TTFT SLO;
// TPOT at most the TPOT SLO, and a TPOT that cannot be computed (fewer
// than two output tokens) misses unless the engine ended the response at
// its length limit (finish reason "length": the request asked for no
// more). The hosts do not read max_tokens from the request, so the finish
// reason stands for it.
func JudgeSLO(obs *exchange.Observation, c exchange.Class) SLOResult {
	return attainment.Judge(attainment.Outcome{
		Failed: !obs.OK(),
		TTFT:   obs.TTFT, HasTTFT: obs.HasTTFT,
		TPOT: obs.TPOT, HasTPOT: obs.HasTPOT,
		LengthLimited: obs.FinishReason == "length",
	}, attainment.Targets{TTFT: c.TTFT, TPOT: c.TPOT})
}

// Record records one finished request's metrics under class and model.
// Every attribute set it records under is built once per (class, model)
// and kept (see series): building and hashing a set per measurement was
// most of a request's recording cost. In a Provider's Recorder the
// measurements go to the Recorder's own aggregation (see aggregation).
func (r *Recorder) Record(obs exchange.Observation, class, model string) {
	s := r.labels(class, model)
	slo := JudgeSLO(&obs, s.slo)
	kind := errorIndex(obs.ErrorKind)
	if r.agg != nil {
		r.agg.record(s, &obs, kind, slo)
		return
	}
	ctx := context.Background()
	if !obs.Admitted.IsZero() {
		r.queue.Record(ctx, obs.QueueTime.Seconds(), s.base...)
	}
	if obs.HasTTFT {
		r.ttft.Record(ctx, obs.TTFT.Seconds(), s.base...)
		if !obs.UpstreamSent.IsZero() {
			r.upTTFT.Record(ctx, obs.UpstreamTTFT.Seconds(), s.base...)
		}
		r.steps.Record(ctx, int64(obs.DecodeSteps), s.base...)
	}
	if obs.HasTPOT {
		r.tpot.Record(ctx, obs.TPOT.Seconds(), s.base...)
	}
	for _, gap := range obs.ITL.Samples {
		r.itl.Record(ctx, gap.Seconds(), s.base...)
	}
	if allGaps(&obs.ITL) {
		extraGaps(&obs.ITL, func(gap time.Duration) { r.itl.Record(ctx, gap.Seconds(), s.base...) })
	}
	if obs.PromptTokens > 0 {
		r.tokens.Record(ctx, int64(obs.PromptTokens), s.input...)
	}
	if obs.OutputTokens > 0 || obs.OK() {
		r.tokens.Record(ctx, int64(obs.OutputTokens), s.output...)
	}
	if obs.E2E > 0 {
		r.duration.Record(ctx, obs.E2E.Seconds(), s.duration[kind]...)
	}
	met := 0
	if slo.Met {
		met = 1
	}
	r.requests.Add(ctx, 1, s.requests[kind][met]...)
	if slo.TTFTMissed {
		r.violations.Add(ctx, 1, s.violations[sloTTFT]...)
	}
	if slo.TPOTMissed || slo.TPOTUnknown { // an unknown TPOT is a TPOT miss
		r.violations.Add(ctx, 1, s.violations[sloTPOT]...)
	}
	if slo.Failed {
		r.violations.Add(ctx, 1, s.violations[sloFailed]...)
	}
}

// Preempted counts one preemption of a request of class and model.
func (r *Recorder) Preempted(class, model string) {
	s := r.labels(class, model)
	if r.agg != nil {
		r.agg.preempted(s)
		return
	}
	r.preemptions.Add(context.Background(), 1, s.baseAdd...)
}

// Relocated counts one relocated prompt of n bytes; protocol is "grpc" or
// "http".
func (r *Recorder) Relocated(protocol string, n int64) {
	ctx := context.Background()
	a := metric.WithAttributes(AttrRelocation.String(protocol))
	r.relocations.Add(ctx, 1, a)
	r.relocated.Add(ctx, n, a)
}

// Passthrough counts one request that was not a generation call, by its
// outcome ("ok" or the error kind): it is recorded here and nowhere else.
func (r *Recorder) Passthrough(obs *exchange.Observation) {
	outcome := "ok"
	if !obs.OK() {
		outcome = obs.ErrorKind.String()
	}
	r.passthrough.Add(context.Background(), 1, metric.WithAttributes(attribute.String("llmesh.outcome", outcome)))
}

// HostRecorder records the Records of either host (exchange.Recorder), the
// one place a host's request becomes telemetry: a generation's metrics,
// one llmesh.preemptions per preemption and the request's trace spans; a
// passthrough request only its count.
type HostRecorder struct{ R *Recorder }

var _ exchange.Recorder = HostRecorder{}

// Record records rec; a nil Recorder is ignored.
func (h HostRecorder) Record(rec exchange.Record) {
	if h.R == nil {
		return
	}
	if rec.Passthrough {
		h.R.Passthrough(&rec.Observation)
		return
	}
	h.R.Record(rec.Observation, rec.Class, rec.Model)
	for i := 0; i < rec.Preemptions; i++ {
		h.R.Preempted(rec.Class, rec.Model)
	}
	h.R.Trace(context.Background(), rec.Observation, rec.Class, rec.Model)
}
