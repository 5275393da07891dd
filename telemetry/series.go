package telemetry

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/llmesh/llmesh/exchange"
)

// series holds, for one (class, model) label pair, every attribute set
// the Recorder records under. Building a set per measurement (sorting,
// deduplicating and hashing its attributes, then allocating it) was most
// of what recording a request cost through the SDK; the sets a request
// can need are few and known in advance: the outcome is one of the
// observer's error kinds and SLO attainment a bool. A series is immutable
// once made, except pts, which the aggregation guards with its lock.
type series struct {
	// What recording a request reads comes first, so that it shares
	// cache lines: the key (Recorder.last compares it), the SLO, then
	// the aggregation's points.
	class, model string
	slo          exchange.Class
	// pts are this series' data points in the aggregation, each made at
	// its first measurement; guarded by the aggregation's lock.
	pts seriesPoints

	set  attribute.Set // class, model
	sets seriesSets

	// The SDK path's measurement options (nil in an aggregating
	// Recorder), kept as the variadic slices the instruments take, so
	// that passing them allocates nothing. base is set: every instrument
	// labelled by class and model alone; baseAdd is base for counters.
	base    []metric.RecordOption
	baseAdd []metric.AddOption
	// input and output are sets.input and sets.output.
	input, output []metric.RecordOption
	// duration, requests and violations are sets' of the same names.
	duration   [][]metric.RecordOption
	requests   [][2][]metric.AddOption
	violations [3][]metric.AddOption
}

// seriesSets are a series' attribute sets beyond class and model.
type seriesSets struct {
	// input and output add gen_ai.token.type.
	input, output attribute.Set
	// duration[k] is the class/model set for a success, plus error.type
	// for error kind k (errorIndex).
	duration []attribute.Set
	// requests[k][met] adds llmesh.outcome (error kind k, "ok" for none)
	// and llmesh.slo.met.
	requests [][2]attribute.Set
	// violations adds llmesh.slo, indexed by sloTTFT, sloTPOT, sloFailed.
	violations [3]attribute.Set
}

// seriesPoints are a series' points in the aggregation, laid out like
// seriesSets; nil until the first measurement under the set (a point
// past the cardinality limit is the instrument's shared overflow point).
type seriesPoints struct {
	queue, ttft, upTTFT, tpot, itl *histPoint[float64]
	steps                          *histPoint[int64]
	tokens                         [2]*histPoint[int64] // input, output
	duration                       []*histPoint[float64]
	requests                       [][2]*sumPoint
	violations                     [3]*sumPoint
	preemptions                    *sumPoint
	// own holds the points a successful request records into, in the
	// series itself, their bucket counts in one array made with it: a
	// request's recording then touches a few adjacent cache lines
	// instead of a dozen scattered objects, which is what it costs once
	// the streaming of the response has evicted them.
	own ownPoints
}

// ownPoints are the points seriesPoints keep in place.
type ownPoints struct {
	queue, ttft, upTTFT, tpot, itl, durationOK histPoint[float64]
	steps                                      histPoint[int64]
	tokens                                     [2]histPoint[int64]
	requestsOK                                 [2]sumPoint
	violations                                 [3]sumPoint
	preemptions                                sumPoint
}

// durationOf is the in-place duration point of error kind k, nil for
// failures (they get points of their own when they come).
func (o *ownPoints) durationOf(k int) *histPoint[float64] {
	if k == 0 {
		return &o.durationOK
	}
	return nil
}

// requestsOf is durationOf for the requests counter.
func (o *ownPoints) requestsOf(k, met int) *sumPoint {
	if k == 0 {
		return &o.requestsOK[met]
	}
	return nil
}

