package telemetry

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/llmesh/llmesh/exchange"
)

// aggPair is a Recorder on SDK instruments and one on the aggregation,
// each with two manual readers (as a Provider with Prometheus and OTLP
// has two), for recording the same requests into both.
type aggPair struct {
	sdk, agg               *Recorder
	sdkReaders, aggReaders [maxReaders]*sdkmetric.ManualReader
}

func newAggPair(t *testing.T, opts RecorderOptions) aggPair {
	t.Helper()
	var p aggPair
	var err error
	a := newAggregation(maxReaders)
	var sdkOpts, aggOpts []sdkmetric.Option
	for r := range maxReaders {
		p.sdkReaders[r] = sdkmetric.NewManualReader()
		p.aggReaders[r] = sdkmetric.NewManualReader(sdkmetric.WithProducer(a.producer(r)))
		sdkOpts = append(sdkOpts, sdkmetric.WithReader(p.sdkReaders[r]))
		aggOpts = append(aggOpts, sdkmetric.WithReader(p.aggReaders[r]))
	}
	p.sdk, err = NewRecorder(sdkmetric.NewMeterProvider(sdkOpts...), nil, opts)
	if err != nil {
		t.Fatal(err)
	}
	p.agg, err = newRecorder(sdkmetric.NewMeterProvider(aggOpts...), nil, opts, a)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (p aggPair) record(obs exchange.Observation, class, model string) {
	p.sdk.Record(obs, class, model)
	p.agg.Record(obs, class, model)
}

// check collects reader r of both sides and requires the same metrics,
// data point for data point (timestamps aside); it returns the number
// of metrics.
func (p aggPair) check(t *testing.T, r int) int {
	t.Helper()
	want, got := collect(t, p.sdkReaders[r]), collect(t, p.aggReaders[r])
	for name, w := range want {
		metricdatatest.AssertEqual(t, w, got[name], metricdatatest.IgnoreTimestamp())
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("aggregation produced %s, the SDK did not", name)
		}
	}
	return len(want)
}

// TestITLHistogramMatchesSDK records the same requests through the SDK
// instrument and through the Recorder's own aggregation and checks that
// readers see the same inter-chunk histogram: buckets (gaps on and around
// bounds), count, sum, min, max and labels.
func TestITLHistogramMatchesSDK(t *testing.T) {
	p := newAggPair(t, RecorderOptions{})
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	reqs := []struct {
		class, model string
		gaps         []time.Duration
	}{
		{"a", "m", []time.Duration{ms(1), ms(10), ms(10.000001), ms(0.5), 3 * time.Second, 0}},
		{"b", "m", []time.Duration{ms(25), ms(2500)}},
		{"a", "m", []time.Duration{ms(7.5), ms(49.9)}},
		{"a", "n", nil},
		// Zeros mixed with others (several chunks in one read), and
		// gaps that went backwards (a host clock stepped).
		{"b", "m", []time.Duration{0, ms(0.02), 0, 0, ms(0.05), 0, -ms(3), 0, ms(2), -time.Second, 0, 2 * time.Second}},
	}
	for _, r := range reqs {
		p.record(exchange.Observation{ITL: exchange.ITLSummary{Samples: r.gaps}}, r.class, r.model)
	}
	if got := collect(t, p.aggReaders[1])[MetricInterChunk]; got.Name == "" {
		t.Fatal("no inter-chunk histogram from the aggregation")
	}
	p.check(t, 0)
}

