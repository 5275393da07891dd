package telemetry

import (
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/llmesh/llmesh/filter"
)

// series holds, for one (class, model) label pair, every attribute set
// the Recorder records under, each wrapped as a measurement option once.
// Building a set per measurement (sorting, deduplicating and hashing its
// attributes, then allocating it) was most of what recording a request
// cost; the sets a request can need are few and known in advance: the
// outcome is one of the observer's error kinds and SLO attainment a bool.
// A series is immutable once made, except itl, which the itlHistogram
// guards with its own lock.
type series struct {
	set attribute.Set // class, model
	slo filter.Class
	// base is set as a measurement option: every instrument labelled by
	// class and model alone. The options are kept as the variadic slices
	// the instruments take, so that passing them allocates nothing.
	base []metric.RecordOption
	// baseAdd is base for counters.
	baseAdd []metric.AddOption
	// input and output add gen_ai.token.type to base.
	input, output []metric.RecordOption
	// duration[k] is base for a success, base plus error.type for error
	// kind k (errorIndex).
	duration [][]metric.RecordOption
	// requests[k][met] adds llmesh.outcome (error kind k, "ok" for none)
	// and llmesh.slo.met.
	requests [][2][]metric.AddOption
	// violations adds llmesh.slo, indexed by sloTTFT, sloTPOT, sloFailed.
	violations [3][]metric.AddOption

	// itl is this series' inter-chunk histogram point, made at its first
	// gap; guarded by the itlHistogram's lock.
	itl *itlPoint
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
	for n < 255 && filter.ErrorKind(n).String() != filter.ErrorKind(255).String() {
		n++
	}
	return n + 1
}()

// errorIndex maps an error kind to its slot in series' tables.
func errorIndex(k filter.ErrorKind) int {
	if int(k) >= errorKinds-1 {
		return errorKinds - 1
	}
	return int(k)
}

// errorName is the error.type and llmesh.outcome value of slot i
// ("" for success).
func errorName(i int) string {
	if i == errorKinds-1 {
		return filter.ErrorKind(255).String()
	}
	return filter.ErrorKind(i).String()
}

func newSeries(class, model string, slo filter.Class) *series {
	c, m := AttrClass.String(class), AttrModel.String(model)
	set := func(kvs ...attribute.KeyValue) metric.MeasurementOption {
		return metric.WithAttributeSet(attribute.NewSet(append([]attribute.KeyValue{c, m}, kvs...)...))
	}
	rec := func(kvs ...attribute.KeyValue) []metric.RecordOption { return []metric.RecordOption{set(kvs...)} }
	add := func(kvs ...attribute.KeyValue) []metric.AddOption { return []metric.AddOption{set(kvs...)} }
	s := &series{
		set:        attribute.NewSet(c, m),
		slo:        slo,
		base:       rec(),
		baseAdd:    add(),
		input:      rec(AttrTokenType.String("input")),
		output:     rec(AttrTokenType.String("output")),
		duration:   make([][]metric.RecordOption, errorKinds),
		requests:   make([][2][]metric.AddOption, errorKinds),
		violations: [3][]metric.AddOption{add(AttrSLO.String("ttft")), add(AttrSLO.String("tpot")), add(AttrSLO.String("failed"))},
	}
	for i := range errorKinds {
		name := errorName(i)
		outcome := name
		if name == "" {
			outcome = "ok"
			s.duration[i] = s.base
		} else {
			s.duration[i] = rec(AttrErrorType.String(name))
		}
		for met := range 2 {
			s.requests[i][met] = add(attribute.String("llmesh.outcome", outcome), AttrSLOMet.Bool(met == 1))
		}
	}
	return s
}
