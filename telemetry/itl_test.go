package telemetry

import (
	"context"
	"math"
	"slices"
	"sort"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/llmesh/llmesh/filter"
)

// TestITLHistogramMatchesSDK records the same requests through the SDK
// instrument and through the Recorder's own aggregation and checks that
// readers see the same histogram: buckets (gaps on and around bounds),
// count, sum, min, max and labels.
func TestITLHistogramMatchesSDK(t *testing.T) {
	sdkReader := sdkmetric.NewManualReader()
	sdkRec, err := NewRecorder(sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkReader)), nil, RecorderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	agg := newITLHistogram(BucketsTPOT)
	aggReader := sdkmetric.NewManualReader(sdkmetric.WithProducer(agg))
	aggRec, err := newRecorder(sdkmetric.NewMeterProvider(sdkmetric.WithReader(aggReader)), nil, RecorderOptions{}, agg)
	if err != nil {
		t.Fatal(err)
	}
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	reqs := []struct {
		class, model string
		gaps         []time.Duration
	}{
		{"a", "m", []time.Duration{ms(1), ms(10), ms(10.000001), ms(0.5), 3 * time.Second, 0}},
		{"b", "m", []time.Duration{ms(25), ms(2500)}},
		{"a", "m", []time.Duration{ms(7.5), ms(49.9)}},
		{"a", "n", nil},
	}
	for _, r := range reqs {
		obs := filter.Observation{ITL: filter.ITLSummary{Samples: r.gaps}}
		sdkRec.Record(obs, r.class, r.model)
		aggRec.Record(obs, r.class, r.model)
	}
	want := collect(t, sdkReader)[MetricInterChunk]
	got := collect(t, aggReader)[MetricInterChunk]
	if got.Name == "" {
		t.Fatal("no inter-chunk histogram from the aggregation")
	}
	metricdatatest.AssertEqual(t, want, got, metricdatatest.IgnoreTimestamp())
}

// BenchmarkRecordLong records a 256-token request (255 gaps) into all
// instruments with the Prometheus exporter attached, as the gateway does.
// sdk-itl records through a second Recorder on the same provider whose
// gaps go through the SDK instrument (the path before the Recorder
// aggregated them), for A/B in one run.
func BenchmarkRecordLong(b *testing.B) {
	obs := filter.Observation{Received: at(0), Admitted: at(1), UpstreamSent: at(2), FirstToken: at(50), End: at(2600),
		HasTTFT: true, TTFT: 50 * time.Millisecond, HasTPOT: true, TPOT: 10 * time.Millisecond, OutputTokens: 256,
		PromptTokens: 100, DecodeSteps: 255, ITL: filter.ITLSummary{Samples: make([]time.Duration, 255)}}
	for i := range obs.ITL.Samples {
		obs.ITL.Samples[i] = time.Duration(5+i%20) * time.Millisecond
	}
	p, err := New(context.Background(), Options{Prometheus: true, Recorder: RecorderOptions{Classes: classes}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	if p.Recorder.itlAgg == nil {
		b.Fatal("the Prometheus-only provider does not aggregate the gaps")
	}
	sdkRec, err := NewRecorder(p.MeterProvider, p.TracerProvider, RecorderOptions{Classes: classes})
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		rec  *Recorder
	}{{"aggregated", p.Recorder}, {"sdk-itl", sdkRec}} {
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
// seconds) at and around every bound and on a spread of other gaps.
func TestBucketMatchesFloatSearch(t *testing.T) {
	h := newITLHistogram(BucketsTPOT)
	var gaps []time.Duration
	for _, l := range h.limits {
		for d := -3; d <= 3; d++ {
			gaps = append(gaps, l+time.Duration(d))
		}
	}
	for g := time.Duration(0); g < 4*time.Second; g = g*5/4 + 7 {
		gaps = append(gaps, g)
	}
	gaps = append(gaps, -time.Millisecond, time.Duration(math.MaxInt64))
	want := make([]uint64, len(h.bounds)+1)
	for _, g := range gaps {
		w := sort.SearchFloat64s(h.bounds, g.Seconds())
		want[w]++
		if got := bucket(h.limits, g); got != w {
			t.Errorf("gap %d ns (%v s): bucket %d, float search %d", int64(g), g.Seconds(), got, w)
		}
	}
	// The same gaps as one request in ascending and one in descending
	// order, through record's previous-bucket shortcut.
	s := newSeries("c", "m", filter.Class{})
	h.record(s, gaps)
	desc := slices.Clone(gaps)
	slices.Reverse(desc)
	h.record(s, desc)
	for i := range want {
		want[i] *= 2
	}
	if !slices.Equal(s.itl.counts, want) {
		t.Errorf("recorded counts %v, want %v", s.itl.counts, want)
	}
}
