package telemetry

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/llmesh/llmesh/exchange"
)

// aggregation holds the Recorder's per-request instruments, aggregated by
// the Recorder itself and handed to the Provider's readers as a Producer.
//
// Through the SDK a finished request was about ten instrument calls, each
// resolving its attribute set in the instrument's map, updating the
// point's atomics and consulting the exemplar reservoir: 18–20 µs per
// 256-chunk request in the gateway on the development machine, with the
// recorder's state out of the CPU caches after streaming the response
// (docs/metrics.md, Cost). Here one request is one lock and a bucket
// search per histogram on a few adjacent cache lines of its series.
//
// The output is what the SDK's default aggregations make of the same
// measurements: cumulative explicit-bucket histograms (upper-inclusive
// buckets, count, sum, min and max) and cumulative monotonic sums, one
// data point per attribute set once something was recorded under it, the
// same descriptions, units and bounds, and the SDK's cardinality limit
// per instrument with its overflow point. No exemplars: the Recorder
// records with a context that carries no span, so the SDK's default
// trace-based filter keeps none either (New falls back to the SDK
// instruments when another filter is configured).
type aggregation struct {
	insts [numAggregated]instrument
	// limit is the SDK's cardinality limit per instrument: past limit-1
	// distinct attribute sets, new sets are counted in one overflow point.
	// 0 or less: none.
	limit int
	// itl finds inter-chunk buckets on the gaps as durations.
	itl   gapIndex
	start time.Time
	// readers is how many readers the aggregation produces for (its
	// producer(r) for r below it), each with its own sums.
	readers int

	mu sync.Mutex
	// floatPts[i], intPts[i] or sumPts[i], by the instrument's kind, are
	// instrument i's points in first-seen order.
	floatPts [numAggregated][]*histPoint[float64]
	intPts   [numAggregated][]*histPoint[int64]
	sumPts   [numAggregated][]*sumPoint
	// overflow[i] is whether instrument i's overflow point exists (the
	// last of its points).
	overflow [numAggregated]bool
}

// Indexes of the aggregated instruments, in the order the SDK path
// creates them (and so the order the SDK would list them in).
const (
	iTTFT = iota
	iUpTTFT
	iTPOT
	iDuration
	iQueue
	iITL
	iTokens
	iSteps
	iRequests
	iPreemptions
	iViolations
	numAggregated
)

type instKind uint8

const (
	floatHistogram instKind = iota
	intHistogram
	intCounter
)

// instrument describes one of the Recorder's instruments, for both the
// SDK path and the aggregation.
type instrument struct {
	name, desc, unit string
	kind             instKind
	bounds           []float64
}

// instruments describes the aggregated instruments with the bucket
// boundaries as they are now (the Buckets* variables are exported).
func instruments() [numAggregated]instrument {
	return [numAggregated]instrument{
		iTTFT:        {MetricTTFT, "Time from request received by the proxy to the first output token (includes queue time).", "s", floatHistogram, BucketsTTFT},
		iUpTTFT:      {MetricUpstreamTTFT, "Time from request sent upstream to the first output token.", "s", floatHistogram, BucketsTTFT},
		iTPOT:        {MetricTPOT, "Per request (E2E - TTFT) / (output tokens - 1).", "s", floatHistogram, BucketsTPOT},
		iDuration:    {MetricDuration, "Time from request received to the end of the response.", "s", floatHistogram, BucketsDuration},
		iQueue:       {MetricQueue, "Time from request received to scheduler admission.", "s", floatHistogram, BucketsQueue},
		iITL:         {MetricInterChunk, descInterChunk, "s", floatHistogram, BucketsTPOT},
		iTokens:      {MetricTokenUsage, "Tokens per request, by gen_ai.token.type (input, output).", "{token}", intHistogram, BucketsTokens},
		iSteps:       {MetricDecodeSteps, "Token-bearing chunks after the first, per request.", "{step}", intHistogram, BucketsSteps},
		iRequests:    {MetricRequests, "Finished requests by outcome and SLO attainment.", "{request}", intCounter, nil},
		iPreemptions: {MetricPreemptions, "Requests stopped to make room for higher-priority work.", "{preemption}", intCounter, nil},
		iViolations:  {MetricSLOViolations, "Requests that missed an SLO, by llmesh.slo (ttft, tpot, failed).", "{request}", intCounter, nil},
	}
}

// overflowSet is the SDK's attribute set for measurements past the
// cardinality limit.
var overflowSet = attribute.NewSet(attribute.Bool("otel.metric.overflow", true))

