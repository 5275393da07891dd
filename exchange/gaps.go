package exchange

import (
	"slices"
	"time"
)

// GapBuckets is a histogram layout for the gaps between token-bearing
// chunks: upper-inclusive limits, plus one bucket above the last. An
// Observer given one (Options.GapBuckets) counts every gap of its request
// into ITLSummary.Buckets, so that a metrics histogram with these bounds
// gets every gap of a long stream, not only the first MaxITLSamples.
type GapBuckets struct {
	limits []time.Duration
}

// NewGapBuckets returns the layout with these limits (copied and sorted).
func NewGapBuckets(limits []time.Duration) *GapBuckets {
	l := slices.Clone(limits)
	slices.Sort(l)
	return &GapBuckets{limits: l}
}

// Limits returns the upper-inclusive limits (not to be modified).
func (b *GapBuckets) Limits() []time.Duration { return b.limits }

// Len is the number of buckets: one per limit and one above them all.
func (b *GapBuckets) Len() int { return len(b.limits) + 1 }

// Index is the bucket of gap g: the first whose limit g does not exceed,
// Len()-1 above every limit.
func (b *GapBuckets) Index(g time.Duration) int {
	lo, hi := 0, len(b.limits)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if b.limits[mid] < g {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}
