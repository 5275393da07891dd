package telemetry

import (
	"math"
	"slices"
	"time"

	"github.com/llmesh/llmesh/exchange"
)

// interChunkBuckets is the inter-chunk histogram's layout as the filter
// core counts it: hosts pass it as exchange.Options.GapBuckets (through
// Recorder.GapBuckets), so that every gap of a request reaches the
// histogram, however long the stream.
var interChunkBuckets = func() *exchange.GapBuckets {
	b := slices.Clone(BucketsTPOT)
	slices.Sort(b)
	limits := make([]time.Duration, len(b))
	for i, v := range b {
		limits[i] = durationLimit(v)
	}
	return exchange.NewGapBuckets(limits)
}()

// InterChunkBuckets is the layout of llmesh.inter_chunk.duration for
// exchange.Options.GapBuckets.
func InterChunkBuckets() *exchange.GapBuckets { return interChunkBuckets }

// GapBuckets is InterChunkBuckets: hosts that find this method on their
// recorder set exchange.Options.GapBuckets from it. Nil-safe.
func (r *Recorder) GapBuckets() *exchange.GapBuckets { return interChunkBuckets }

// GapBuckets is InterChunkBuckets.
func (h HostRecorder) GapBuckets() *exchange.GapBuckets { return interChunkBuckets }

// allGaps reports whether the ITL summary's per-bucket counts have gaps
// its samples do not: the request had more gaps than the host kept.
func allGaps(s *exchange.ITLSummary) bool {
	return s.Layout == interChunkBuckets && len(s.Buckets) == interChunkBuckets.Len() && s.Count > len(s.Samples)
}

// observeBuckets adds one request's gaps to p from its per-bucket counts
// (p's bounds are interChunkBuckets'): every gap is counted in its bucket,
// and the sum is the request's exact sum of gaps added at once (the SDK
// path would add them one by one, which can differ in the last bits).
func observeBuckets(p *histPoint[float64], s *exchange.ITLSummary) {
	for i, n := range s.Buckets {
		p.counts[i] += n
	}
	v := s.Sum.Seconds()
	p.sums[0].add(v)
	p.sums[1].add(v)
	if lo := s.Min.Seconds(); p.count == 0 || lo < p.min {
		p.min = lo
	}
	if hi := s.Max.Seconds(); p.count == 0 || hi > p.max {
		p.max = hi
	}
	p.count += uint64(s.Count)
}

// extraGaps calls f for each gap the summary counted beyond its samples,
// with a value in the gap's bucket (its upper limit; the maximum above the
// last one), for the SDK instruments, which take one value per call.
func extraGaps(s *exchange.ITLSummary, f func(time.Duration)) {
	extra := slices.Clone(s.Buckets)
	for _, g := range s.Samples {
		if i := interChunkBuckets.Index(g); extra[i] > 0 {
			extra[i]--
		}
	}
	limits := interChunkBuckets.Limits()
	for i, n := range extra {
		v := s.Max
		if i < len(limits) {
			v = min(limits[i], s.Max)
		}
		for range n {
			f(v)
		}
	}
}

// The inter-chunk histogram gets one gap per token-bearing chunk,
// hundreds per request: through the SDK instrument each was a Record call
// that re-resolved the attribute set (about 0.4 µs each on the
// development machine), more than proxying the chunk. The aggregation
// adds a request's gaps under its one lock with an integer bucket search
// each, which gives the SDK's explicit-bucket histogram exactly.

// durationLimit is the longest duration d with d.Seconds() ≤ b (Seconds
// is monotonic in d, so every shorter one qualifies too). Bounds are
// seconds, from a millisecond to minutes: far inside int64 nanoseconds.
// A gap falls in the first bucket whose limit it does not exceed: the
// SDK's rule on the float value, decided on the integer one.
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

// gapIndex finds a gap's bucket with one table lookup and at most one
// comparison instead of a binary search, whose branches a request's
// varying gaps mispredict: that search was half of what recording a
// 256-chunk request cost. The gaps from 0 to the last limit are cut into
// cells of 2^shift ns, no wider than the closest two limits are apart,
// so a cell holds at most one bucket edge: cells[c] is the bucket of the
// cell's first gap and a gap is in that bucket or the next.
type gapIndex struct {
	limits []time.Duration
	shift  uint
	cells  []uint8 // nil: no table fits maxGapCells; search instead
}

