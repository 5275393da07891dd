package telemetry

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/instrumentation"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

// itlHistogram is llmesh.inter_chunk.duration aggregated by the Recorder
// itself and handed to the Provider's readers as a Producer. A request
// brings one gap per token-bearing chunk, hundreds per request; through
// the SDK instrument each gap is a Record call that re-resolves the
// attribute set (about 0.4 µs each on the development machine), which
// made recording the ITL of a request cost more than proxying its
// chunks. Here a request's gaps are added under one lock with a bucket
// search each. The result is the SDK's explicit-bucket histogram exactly:
// cumulative, buckets upper-inclusive, with count, sum, min and max.
type itlHistogram struct {
	bounds []float64
	start  time.Time

	mu     sync.Mutex
	points map[attribute.Distinct]*itlPoint
	order  []*itlPoint // first-seen order, for a stable output
}

type itlPoint struct {
	set      attribute.Set
	counts   []uint64 // len(bounds)+1
	count    uint64
	sum      float64
	min, max float64
}

func newITLHistogram(bounds []float64) *itlHistogram {
	return &itlHistogram{bounds: slices.Clone(bounds), start: time.Now(), points: map[attribute.Distinct]*itlPoint{}}
}

// record adds one request's gaps under set.
func (h *itlHistogram) record(set attribute.Set, gaps []time.Duration) {
	if len(gaps) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	p := h.points[set.Equivalent()]
	if p == nil {
		p = &itlPoint{set: set, counts: make([]uint64, len(h.bounds)+1)}
		h.points[set.Equivalent()] = p
		h.order = append(h.order, p)
	}
	for _, g := range gaps {
		v := g.Seconds()
		// The SDK's rule: the first bucket whose upper bound is ≥ v.
		p.counts[sort.SearchFloat64s(h.bounds, v)]++
		if p.count == 0 || v < p.min {
			p.min = v
		}
		if p.count == 0 || v > p.max {
			p.max = v
		}
		p.count++
		p.sum += v
	}
}

// Produce implements sdkmetric.Producer: the histogram so far, one data
// point per label set; nothing before the first gap.
func (h *itlHistogram) Produce(context.Context) ([]metricdata.ScopeMetrics, error) {
	now := time.Now()
	h.mu.Lock()
	dps := make([]metricdata.HistogramDataPoint[float64], 0, len(h.order))
	for _, p := range h.order {
		dps = append(dps, metricdata.HistogramDataPoint[float64]{
			Attributes:   p.set,
			StartTime:    h.start,
			Time:         now,
			Count:        p.count,
			Bounds:       slices.Clone(h.bounds),
			BucketCounts: slices.Clone(p.counts),
			Min:          metricdata.NewExtrema(p.min),
			Max:          metricdata.NewExtrema(p.max),
			Sum:          p.sum,
		})
	}
	h.mu.Unlock()
	if len(dps) == 0 {
		return nil, nil
	}
	return []metricdata.ScopeMetrics{{
		Scope: instrumentation.Scope{Name: scopeName},
		Metrics: []metricdata.Metrics{{
			Name:        MetricInterChunk,
			Description: descInterChunk,
			Unit:        "s",
			Data: metricdata.Histogram[float64]{
				Temporality: metricdata.CumulativeTemporality,
				DataPoints:  dps,
			},
		}},
	}}, nil
}