// randomObservation is a request with every field the Recorder reads
// drawn at random: values on, beside and between bucket bounds, zero and
// absent values, every error kind and one beyond the named ones.
func randomObservation(rng *rand.Rand) exchange.Observation {
	dur := func(bounds []float64) time.Duration {
		switch rng.IntN(5) {
		case 0: // on or beside a bound
			return durationLimit(bounds[rng.IntN(len(bounds))]) + time.Duration(rng.IntN(3)-1)
		case 1:
			return 0
		case 2: // whole seconds: the SDK sums those apart from the rest
			return time.Duration(1+rng.IntN(3)) * time.Second
		default:
			return time.Duration(rng.Int64N(int64(2 * bounds[len(bounds)-1] * float64(time.Second))))
		}
	}
	count := func(bounds []float64) int {
		if rng.IntN(3) == 0 {
			return int(bounds[rng.IntN(len(bounds))]) + rng.IntN(3) - 1
		}
		return rng.IntN(5000)
	}
	var obs exchange.Observation
	obs.Received = at(0)
	if rng.IntN(4) > 0 {
		obs.Admitted, obs.QueueTime = at(1), dur(BucketsQueue)
	}
	if rng.IntN(4) > 0 {
		obs.UpstreamSent = at(2)
	}
	obs.HasTTFT = rng.IntN(5) > 0
	obs.TTFT, obs.UpstreamTTFT = dur(BucketsTTFT), dur(BucketsTTFT)
	obs.DecodeSteps = count(BucketsSteps)
	obs.HasTPOT = rng.IntN(5) > 0
	obs.TPOT = dur(BucketsTPOT)
	obs.PromptTokens, obs.OutputTokens = max(0, count(BucketsTokens)), max(0, count(BucketsTokens))
	if rng.IntN(5) == 0 {
		obs.E2E = 0
	} else {
		obs.E2E = dur(BucketsDuration)
	}
	if rng.IntN(2) == 0 {
		obs.ErrorKind = exchange.ErrorKind(rng.IntN(errorKinds + 1))
	}
	if n := rng.IntN(24); n > 0 && rng.IntN(4) > 0 {
		obs.ITL.Samples = make([]time.Duration, n)
		for i := range obs.ITL.Samples {
			obs.ITL.Samples[i] = dur(BucketsTPOT)
		}
	}
	return obs
}

// TestAggregationMatchesSDK records the same random requests, preemptions
// and relocations through the SDK instruments and through the Recorder's
// aggregation, over classes with and without SLOs and more models than
// the cap, and requires every collected metric to be the same: names,
// descriptions, units, temporality, monotonicity, attribute sets, bucket
// counts, count, sum, min and max. One reader collects often, the other
// rarely: a float sum depends on when its reader collected.
func TestAggregationMatchesSDK(t *testing.T) {
	p := newAggPair(t, RecorderOptions{Classes: classes, MaxModels: 3})
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 1500 {
		if i%251 == 0 {
			p.check(t, 0)
		}
		if i%700 == 0 {
			p.check(t, 1)
		}
		class := []string{"interactive", "batch", "unlisted"}[rng.IntN(3)]
		model := "m" + strconv.Itoa(rng.IntN(6))
		p.record(randomObservation(rng), class, model)
		if rng.IntN(10) == 0 {
			p.sdk.Preempted(class, model)
			p.agg.Preempted(class, model)
		}
		if rng.IntN(20) == 0 {
			proto, n := []string{"grpc", "http"}[rng.IntN(2)], rng.Int64N(1<<20)
			p.sdk.Relocated(proto, n)
			p.agg.Relocated(proto, n)
		}
	}
	for r := range maxReaders {
		if n := p.check(t, r); n != 13 {
			t.Errorf("reader %d: %d metrics collected, want all 13", r, n)
		}
	}
}

