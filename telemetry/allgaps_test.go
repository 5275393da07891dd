package telemetry

import (
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/llmesh/llmesh/exchange"
)

// TestEveryGapCounted: a stream far longer than the observer's bounded
// samples has every gap in the inter-chunk histogram, in the bucket each
// belongs to, through the aggregation and through the SDK instruments
// (the histogram's count equals the request's decode steps).
func TestEveryGapCounted(t *testing.T) {
	const chunks = 3 * exchange.DefaultMaxITLSamples
	o := exchange.NewObserver(exchange.Options{GapBuckets: InterChunkBuckets(), Protocol: exchange.ProtocolSSE})
	t0 := time.Unix(1_700_000_000, 0)
	o.MarkReceived(t0)
	now := t0.Add(50 * time.Millisecond)
	want := make([]uint64, InterChunkBuckets().Len())
	for i := range chunks {
		// Early gaps short, late ones long: a sample of the first gaps
		// alone leans to the short ones.
		gap := 2 * time.Millisecond
		if i > chunks/2 {
			gap = 40 * time.Millisecond
		}
		if i > 0 {
			now = now.Add(gap)
			want[InterChunkBuckets().Index(gap)]++
		}
		if err := o.Observe(now, []byte("data: {\"choices\":[{\"text\":\"x\"}]}\n\n")); err != nil {
			t.Fatal(err)
		}
	}
	_ = o.Observe(now, []byte("data: [DONE]\n\n"))
	o.Finish(now, nil)
	obs := o.Observation()
	if obs.DecodeSteps != chunks-1 || len(obs.ITL.Samples) != exchange.DefaultMaxITLSamples {
		t.Fatalf("decode steps %d samples %d", obs.DecodeSteps, len(obs.ITL.Samples))
	}
	p := newAggPair(t, RecorderOptions{})
	p.record(obs, "c", "m")
	for _, side := range []struct {
		name string
		m    metricdata.Metrics
	}{{"aggregation", collect(t, p.aggReaders[0])[MetricInterChunk]}, {"sdk", collect(t, p.sdkReaders[0])[MetricInterChunk]}} {
		h, ok := side.m.Data.(metricdata.Histogram[float64])
		if !ok || len(h.DataPoints) != 1 {
			t.Fatalf("%s: inter-chunk histogram %+v", side.name, side.m)
		}
		dp := h.DataPoints[0]
		if dp.Count != uint64(obs.DecodeSteps) {
			t.Errorf("%s: count %d, want the %d decode steps", side.name, dp.Count, obs.DecodeSteps)
		}
		for i, n := range want {
			if dp.BucketCounts[i] != n {
				t.Errorf("%s: bucket %d has %d gaps, want %d", side.name, i, dp.BucketCounts[i], n)
			}
		}
		if side.name == "aggregation" {
			if wantSum := obs.ITL.Sum.Seconds(); dp.Sum != wantSum {
				t.Errorf("%s: sum %v, want %v", side.name, dp.Sum, wantSum)
			}
		}
	}
}