// maxGapCells bounds the table (one byte per cell).
const maxGapCells = 1 << 13

func newGapIndex(limits []time.Duration) gapIndex {
	x := gapIndex{limits: limits}
	if len(limits) == 0 || len(limits) > 255 || limits[0] < 0 {
		return x
	}
	spacing := limits[len(limits)-1] + 1
	for i := 1; i < len(limits); i++ {
		spacing = min(spacing, limits[i]-limits[i-1])
	}
	for x.shift < 62 && time.Duration(1)<<(x.shift+1) <= spacing {
		x.shift++
	}
	n := uint64(limits[len(limits)-1])>>x.shift + 1
	if spacing <= 0 || n > maxGapCells {
		return x
	}
	x.cells = make([]uint8, n)
	for c := range x.cells {
		x.cells[c] = uint8(bucket(limits, time.Duration(uint64(c)<<x.shift)))
	}
	return x
}

// bucket is bucket(x.limits, g).
func (x *gapIndex) bucket(g time.Duration) int {
	if c := uint64(g) >> x.shift; c < uint64(len(x.cells)) {
		b := int(x.cells[c])
		if g > x.limits[b] {
			b++
		}
		return b
	}
	return bucket(x.limits, g)
}

// observeGaps adds one request's gaps (non-empty) to p, whose bounds x
// indexes. It makes two passes over the gaps (they are in L1 by the
// second), so that neither loop has more live values than registers: one
// spilling loop cost twice the instructions. The sums are added gap by
// gap, in order, as the SDK would, so that they are the same floats, for
// every reader, used or not.
func observeGaps(p *histPoint[float64], x *gapIndex, gaps []time.Duration) {
	counts, cells, limits, shift := p.counts, x.cells, x.limits, x.shift
	// Consecutive gaps mostly share a bucket: they are counted in a
	// register and added when the bucket changes, not incremented in
	// memory one by one (each increment waited for the previous one's
	// store).
	cur, run := 0, uint64(0)
	for _, g := range gaps {
		var b int
		if c := uint64(g) >> shift; c < uint64(len(cells)) {
			// b+1 when g > limits[b], without a branch (one that gaps
			// near a bucket edge would mispredict): the difference's
			// sign bit. Both are within the table's few seconds, so
			// the difference cannot overflow.
			b = int(cells[c])
			b += int(uint64(limits[b]-g) >> 63)
		} else {
			b = bucket(limits, g)
		}
		if b != cur {
			counts[cur] += run
			cur, run = b, 0
		}
		run++
	}
	counts[cur] += run
	// Min and max are taken on the durations and converted once: Seconds
	// is monotonic, so that is the same value.
	lo, hi := gaps[0], gaps[0]
	f0, f1 := p.sums[0].f, p.sums[1].f
	for _, g := range gaps {
		// sdkSum.add of g.Seconds(). A gap under a second is
		// float64(g)/1e9 (Seconds adds that to 0 seconds) and not
		// whole, which saves the division into seconds and
		// nanoseconds. A gap of 0 is whole and adds 0 to the integer:
		// nothing, and adding 0.0 to the float changes nothing either
		// (it is never -0: values are added to +0 and a sum that
		// cancels rounds to +0), so zero gaps, which come mixed with
		// others when several chunks arrive in one read, take the same
		// path: a branch between them mispredicted about every other
		// gap.
		if uint64(g) < uint64(time.Second) {
			v := float64(g) / 1e9
			f0 += v
			f1 += v
		} else {
			p.sums[0].f, p.sums[1].f = f0, f1
			v := g.Seconds()
			p.sums[0].add(v)
			p.sums[1].add(v)
			f0, f1 = p.sums[0].f, p.sums[1].f
		}
		lo, hi = min(lo, g), max(hi, g)
	}
	p.sums[0].f, p.sums[1].f = f0, f1
	if vlo := lo.Seconds(); p.count == 0 || vlo < p.min {
		p.min = vlo
	}
	if vhi := hi.Seconds(); p.count == 0 || vhi > p.max {
		p.max = vhi
	}
	p.count += uint64(len(gaps))
}