// TestAggregationCardinalityLimit sets the SDK's cardinality limit low
// and records more attribute sets than it admits: the aggregation must
// count the surplus in the same overflow points as the SDK.
func TestAggregationCardinalityLimit(t *testing.T) {
	for _, limit := range []string{"1", "5", "-1"} {
		t.Run(limit, func(t *testing.T) {
			t.Setenv("OTEL_GO_X_CARDINALITY_LIMIT", limit)
			p := newAggPair(t, RecorderOptions{Classes: classes})
			rng := rand.New(rand.NewPCG(3, 4))
			for i := range 200 {
				class, model := "c"+strconv.Itoa(i%7), "m"+strconv.Itoa(i%5)
				p.record(randomObservation(rng), class, model)
				p.sdk.Preempted(class, model)
				p.agg.Preempted(class, model)
			}
			p.check(t, 0)
			if limit == "5" {
				found := false
				for _, dp := range collect(t, p.aggReaders[1])[MetricRequests].Data.(metricdata.Sum[int64]).DataPoints {
					found = found || dp.Attributes.Equals(&overflowSet)
				}
				if !found {
					t.Error("no overflow point in llmesh.requests")
				}
			}
		})
	}
}

// BenchmarkRecordLong records a 256-token request (255 gaps) into all
// instruments with the Prometheus exporter attached, as the gateway does.
// sdk records through a second Recorder on the same provider whose
// measurements go through the SDK instruments (the path before the
// Recorder aggregated them), for A/B in one run.
func BenchmarkRecordLong(b *testing.B) {
	obs := exchange.Observation{Received: at(0), Admitted: at(1), UpstreamSent: at(2), FirstToken: at(50), End: at(2600),
		HasTTFT: true, TTFT: 50 * time.Millisecond, HasTPOT: true, TPOT: 10 * time.Millisecond, OutputTokens: 256,
		PromptTokens: 100, DecodeSteps: 255, ITL: exchange.ITLSummary{Samples: make([]time.Duration, 255)}}
	for i := range obs.ITL.Samples {
		obs.ITL.Samples[i] = time.Duration(5+i%20) * time.Millisecond
	}
	p, err := New(context.Background(), Options{Prometheus: true, Recorder: RecorderOptions{Classes: classes}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	if p.Recorder.agg == nil {
		b.Fatal("the Prometheus-only provider does not aggregate")
	}
	sdkRec, err := NewRecorder(p.MeterProvider, p.TracerProvider, RecorderOptions{Classes: classes})
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		rec  *Recorder
	}{{"aggregated", p.Recorder}, {"sdk", sdkRec}} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				tc.rec.Record(obs, "interactive", "llama")
			}
		})
	}
}

// TestBucketMatchesFloatSearch checks the integer bucket search against
// the SDK's rule on the float value (the first bound ≥ the gap's
// seconds) at and around every bound and on a spread of other gaps, and
// searchBound against sort.SearchFloat64s.
func TestBucketMatchesFloatSearch(t *testing.T) {
	a := newAggregation(1)
	bounds := a.insts[iITL].bounds
	var gaps []time.Duration
	for _, l := range a.itl.limits {
		for d := -3; d <= 3; d++ {
			gaps = append(gaps, l+time.Duration(d))
		}
	}
	if len(a.itl.cells) == 0 {
		t.Fatal("no gap index table for the inter-chunk bounds")
	}
	for c := range len(a.itl.cells) + 1 {
		edge := time.Duration(c) << a.itl.shift
		gaps = append(gaps, edge-1, edge)
	}
	for g := time.Duration(0); g < 4*time.Second; g = g*5/4 + 7 {
		gaps = append(gaps, g)
	}
	gaps = append(gaps, -time.Millisecond, time.Duration(math.MaxInt64))
	want := make([]uint64, len(bounds)+1)
	for _, g := range gaps {
		w := sort.SearchFloat64s(bounds, g.Seconds())
		want[w]++
		if got := bucket(a.itl.limits, g); got != w {
			t.Errorf("gap %d ns (%v s): bucket %d, float search %d", int64(g), g.Seconds(), got, w)
		}
		if got := a.itl.bucket(g); got != w {
			t.Errorf("gap %d ns (%v s): gap index %d, float search %d", int64(g), g.Seconds(), got, w)
		}
		if got := searchBound(bounds, g.Seconds()); got != w {
			t.Errorf("searchBound(%v) = %d, sort.SearchFloat64s %d", g.Seconds(), got, w)
		}
	}
	for _, v := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), math.Copysign(0, -1)} {
		if got, w := searchBound(bounds, v), sort.SearchFloat64s(bounds, v); got != w {
			t.Errorf("searchBound(%v) = %d, sort.SearchFloat64s %d", v, got, w)
		}
	}
	// The same gaps as one request in ascending and one in descending
	// order, through observeGaps.
	s := newSeries("c", "m", exchange.Class{}, false, a)
	a.record(s, &exchange.Observation{ITL: exchange.ITLSummary{Samples: gaps}}, 0, SLOResult{})
	desc := slices.Clone(gaps)
	slices.Reverse(desc)
	a.record(s, &exchange.Observation{ITL: exchange.ITLSummary{Samples: desc}}, 0, SLOResult{})
	for i := range want {
		want[i] *= 2
	}
	if !slices.Equal(s.pts.itl.counts, want) {
		t.Errorf("recorded counts %v, want %v", s.pts.itl.counts, want)
	}
}