// prepare gives the in-place histogram points their bounds and bucket
// counts, one array for all.
func (o *ownPoints) prepare(a *aggregation) {
	fs := []struct {
		p *histPoint[float64]
		i int
	}{{&o.queue, iQueue}, {&o.ttft, iTTFT}, {&o.upTTFT, iUpTTFT}, {&o.tpot, iTPOT}, {&o.itl, iITL}, {&o.durationOK, iDuration}}
	is := []struct {
		p *histPoint[int64]
		i int
	}{{&o.steps, iSteps}, {&o.tokens[0], iTokens}, {&o.tokens[1], iTokens}}
	n := 0
	for _, f := range fs {
		n += len(a.insts[f.i].bounds) + 1
	}
	for _, f := range is {
		n += len(a.insts[f.i].bounds) + 1
	}
	slab := make([]uint64, n)
	take := func(i int) ([]float64, []uint64) {
		b := a.insts[i].bounds
		c := slab[: len(b)+1 : len(b)+1]
		slab = slab[len(b)+1:]
		return b, c
	}
	for _, f := range fs {
		f.p.bounds, f.p.counts = take(f.i)
	}
	for _, f := range is {
		f.p.bounds, f.p.counts = take(f.i)
	}
}

// Indexes of series.violations.
const (
	sloTTFT = iota
	sloTPOT
	sloFailed
)

// errorKinds is the number of error kinds with a name of their own, plus
// one slot for the rest ("unknown"); computed rather than written down so
// that a kind added to filter gets its own label.
var errorKinds = func() int {
	n := 0
	for n < 255 && exchange.ErrorKind(n).String() != exchange.ErrorKind(255).String() {
		n++
	}
	return n + 1
}()

// errorIndex maps an error kind to its slot in series' tables.
func errorIndex(k exchange.ErrorKind) int {
	if int(k) >= errorKinds-1 {
		return errorKinds - 1
	}
	return int(k)
}

// errorName is the error.type and llmesh.outcome value of slot i
// ("" for success).
func errorName(i int) string {
	if i == errorKinds-1 {
		return exchange.ErrorKind(255).String()
	}
	return exchange.ErrorKind(i).String()
}

// newSeries builds the series of class and model; sdk adds the SDK
// path's measurement options, a non-nil agg the aggregation's points.
func newSeries(class, model string, slo exchange.Class, sdk bool, agg *aggregation) *series {
	c, m := AttrClass.String(class), AttrModel.String(model)
	set := func(kvs ...attribute.KeyValue) attribute.Set {
		return attribute.NewSet(append([]attribute.KeyValue{c, m}, kvs...)...)
	}
	s := &series{
		class: class,
		model: model,
		set:   set(),
		slo:   slo,
		sets: seriesSets{
			input:      set(AttrTokenType.String("input")),
			output:     set(AttrTokenType.String("output")),
			duration:   make([]attribute.Set, errorKinds),
			requests:   make([][2]attribute.Set, errorKinds),
			violations: [3]attribute.Set{set(AttrSLO.String("ttft")), set(AttrSLO.String("tpot")), set(AttrSLO.String("failed"))},
		},
	}
	for i := range errorKinds {
		name := errorName(i)
		outcome := name
		if name == "" {
			outcome = "ok"
			s.sets.duration[i] = s.set
		} else {
			s.sets.duration[i] = set(AttrErrorType.String(name))
		}
		for met := range 2 {
			s.sets.requests[i][met] = set(attribute.String("llmesh.outcome", outcome), AttrSLOMet.Bool(met == 1))
		}
	}
	if agg != nil {
		s.pts.duration = make([]*histPoint[float64], errorKinds)
		s.pts.requests = make([][2]*sumPoint, errorKinds)
		s.pts.own.prepare(agg)
	}
	if !sdk {
		return s
	}
	rec := func(set attribute.Set) []metric.RecordOption {
		return []metric.RecordOption{metric.WithAttributeSet(set)}
	}
	add := func(set attribute.Set) []metric.AddOption { return []metric.AddOption{metric.WithAttributeSet(set)} }
	s.base, s.baseAdd = rec(s.set), add(s.set)
	s.input, s.output = rec(s.sets.input), rec(s.sets.output)
	s.duration = make([][]metric.RecordOption, errorKinds)
	s.requests = make([][2][]metric.AddOption, errorKinds)
	for i := range errorKinds {
		s.duration[i] = rec(s.sets.duration[i])
		for met := range 2 {
			s.requests[i][met] = add(s.sets.requests[i][met])
		}
	}
	for i, v := range s.sets.violations {
		s.violations[i] = add(v)
	}
	return s
}
