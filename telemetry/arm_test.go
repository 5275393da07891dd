package telemetry

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/llmesh/llmesh/exchange"
)

// Per-arm instruments carry experiment, arm and class, and judge the SLO
// like the per-class ones.
func TestArmRecorder(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = mp.Shutdown(context.Background()) }()
	r, err := NewArmRecorder(mp, RecorderOptions{Classes: []exchange.Class{{Name: "chat", TTFT: 250 * time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	fast := exchange.Observation{Admitted: time.Unix(1, 0), QueueTime: 10 * time.Millisecond, HasTTFT: true, TTFT: 100 * time.Millisecond}
	slow := fast
	slow.TTFT = time.Second
	r.Record(fast, "chat", "ab", "fifo")
	r.Record(slow, "chat", "ab", "fifo")
	r.Record(fast, "chat", "ab", "preemptive")

	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	ttft := map[string]uint64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch m.Name {
			case MetricArmRequests:
				for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
					e, _ := dp.Attributes.Value(AttrExperiment)
					a, _ := dp.Attributes.Value(AttrArm)
					c, _ := dp.Attributes.Value(AttrClass)
					met, _ := dp.Attributes.Value(AttrSLOMet)
					got[e.AsString()+"/"+a.AsString()+"/"+c.AsString()+"/"+met.String()] += dp.Value
				}
			case MetricArmTTFT:
				for _, dp := range m.Data.(metricdata.Histogram[float64]).DataPoints {
					a, _ := dp.Attributes.Value(AttrArm)
					ttft[a.AsString()] += dp.Count
				}
			}
		}
	}
	want := map[string]int64{"ab/fifo/chat/true": 1, "ab/fifo/chat/false": 1, "ab/preemptive/chat/true": 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("arm requests (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]uint64{"fifo": 2, "preemptive": 1}, ttft); diff != "" {
		t.Errorf("arm TTFT counts (-want +got):\n%s", diff)
	}
}