// TestGapIndexShapes checks the gap index on bounds that get no table
// (too many cells, too many bounds, a negative bound) and on bounds a
// nanosecond apart, against the binary search, at and around every
// limit and cell edge.
func TestGapIndexShapes(t *testing.T) {
	many := make([]time.Duration, 300)
	for i := range many {
		many[i] = time.Duration(i+1) * time.Millisecond
	}
	for _, tc := range []struct {
		name   string
		limits []time.Duration
		table  bool
	}{
		{"wide", []time.Duration{time.Millisecond, time.Hour}, true},
		{"huge", []time.Duration{time.Millisecond, 2 * time.Millisecond, time.Hour}, false},
		{"many", many, false},
		{"negative", []time.Duration{-5, 10, 20}, false},
		{"adjacent", []time.Duration{0, 1, 2, 3, 100, 101}, true},
		{"one", []time.Duration{7}, true},
		{"tpot", newAggregation(1).itl.limits, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := newGapIndex(tc.limits)
			if (x.cells != nil) != tc.table {
				t.Fatalf("table %v, want %v", x.cells != nil, tc.table)
			}
			var gaps []time.Duration
			for _, l := range tc.limits {
				for d := -2; d <= 2; d++ {
					gaps = append(gaps, l+time.Duration(d))
				}
			}
			for c := range len(x.cells) + 1 {
				edge := time.Duration(c) << x.shift
				gaps = append(gaps, edge-1, edge, edge+1)
			}
			gaps = append(gaps, math.MinInt64, -1, 0, math.MaxInt64)
			for _, g := range gaps {
				if got, want := x.bucket(g), bucket(tc.limits, g); got != want {
					t.Errorf("gap %d: index %d, search %d", int64(g), got, want)
				}
			}
		})
	}
}

// BenchmarkObserveGaps is the inter-chunk part of recording a 256-chunk
// request, per request, for two shapes of gaps: "decode", 5–24 ms as an
// engine's decode steps bring them, and "burst", half of them 0 and the
// others up to 90 µs, as a stream arriving faster than it is read brings
// them (several chunks per read share a timestamp; the upstream of
// BenchmarkProxyCPUPerChunk gives about that). Each shape cycles through
// 64 requests of random gaps, so that the branch predictor cannot learn
// one request's pattern.
func BenchmarkObserveGaps(b *testing.B) {
	rng := rand.New(rand.NewPCG(8, 9))
	var decode, burst [64][]time.Duration
	for r := range decode {
		decode[r], burst[r] = make([]time.Duration, 255), make([]time.Duration, 255)
		for i := range decode[r] {
			decode[r][i] = 5*time.Millisecond + time.Duration(rng.IntN(20_000_000))
			if rng.IntN(2) == 0 {
				burst[r][i] = time.Duration(rng.IntN(90_000))
			}
		}
	}
	for _, tc := range []struct {
		name string
		reqs *[64][]time.Duration
	}{{"decode", &decode}, {"burst", &burst}} {
		b.Run(tc.name, func(b *testing.B) {
			a := newAggregation(1)
			s := newSeries("c", "m", exchange.Class{}, false, a)
			p := a.floatPoint(&s.pts.itl, &s.pts.own.itl, iITL, s.set)
			i := 0
			for b.Loop() {
				observeGaps(p, &a.itl, tc.reqs[i%len(tc.reqs)])
				i++
			}
		})
	}
}

