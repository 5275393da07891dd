package telemetry

import (
	"context"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/expfmt"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/testkit/cputime"
)

// recordPerCall is Record as it was before the series cache: every
// measurement's attribute set built at the call, on a Recorder with SDK
// instruments. It is the reference the cached sets and the aggregation
// are checked against, and the baseline of BenchmarkRecordGateway.
func recordPerCall(r *Recorder, obs exchange.Observation, class, model string) {
	ctx := context.Background()
	s := r.labels(class, model)
	set := s.set
	v, _ := set.Value(AttrModel)
	model = v.AsString()
	attrs := metric.WithAttributeSet(set)
	if !obs.Admitted.IsZero() {
		r.queue.Record(ctx, obs.QueueTime.Seconds(), attrs)
	}
	if obs.HasTTFT {
		r.ttft.Record(ctx, obs.TTFT.Seconds(), attrs)
		if !obs.UpstreamSent.IsZero() {
			r.upTTFT.Record(ctx, obs.UpstreamTTFT.Seconds(), attrs)
		}
		r.steps.Record(ctx, int64(obs.DecodeSteps), attrs)
	}
	if obs.HasTPOT {
		r.tpot.Record(ctx, obs.TPOT.Seconds(), attrs)
	}
	for _, gap := range obs.ITL.Samples {
		r.itl.Record(ctx, gap.Seconds(), attrs)
	}
	if obs.PromptTokens > 0 {
		r.tokens.Record(ctx, int64(obs.PromptTokens), metric.WithAttributes(AttrClass.String(class), AttrModel.String(model), AttrTokenType.String("input")))
	}
	if obs.OutputTokens > 0 || obs.OK() {
		r.tokens.Record(ctx, int64(obs.OutputTokens), metric.WithAttributes(AttrClass.String(class), AttrModel.String(model), AttrTokenType.String("output")))
	}
	slo := JudgeSLO(&obs, r.slos[class])
	errType := obs.ErrorKind.String()
	if obs.E2E > 0 {
		if errType != "" {
			r.duration.Record(ctx, obs.E2E.Seconds(), metric.WithAttributes(AttrClass.String(class), AttrModel.String(model), AttrErrorType.String(errType)))
		} else {
			r.duration.Record(ctx, obs.E2E.Seconds(), attrs)
		}
	}
	outcome := errType
	if outcome == "" {
		outcome = "ok"
	}
	r.requests.Add(ctx, 1, metric.WithAttributes(AttrClass.String(class), AttrModel.String(model),
		attribute.String("llmesh.outcome", outcome), AttrSLOMet.Bool(slo.Met)))
	for _, v := range [...]struct {
		hit  bool
		name string
	}{{slo.TTFTMissed, "ttft"}, {slo.TPOTMissed || slo.TPOTUnknown, "tpot"}, {slo.Failed, "failed"}} {
		if v.hit {
			r.violations.Add(ctx, 1, metric.WithAttributes(AttrClass.String(class), AttrModel.String(model), AttrSLO.String(v.name)))
		}
	}
}

