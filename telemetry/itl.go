package telemetry

import (
	"context"
	"math"
	"slices"
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
	// limits[i] is the longest gap whose Seconds() is ≤ bounds[i]: a gap
	// falls in the first bucket whose limit it does not exceed, the
	// SDK's rule on the float value, decided on the integer one.
	limits []time.Duration
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
	h := &itlHistogram{bounds: slices.Clone(bounds), start: time.Now(), points: map[attribute.Distinct]*itlPoint{}}
	for _, b := range h.bounds {
		h.limits = append(h.limits, durationLimit(b))
	}
	return h
}

// durationLimit is the longest duration d with d.Seconds() ≤ b (Seconds
// is monotonic in d, so every shorter one qualifies too). Bounds are
// seconds, from a millisecond to minutes: far inside int64 nanoseconds.
func durationLimit(b float64) time.Duration {
	d := time.Duration(math.Floor(b * float64(time.Second)))
	for d.Seconds() > b {
		d--
	}
	for (d + 1).Seconds() <= b {
		d++
	}
	return d
}

// bucket is the index of the first limit ≥ g, len(limits) when none is.
func bucket(limits []time.Duration, g time.Duration) int {
	lo, hi := 0, len(limits)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if limits[mid] < g {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// record adds one request's gaps under s's label set. The point is
// looked up once per series and kept in it.
func (h *itlHistogram) record(s *series, gaps []time.Duration) {
	if len(gaps) == 0 {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	p := s.itl
	if p == nil {
		p = h.points[s.set.Equivalent()]
		if p == nil {
			p = &itlPoint{set: s.set, counts: make([]uint64, len(h.bounds)+1)}
			h.points[s.set.Equivalent()] = p
			h.order = append(h.order, p)
		}
		s.itl = p
	}
	// A request's gaps are alike, so the previous gap's bucket is tried
	// before a search. Min and max are taken on the durations and
	// converted once: Seconds is monotonic, so that is the same value.
	lo, hi := gaps[0], gaps[0]
	b := bucket(h.limits, gaps[0])
	for _, g := range gaps {
		if !(b < len(h.limits) && g <= h.limits[b] && (b == 0 || g > h.limits[b-1])) {
			b = bucket(h.limits, g)
		}
		p.counts[b]++
		p.sum += g.Seconds()
		lo, hi = min(lo, g), max(hi, g)
	}
	if vlo := lo.Seconds(); p.count == 0 || vlo < p.min {
		p.min = vlo
	}
	if vhi := hi.Seconds(); p.count == 0 || vhi > p.max {
		p.max = vhi
	}
	p.count += uint64(len(gaps))
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