// FuzzGapIndex checks the gap index and observeGaps against the plain
// rules on fuzzer-chosen bounds and gaps: each gap's bucket is the binary
// search's, the counts are the per-gap buckets', and the sums, min and
// max are what sdkSum.add of each gap's Seconds, in order, makes.
func FuzzGapIndex(f *testing.F) {
	f.Add([]byte{1, 2, 3}, []byte{0, 0, 0, 0, 0, 0, 0, 1, 255, 255, 255, 255, 255, 255, 255, 127})
	f.Add([]byte{10, 10, 200}, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0})
	f.Add([]byte{}, []byte{1, 2, 3, 4, 5, 6, 7, 8})
	f.Fuzz(func(t *testing.T, spacing, raw []byte) {
		// Bounds from the spacing bytes: increasing, in ms-ish steps of
		// varied scale (so that some get a table and some do not).
		var bounds []float64
		v := 0.0
		for i, s := range spacing {
			if i >= 40 {
				break
			}
			v += float64(s) * math.Pow(10, float64(i%7)-6)
			if len(bounds) == 0 || v > bounds[len(bounds)-1] {
				bounds = append(bounds, v)
			}
		}
		var limits []time.Duration
		for _, b := range bounds {
			limits = append(limits, durationLimit(b))
		}
		x := newGapIndex(limits)
		var gaps []time.Duration
		for i := 0; i+8 <= len(raw) && len(gaps) < 300; i += 8 {
			g := time.Duration(int64(uint64(raw[i]) | uint64(raw[i+1])<<8 | uint64(raw[i+2])<<16 | uint64(raw[i+3])<<24 |
				uint64(raw[i+4])<<32 | uint64(raw[i+5])<<40 | uint64(raw[i+6])<<48 | uint64(raw[i+7])<<56))
			if raw[i]%3 == 0 { // keep many within the table's range
				g %= 3 * time.Second
			}
			gaps = append(gaps, g)
		}
		p := &histPoint[float64]{bounds: bounds, counts: make([]uint64, len(bounds)+1)}
		p.sums[1] = sdkSum[float64]{f: 0.25, i: 3} // a reader that collected before
		want := *p
		want.counts = make([]uint64, len(bounds)+1)
		for _, g := range gaps {
			b := bucket(limits, g)
			if got := x.bucket(g); got != b {
				t.Fatalf("bounds %v gap %d: index %d, search %d", bounds, int64(g), got, b)
			}
			if w := sort.SearchFloat64s(bounds, g.Seconds()); w != b {
				t.Fatalf("bounds %v gap %d: integer bucket %d, float search %d", bounds, int64(g), b, w)
			}
			want.counts[b]++
			want.sums[0].add(g.Seconds())
			want.sums[1].add(g.Seconds())
			if s := g.Seconds(); want.count == 0 || s < want.min {
				want.min = s
			}
			if s := g.Seconds(); want.count == 0 || s > want.max {
				want.max = s
			}
			want.count++
		}
		if len(gaps) == 0 {
			return
		}
		observeGaps(p, &x, gaps)
		if !slices.Equal(p.counts, want.counts) || p.sums != want.sums || p.count != want.count || p.min != want.min || p.max != want.max {
			t.Fatalf("bounds %v gaps %v:\nobserveGaps %+v\nper gap     %+v", bounds, gaps, *p, want)
		}
	})
}