// cardinalityLimit is the SDK's per-instrument limit as a MeterProvider
// made without WithCardinalityLimit has it (the Provider passes none).
func cardinalityLimit() int {
	const def = 2000
	v := strings.TrimSpace(os.Getenv("OTEL_GO_X_CARDINALITY_LIMIT"))
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return def
	}
	return n
}

// perSeriesStart is the SDK's experimental per-series start timestamps
// switch, read at each collection as the SDK does.
func perSeriesStart() bool {
	return strings.EqualFold(os.Getenv("OTEL_GO_X_PER_SERIES_START_TIMESTAMPS"), "true")
}

// sdkKeepsExemplars reports whether the SDK, configured from the
// environment, would keep exemplars of measurements without a span, which
// the aggregation does not.
func sdkKeepsExemplars() bool {
	return strings.ToLower(strings.TrimSpace(os.Getenv("OTEL_METRICS_EXEMPLAR_FILTER"))) == "always_on"
}

// newAggregation makes an aggregation for readers readers (1 or
// maxReaders).
func newAggregation(readers int) *aggregation {
	a := &aggregation{insts: instruments(), limit: cardinalityLimit(), start: time.Now(), readers: min(max(readers, 1), maxReaders)}
	// Every instrument's bounds in one array, instruments with the same
	// bounds sharing theirs: a request's bucket searches then touch few
	// cache lines, close together.
	n := 0
	for _, inst := range a.insts {
		n += len(inst.bounds)
	}
	all := make([]float64, 0, n)
	for i := range a.insts {
		b := slices.Clone(a.insts[i].bounds)
		slices.Sort(b) // as the SDK does
		a.insts[i].bounds = nil
		for j := range i {
			if slices.Equal(a.insts[j].bounds, b) && len(b) > 0 {
				a.insts[i].bounds = a.insts[j].bounds
				break
			}
		}
		if a.insts[i].bounds == nil && len(b) > 0 {
			all = append(all, b...)
			a.insts[i].bounds = all[len(all)-len(b) : len(all) : len(all)]
		}
	}
	var limits []time.Duration
	for _, b := range a.insts[iITL].bounds {
		limits = append(limits, durationLimit(b))
	}
	a.itl = newGapIndex(limits)
	return a
}

// histPoint is one cumulative explicit-bucket histogram data point.
type histPoint[N int64 | float64] struct {
	// What a measurement touches comes first.
	counts   []uint64 // len(bounds)+1; the last is above every bound
	bounds   []float64
	count    uint64
	min, max N
	// sums[r] is the sum as reader r's SDK pipeline would hold it.
	sums  [maxReaders]sdkSum[N]
	set   attribute.Set
	start time.Time
}

// maxReaders is how many readers an aggregation can produce for: a
// Provider has at most two of its own (Prometheus, OTLP).
const maxReaders = 2

// sdkSum is a histogram's sum as the SDK keeps it, so that it is the same
// number: whole-numbered values are added to an integer, the rest to a
// float, and a float reading is the float plus the integer. Each
// collection folds the reading back in as the state the next period
// starts from (the SDK merges the collected half of its hot/cold pair
// into the other one), so a float sum depends on the reader's
// collections: each reader has its own, as each SDK pipeline has.
type sdkSum[N int64 | float64] struct {
	f float64
	i int64
}

// add is the SDK's atomicCounter.add on one goroutine.
func (s *sdkSum[N]) add(v N) {
	if iv := int64(v); float64(iv) == float64(v) {
		s.i += iv
		return
	}
	s.f += float64(v)
}

// collect returns the reading, as the SDK's atomicCounter.load, and
// starts the next period from it.
func (s *sdkSum[N]) collect() N {
	var v N
	if _, isInt := any(v).(int64); isInt {
		v = N(s.i)
	} else {
		v = N(s.f + float64(s.i))
	}
	*s = sdkSum[N]{}
	s.add(v)
	return v
}

