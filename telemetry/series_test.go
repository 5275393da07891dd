package telemetry

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/common/expfmt"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/llmesh/llmesh/filter"
)

// recordPerCall is Record as it was before the series cache: every
// measurement's attribute set built at the call. It is the reference the
// cached sets are checked against, and the baseline of BenchmarkRecordGateway.
func recordPerCall(r *Recorder, obs filter.Observation, class, model string) {
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
	if r.itlAgg != nil {
		r.itlAgg.record(s, obs.ITL.Samples)
	} else {
		for _, gap := range obs.ITL.Samples {
			r.itl.Record(ctx, gap.Seconds(), attrs)
		}
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
	}{{slo.TTFTMissed, "ttft"}, {slo.TPOTMissed, "tpot"}, {slo.Failed, "failed"}} {
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
// with and without SLOs and models past the cardinality cap, once through
// Record and once through the per-call attribute sets Record used to
// build, into two Prometheus-exporting providers: the scrapes must be
// identical.
func TestSeriesMatchPerCallSets(t *testing.T) {
	opts := Options{Prometheus: true, Recorder: RecorderOptions{Classes: classes, MaxModels: 3}}
	cached, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cached.Shutdown(context.Background()) }()
	perCall, err := New(context.Background(), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = perCall.Shutdown(context.Background()) }()

	base := observe(t)
	n := 0
	for kind := range errorKinds + 1 {
		for _, class := range []string{"interactive", "batch", "unlisted"} {
			for _, model := range []string{"m0", "m1", "m2", "m3", "m4", OtherModel} {
				for _, ttft := range []time.Duration{5 * time.Millisecond, 5 * time.Second} {
					obs := base
					obs.ErrorKind = filter.ErrorKind(kind)
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
					cached.Recorder.Record(obs, class, model)
					recordPerCall(perCall.Recorder, obs, class, model)
					cached.Recorder.Preempted(class, model)
					perCall.Recorder.Preempted(class, model)
					n++
				}
			}
		}
	}
	want, got := scrapeText(t, perCall), scrapeText(t, cached)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("cached series differ from per-call sets (-per-call +cached):\n%s", diff)
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
// "cached" is Record, "per-call" the attribute sets built per measurement
// as before the series cache. Run with -count N to alternate the two.
func BenchmarkRecordGateway(b *testing.B) {
	obs := filter.Observation{Received: at(0), Admitted: at(1), UpstreamSent: at(2), FirstToken: at(50), End: at(2600),
		HasTTFT: true, TTFT: 50 * time.Millisecond, UpstreamTTFT: 48 * time.Millisecond, HasTPOT: true, TPOT: 10 * time.Millisecond,
		E2E: 2600 * time.Millisecond, OutputTokens: 256, CountedTokens: 256, TokenChunks: 256, DecodeSteps: 255,
		ITL: filter.ITLSummary{Samples: make([]time.Duration, 255)}}
	for i := range obs.ITL.Samples {
		obs.ITL.Samples[i] = time.Duration(5+i%20) * time.Millisecond
	}
	p, err := New(context.Background(), Options{Prometheus: true})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	for _, tc := range []struct {
		name   string
		record func(filter.Observation, string, string)
	}{
		{"per-call", func(o filter.Observation, c, m string) { recordPerCall(p.Recorder, o, c, m) }},
		{"cached", p.Recorder.Record},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				tc.record(obs, "default", "m")
			}
		})
		// cold: the core's private caches are flushed (by writing a
		// buffer larger than L2) before every request, as streaming the
		// request's chunks does in the gateway. The flush is outside the
		// timer but not free: run with -benchtime 2000x or so.
		b.Run(tc.name+"-cold", func(b *testing.B) {
			flush := make([]byte, 8<<20)
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				for j := 0; j < len(flush); j += 64 {
					flush[j]++
				}
				b.StartTimer()
				tc.record(obs, "default", "m")
			}
		})
	}
}

// armRecordPerCall is ArmRecorder.Record as it was before its sets were
// cached: the reference for TestArmSeriesMatchPerCallSets.
func armRecordPerCall(r *ArmRecorder, obs filter.Observation, class, experiment, arm string) {
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
							obs.ErrorKind = filter.ErrorKind(kind)
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