// scrapeText is p's Prometheus exposition without the Go runtime and
// process collectors (which differ between two providers in one process).
func scrapeText(t *testing.T, p *Provider) string {
	t.Helper()
	mfs, err := p.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if n := mf.GetName(); strings.HasPrefix(n, "go_") || strings.HasPrefix(n, "process_") {
			continue
		}
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// TestSeriesMatchPerCallSets records the same requests, covering every
// error kind (and one beyond the named ones), SLO met and missed, classes
// with and without SLOs and models past the cardinality cap, three ways
// into three Prometheus-exporting providers: through the per-call
// attribute sets Record used to build, through Record on SDK instruments
// with the cached sets (a Provider with a reader of the caller's), and
// through Record into the aggregation (the Provider as hosts make it).
// The scrapes must be identical.
func TestSeriesMatchPerCallSets(t *testing.T) {
	provider := func(readers ...sdkmetric.Reader) *Provider {
		p, err := New(context.Background(), Options{Prometheus: true, Readers: readers, Recorder: RecorderOptions{Classes: classes, MaxModels: 3}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Shutdown(context.Background()) })
		return p
	}
	perCall, cached, aggregated := provider(sdkmetric.NewManualReader()), provider(sdkmetric.NewManualReader()), provider()
	if perCall.Recorder.agg != nil || cached.Recorder.agg != nil || aggregated.Recorder.agg == nil {
		t.Fatal("providers with readers of the caller's must use SDK instruments, one without the aggregation")
	}

	base := observe(t)
	n := 0
	for kind := range errorKinds + 1 {
		for _, class := range []string{"interactive", "batch", "unlisted"} {
			for _, model := range []string{"m0", "m1", "m2", "m3", "m4", OtherModel} {
				for _, ttft := range []time.Duration{5 * time.Millisecond, 5 * time.Second} {
					obs := base
					obs.ErrorKind = exchange.ErrorKind(kind)
					obs.TTFT = ttft
					if kind%3 == 1 {
						obs.PromptTokens = 0
						obs.E2E = 0
						obs.Admitted = time.Time{}
					}
					if kind%4 == 2 {
						obs.HasTTFT, obs.HasTPOT, obs.OutputTokens = false, false, 0
						obs.ITL.Samples = nil
					}
					recordPerCall(perCall.Recorder, obs, class, model)
					perCall.Recorder.Preempted(class, model)
					for _, p := range []*Provider{cached, aggregated} {
						p.Recorder.Record(obs, class, model)
						p.Recorder.Preempted(class, model)
					}
					n++
				}
			}
		}
	}
	want, got := scrapeText(t, perCall), scrapeText(t, aggregated)
	if diff := cmp.Diff(want, scrapeText(t, cached)); diff != "" {
		t.Errorf("cached series differ from per-call sets (-per-call +cached):\n%s", diff)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("aggregation differs from per-call sets (-per-call +aggregated):\n%s", diff)
	}
	for _, s := range []string{`error_type="unknown"`, `llmesh_outcome="ok"`, `llmesh_slo_met="true"`, `llmesh_slo="ttft"`,
		`gen_ai_request_model="other"`, `llmesh_class="unlisted"`, "llmesh_inter_chunk_duration_seconds_bucket"} {
		if !strings.Contains(got, s) {
			t.Errorf("scrape after %d requests lacks %s", n, s)
		}
	}
}

// BenchmarkRecordGateway is one request's recording as the gateway's
// deployment does it (Provider with the Prometheus exporter, no SLO
// classes, TelemetryRecorder's Record call) for a 256-token stream:
// "aggregated" is Record; "sdk" is Record on SDK instruments (a second
// Recorder on the same provider, as a Recorder from NewRecorder records).
// Besides ns/op each reports cpu-ns/op, the benchmark thread's CPU time
// per request. Run with -count N to alternate them.
func BenchmarkRecordGateway(b *testing.B) {
	obs := exchange.Observation{Received: at(0), Admitted: at(1), UpstreamSent: at(2), FirstToken: at(50), End: at(2600),
		HasTTFT: true, TTFT: 50 * time.Millisecond, UpstreamTTFT: 48 * time.Millisecond, HasTPOT: true, TPOT: 10 * time.Millisecond,
		E2E: 2600 * time.Millisecond, OutputTokens: 256, CountedTokens: 256, TokenChunks: 256, DecodeSteps: 255,
		ITL: exchange.ITLSummary{Samples: make([]time.Duration, 255)}}
	for i := range obs.ITL.Samples {
		obs.ITL.Samples[i] = time.Duration(5+i%20) * time.Millisecond
	}
	p, err := New(context.Background(), Options{Prometheus: true})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	if p.Recorder.agg == nil {
		b.Fatal("the gateway's provider does not aggregate")
	}
	sdkRec, err := NewRecorder(p.MeterProvider, nil, RecorderOptions{})
	if err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		record func(exchange.Observation, string, string)
	}{
		{"sdk", sdkRec.Record},
		{"aggregated", p.Recorder.Record},
		// none records nothing: the cold variant's floor (the two clock
		// reads and the call).
		{"none", func(exchange.Observation, string, string) {}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			b.ReportAllocs()
			start := cputime.Thread()
			for b.Loop() {
				tc.record(obs, "default", "m")
			}
			b.ReportMetric(float64(cputime.Thread()-start)/float64(b.N), "cpu-ns/op")
		})
		// cold: the core's private caches are flushed (by writing a
		// buffer larger than L2) before every request, as streaming the
		// request's chunks does in the gateway; cpu-ns/op is the thread
		// CPU time of the Record calls alone, as the gateway's
		// BenchmarkProxyCPUPerChunk takes it. The flush is outside the
		// timer but not free: run with -benchtime 2000x or so.
		b.Run(tc.name+"-cold", func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			flush := make([]byte, 8<<20)
			b.ReportAllocs()
			var cpu time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				for j := 0; j < len(flush); j += 64 {
					flush[j]++
				}
				b.StartTimer()
				start := cputime.Thread()
				tc.record(obs, "default", "m")
				cpu += cputime.Thread() - start
			}
			b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
		})
	}
}