// searchBound is sort.SearchFloat64s, the SDK's bucket search, without
// the closure: the first bound ≥ v, len(bounds) when none is.
func searchBound(bounds []float64, v float64) int {
	lo, hi := 0, len(bounds)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if !(bounds[mid] >= v) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// observe adds one measurement the way the SDK's histogram does: the
// float value decides the bucket, min and max start at the first value.
// Every reader's sum is kept, used or not (a loop over the readers in
// use costs more than the add).
func (p *histPoint[N]) observe(v N) {
	p.counts[searchBound(p.bounds, float64(v))]++
	if p.count == 0 {
		p.min, p.max = v, v
	} else if v < p.min {
		p.min = v
	} else if v > p.max {
		p.max = v
	}
	p.sums[0].add(v)
	p.sums[1].add(v)
	p.count++
}

// sumPoint is one cumulative monotonic sum data point.
type sumPoint struct {
	value int64
	set   attribute.Set
	start time.Time
}

// floatPoint is *slot, registering a point for set under instrument i
// first when there is none yet: own, where the series has room for it,
// else a new one. Callers hold a.mu.
func (a *aggregation) floatPoint(slot **histPoint[float64], own *histPoint[float64], i int, set attribute.Set) *histPoint[float64] {
	if p := *slot; p != nil {
		return p
	}
	return addHist(a, &a.floatPts[i], slot, own, i, set)
}

// intPoint is floatPoint for the int64 histograms.
func (a *aggregation) intPoint(slot **histPoint[int64], own *histPoint[int64], i int, set attribute.Set) *histPoint[int64] {
	if p := *slot; p != nil {
		return p
	}
	return addHist(a, &a.intPts[i], slot, own, i, set)
}

// addHist registers the point of floatPoint or intPoint in pts, with
// instrument i's bounds.
func addHist[N int64 | float64](a *aggregation, pts *[]*histPoint[N], slot **histPoint[N], own *histPoint[N], i int, set attribute.Set) *histPoint[N] {
	*slot = register(a, i, pts, own, set, func(p *histPoint[N]) {
		if p.counts == nil {
			p.bounds = a.insts[i].bounds
			p.counts = make([]uint64, len(p.bounds)+1)
		}
	})
	return *slot
}

// sumPoint is floatPoint for the counters.
func (a *aggregation) sumPoint(slot **sumPoint, own *sumPoint, i int, set attribute.Set) *sumPoint {
	if p := *slot; p != nil {
		return p
	}
	*slot = register(a, i, &a.sumPts[i], own, set, func(*sumPoint) {})
	return *slot
}

// register adds instrument i's point for set to pts, or, past the
// cardinality limit, returns its overflow point (made at the first set
// past it), as the SDK's limited map does. The point is own when that is
// not nil (and no overflow), else a new one; prepare gives a new point,
// or own, what it lacks. A series asks once per set and keeps the answer,
// so a set is never counted twice.
func register[P any, PT interface {
	*P
	init(attribute.Set)
}](a *aggregation, i int, pts *[]PT, own PT, set attribute.Set, prepare func(PT)) PT {
	if a.overflow[i] {
		return (*pts)[len(*pts)-1]
	}
	if a.limit > 0 && len(*pts) >= a.limit-1 {
		a.overflow[i] = true
		set, own = overflowSet, nil
	}
	p := own
	if p == nil {
		p = new(P)
	}
	p.init(set)
	prepare(p)
	*pts = append(*pts, p)
	return p
}

func (p *histPoint[N]) init(set attribute.Set) { p.set, p.start = set, time.Now() }

func (p *sumPoint) init(set attribute.Set) { p.set, p.start = set, time.Now() }

// record adds one finished request's measurements under series s; kind
// is its errorIndex and slo its judgement.
func (a *aggregation) record(s *series, obs *exchange.Observation, kind int, slo SLOResult) {
	pt := &s.pts
	a.mu.Lock()
	defer a.mu.Unlock()
	if !obs.Admitted.IsZero() {
		a.floatPoint(&pt.queue, &pt.own.queue, iQueue, s.set).observe(obs.QueueTime.Seconds())
	}
	if obs.HasTTFT {
		a.floatPoint(&pt.ttft, &pt.own.ttft, iTTFT, s.set).observe(obs.TTFT.Seconds())
		if !obs.UpstreamSent.IsZero() {
			a.floatPoint(&pt.upTTFT, &pt.own.upTTFT, iUpTTFT, s.set).observe(obs.UpstreamTTFT.Seconds())
		}
		a.intPoint(&pt.steps, &pt.own.steps, iSteps, s.set).observe(int64(obs.DecodeSteps))
	}
	if obs.HasTPOT {
		a.floatPoint(&pt.tpot, &pt.own.tpot, iTPOT, s.set).observe(obs.TPOT.Seconds())
	}
	if allGaps(&obs.ITL) {
		observeBuckets(a.floatPoint(&pt.itl, &pt.own.itl, iITL, s.set), &obs.ITL)
	} else if len(obs.ITL.Samples) > 0 {
		observeGaps(a.floatPoint(&pt.itl, &pt.own.itl, iITL, s.set), &a.itl, obs.ITL.Samples)
	}
	if obs.PromptTokens > 0 {
		a.intPoint(&pt.tokens[0], &pt.own.tokens[0], iTokens, s.sets.input).observe(int64(obs.PromptTokens))
	}
	if obs.OutputTokens > 0 || obs.OK() {
		a.intPoint(&pt.tokens[1], &pt.own.tokens[1], iTokens, s.sets.output).observe(int64(obs.OutputTokens))
	}
	if obs.E2E > 0 {
		a.floatPoint(&pt.duration[kind], pt.own.durationOf(kind), iDuration, s.sets.duration[kind]).observe(obs.E2E.Seconds())
	}
	met := 0
	if slo.Met {
		met = 1
	}
	a.sumPoint(&pt.requests[kind][met], pt.own.requestsOf(kind, met), iRequests, s.sets.requests[kind][met]).value++
	if slo.TTFTMissed {
		a.sumPoint(&pt.violations[sloTTFT], &pt.own.violations[sloTTFT], iViolations, s.sets.violations[sloTTFT]).value++
	}
	if slo.TPOTMissed || slo.TPOTUnknown { // an unknown TPOT is a TPOT miss
		a.sumPoint(&pt.violations[sloTPOT], &pt.own.violations[sloTPOT], iViolations, s.sets.violations[sloTPOT]).value++
	}
	if slo.Failed {
		a.sumPoint(&pt.violations[sloFailed], &pt.own.violations[sloFailed], iViolations, s.sets.violations[sloFailed]).value++
	}
}

// preempted counts one preemption under series s.
func (a *aggregation) preempted(s *series) {
	a.mu.Lock()
	a.sumPoint(&s.pts.preemptions, &s.pts.own.preemptions, iPreemptions, s.set).value++
	a.mu.Unlock()
}

// producer is the aggregation as a Producer for reader r (below
// a.readers): each reader's collections are its own, as in the SDK.
func (a *aggregation) producer(r int) sdkmetric.Producer { return readerProducer{a, r} }

type readerProducer struct {
	a *aggregation
	r int
}

func (p readerProducer) Produce(context.Context) ([]metricdata.ScopeMetrics, error) {
	return p.a.produce(p.r), nil
}

// produce is every instrument with a point so far, in the SDK path's
// creation order, each point as the SDK's cumulative aggregation would
// collect it for reader r.
func (a *aggregation) produce(r int) []metricdata.ScopeMetrics {
	now := time.Now()
	perSeries := perSeriesStart()
	start := func(t time.Time) time.Time {
		if perSeries {
			return t
		}
		return a.start
	}
	var ms []metricdata.Metrics
	a.mu.Lock()
	for i, inst := range a.insts {
		var data metricdata.Aggregation
		switch inst.kind {
		case floatHistogram:
			if len(a.floatPts[i]) > 0 {
				data = histogramData(a.floatPts[i], r, now, start)
			}
		case intHistogram:
			if len(a.intPts[i]) > 0 {
				data = histogramData(a.intPts[i], r, now, start)
			}
		case intCounter:
			if pts := a.sumPts[i]; len(pts) > 0 {
				dps := make([]metricdata.DataPoint[int64], len(pts))
				for j, p := range pts {
					dps[j] = metricdata.DataPoint[int64]{Attributes: p.set, StartTime: start(p.start), Time: now, Value: p.value}
				}
				data = metricdata.Sum[int64]{DataPoints: dps, Temporality: metricdata.CumulativeTemporality, IsMonotonic: true}
			}
		}
		if data != nil {
			ms = append(ms, metricdata.Metrics{Name: inst.name, Description: inst.desc, Unit: inst.unit, Data: data})
		}
	}
	a.mu.Unlock()
	if len(ms) == 0 {
		return nil
	}
	return []metricdata.ScopeMetrics{{Scope: instrumentation.Scope{Name: scopeName}, Metrics: ms}}
}

// histogramData copies pts out as the SDK's cumulative histogram for
// reader r.
func histogramData[N int64 | float64](pts []*histPoint[N], r int, now time.Time, start func(time.Time) time.Time) metricdata.Histogram[N] {
	dps := make([]metricdata.HistogramDataPoint[N], len(pts))
	for j, p := range pts {
		dps[j] = metricdata.HistogramDataPoint[N]{
			Attributes:   p.set,
			StartTime:    start(p.start),
			Time:         now,
			Count:        p.count,
			Bounds:       slices.Clone(p.bounds),
			BucketCounts: slices.Clone(p.counts),
			Min:          metricdata.NewExtrema(p.min),
			Max:          metricdata.NewExtrema(p.max),
			Sum:          p.sums[r].collect(),
		}
	}
	return metricdata.Histogram[N]{DataPoints: dps, Temporality: metricdata.CumulativeTemporality}
}