// armRecordPerCall is ArmRecorder.Record as it was before its sets were
// cached: the reference for TestArmSeriesMatchPerCallSets.
func armRecordPerCall(r *ArmRecorder, obs exchange.Observation, class, experiment, arm string) {
	ctx := context.Background()
	attrs := metric.WithAttributes(AttrExperiment.String(experiment), AttrArm.String(arm), AttrClass.String(class))
	if !obs.Admitted.IsZero() {
		r.queue.Record(ctx, obs.QueueTime.Seconds(), attrs)
	}
	if obs.HasTTFT {
		r.ttft.Record(ctx, obs.TTFT.Seconds(), attrs)
	}
	if obs.HasTPOT {
		r.tpot.Record(ctx, obs.TPOT.Seconds(), attrs)
	}
	outcome := obs.ErrorKind.String()
	if outcome == "" {
		outcome = "ok"
	}
	slo := JudgeSLO(&obs, r.slos[class])
	r.requests.Add(ctx, 1, metric.WithAttributes(AttrExperiment.String(experiment), AttrArm.String(arm),
		AttrClass.String(class), attribute.String("llmesh.outcome", outcome), AttrSLOMet.Bool(slo.Met)))
}

// TestArmSeriesMatchPerCallSets is TestSeriesMatchPerCallSets for the
// per-arm instruments, including label sets past the cache's bound.
func TestArmSeriesMatchPerCallSets(t *testing.T) {
	var provs [2]*Provider
	var arms [2]*ArmRecorder
	for i := range provs {
		p, err := New(context.Background(), Options{Prometheus: true})
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = p.Shutdown(context.Background()) }()
		a, err := NewArmRecorder(p.MeterProvider, RecorderOptions{Classes: classes})
		if err != nil {
			t.Fatal(err)
		}
		provs[i], arms[i] = p, a
	}
	cached, perCall := arms[0], arms[1]
	base := observe(t)
	run := func(experiments ...string) {
		for kind := range errorKinds + 1 {
			for _, class := range []string{"interactive", "batch", "unlisted"} {
				for _, exp := range experiments {
					for _, arm := range []string{"a", "b"} {
						for _, ttft := range []time.Duration{5 * time.Millisecond, 5 * time.Second} {
							obs := base
							obs.ErrorKind = exchange.ErrorKind(kind)
							obs.TTFT = ttft
							if kind%3 == 1 {
								obs.Admitted, obs.HasTTFT, obs.HasTPOT = time.Time{}, false, false
							}
							cached.Record(obs, class, exp, arm)
							armRecordPerCall(perCall, obs, class, exp, arm)
						}
					}
				}
			}
		}
	}
	run("e1", "e2")
	// Fill the cache to its bound: later sets are built per call.
	cached.mu.Lock()
	for i := len(cached.series); i < maxArmSeries; i++ {
		cached.series[armKey{class: "filler", arm: strconv.Itoa(i)}] = &armSeries{}
	}
	cached.mu.Unlock()
	run("e1", "e3")
	if n := len(cached.series); n != maxArmSeries {
		t.Errorf("%d cached arm series, want the bound %d", n, maxArmSeries)
	}
	want, got := scrapeText(t, provs[1]), scrapeText(t, provs[0])
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cached arm series differ from per-call sets (-per-call +cached):\n%s", diff)
	}
	for _, s := range []string{`llmesh_experiment="e3"`, `llmesh_outcome="unknown"`, `llmesh_slo_met="true"`, "llmesh_arm_queue_duration_seconds_bucket"} {
		if !strings.Contains(got, s) {
			t.Errorf("scrape lacks %s", s)
		}
	}
}
