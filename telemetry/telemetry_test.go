package telemetry

import (
	"context"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/goleak"

	"github.com/llmesh/llmesh/exchange"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var t0 = time.Unix(1_700_000_000, 0)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

// observe runs a real SSE stream through a exchange.Observer: 4 tokens,
// first at 300 ms, then every 20 ms, usage reported.
func observe(t *testing.T) exchange.Observation {
	t.Helper()
	o := exchange.NewObserver(exchange.Options{})
	o.MarkReceived(at(0))
	o.MarkAdmitted(at(100))
	o.MarkUpstreamSent(at(101))
	o.ResponseHeaders(at(250), 200, exchange.MapHeaders{"content-type": "text/event-stream"})
	for i := range 4 {
		if err := o.Observe(at(300+20*i), []byte(`data: {"choices":[{"delta":{"content":"x"}}]}`+"\n\n")); err != nil {
			t.Fatal(err)
		}
	}
	if err := o.Observe(at(370), []byte(`data: {"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":4}}`+"\n\ndata: [DONE]\n\n")); err != nil {
		t.Fatal(err)
	}
	o.Finish(at(400), nil)
	obs := o.Observation()
	if !obs.OK() || obs.TTFT != 300*time.Millisecond || obs.TPOT != 100*time.Millisecond/3 {
		t.Fatalf("observation %+v", obs)
	}
	return obs
}

var classes = []exchange.Class{
	{Name: "interactive", TTFT: 250 * time.Millisecond, TPOT: 50 * time.Millisecond},
	{Name: "batch", TTFT: time.Second},
}

func collect(t *testing.T, r sdkmetric.Reader) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

func TestRecordManualReader(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	p, err := New(context.Background(), Options{Readers: []sdkmetric.Reader{reader}, Recorder: RecorderOptions{Classes: classes}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	obs := observe(t)
	p.Recorder.Record(obs, "interactive", "llama")
	p.Recorder.Record(obs, "batch", "llama")
	failed := obs
	failed.ErrorKind, failed.Error = exchange.ErrorUpstreamReset, "reset"
	p.Recorder.Record(failed, "batch", "llama")
	p.Recorder.Preempted("batch", "llama")
	p.Recorder.Relocated("grpc", 70000)

	got := collect(t, reader)
	var names []string
	for n := range got {
		names = append(names, n)
	}
	slices.Sort(names)
	want := []string{MetricTokenUsage, MetricDuration, MetricTTFT, MetricTPOT, MetricDecodeSteps, MetricInterChunk,
		MetricPreemptions, MetricQueue, MetricRelocated, MetricRelocations, MetricRequests, MetricSLOViolations, MetricUpstreamTTFT}
	slices.Sort(want)
	if diff := cmp.Diff(want, names); diff != "" {
		t.Fatalf("metric names (-want +got):\n%s", diff)
	}

	ttft := got[MetricTTFT].Data.(metricdata.Histogram[float64])
	if got[MetricTTFT].Unit != "s" || len(ttft.DataPoints) != 2 {
		t.Fatalf("ttft %+v", got[MetricTTFT])
	}
	for _, dp := range ttft.DataPoints {
		if dp.Count != map[string]uint64{"interactive": 1, "batch": 2}[class(dp.Attributes)] {
			t.Errorf("ttft count %d for %s", dp.Count, class(dp.Attributes))
		}
		if !slices.Equal(dp.Bounds, BucketsTTFT) || dp.Max != metricdata.NewExtrema(0.3) {
			t.Errorf("ttft point %+v", dp)
		}
		if m, _ := dp.Attributes.Value(AttrModel); m.AsString() != "llama" {
			t.Errorf("model label %v", m)
		}
	}
	itl := got[MetricInterChunk].Data.(metricdata.Histogram[float64])
	if n := sumCount(itl.DataPoints); n != 9 { // 3 gaps × 3 requests
		t.Errorf("inter-chunk samples %d, want 9", n)
	}
	usage := got[MetricTokenUsage].Data.(metricdata.Histogram[int64])
	byType := map[string]int64{}
	for _, dp := range usage.DataPoints {
		v, _ := dp.Attributes.Value(AttrTokenType)
		byType[v.AsString()] += dp.Sum
	}
	if byType["input"] != 36 || byType["output"] != 12 {
		t.Errorf("token usage %v", byType)
	}
	// interactive: TTFT 300ms > 250ms SLO (tpot 33ms ok); batch: one success
	// within SLO, one failure.
	viol := counts(got[MetricSLOViolations], AttrClass, AttrSLO)
	if diff := cmp.Diff(map[string]int64{"interactive/ttft": 1, "batch/failed": 1}, viol); diff != "" {
		t.Errorf("violations (-want +got):\n%s", diff)
	}
	reqs := counts(got[MetricRequests], AttrClass, AttrSLOMet)
	if diff := cmp.Diff(map[string]int64{"interactive/false": 1, "batch/true": 1, "batch/false": 1}, reqs); diff != "" {
		t.Errorf("requests (-want +got):\n%s", diff)
	}
	dur := got[MetricDuration].Data.(metricdata.Histogram[float64])
	var errTypes []string
	for _, dp := range dur.DataPoints {
		if v, ok := dp.Attributes.Value(AttrErrorType); ok {
			errTypes = append(errTypes, v.AsString())
		}
	}
	if !slices.Equal(errTypes, []string{"upstream_reset"}) {
		t.Errorf("duration error.type %v", errTypes)
	}
	if c := counts(got[MetricRelocated], AttrRelocation); c["grpc"] != 70000 {
		t.Errorf("relocated bytes %v", c)
	}
	if c := counts(got[MetricPreemptions], AttrClass); c["batch"] != 1 {
		t.Errorf("preemptions %v", c)
	}
}

func class(s attribute.Set) string {
	v, _ := s.Value(AttrClass)
	return v.AsString()
}

func sumCount(dps []metricdata.HistogramDataPoint[float64]) uint64 {
	var n uint64
	for _, dp := range dps {
		n += dp.Count
	}
	return n
}

// counts sums a counter's points by the joined values of keys.
func counts(m metricdata.Metrics, keys ...attribute.Key) map[string]int64 {
	out := map[string]int64{}
	for _, dp := range m.Data.(metricdata.Sum[int64]).DataPoints {
		var parts []string
		for _, k := range keys {
			v, _ := dp.Attributes.Value(k)
			parts = append(parts, v.String())
		}
		out[strings.Join(parts, "/")] += dp.Value
	}
	return out
}

func TestModelCardinalityCap(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	p, err := New(context.Background(), Options{Readers: []sdkmetric.Reader{reader}, Recorder: RecorderOptions{MaxModels: 2}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	for _, m := range []string{"a", "b", "c", "d", "a"} {
		p.Recorder.Preempted("x", m)
	}
	if diff := cmp.Diff(map[string]int64{"a": 2, "b": 1, OtherModel: 2}, counts(collect(t, reader)[MetricPreemptions], AttrModel)); diff != "" {
		t.Errorf("models (-want +got):\n%s", diff)
	}
}

func TestPrometheusScrape(t *testing.T) {
	p, err := New(context.Background(), Options{Prometheus: true, Recorder: RecorderOptions{Classes: classes}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	p.Recorder.Record(observe(t), "interactive", "llama")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", p.PrometheusHandler())
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	var wg sync.WaitGroup
	wg.Go(func() { _ = srv.Serve(ln) })
	defer func() { srv.Close(); wg.Wait() }()

	resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{
		"gen_ai_server_time_to_first_token_seconds", "gen_ai_server_time_per_output_token_seconds",
		"gen_ai_server_request_duration_seconds", "gen_ai_client_token_usage", "llmesh_queue_duration_seconds",
		"llmesh_inter_chunk_duration_seconds", "llmesh_decode_steps", "llmesh_requests_total", "llmesh_slo_violations_total",
		"go_goroutines",
	} {
		if fams[name] == nil {
			var have []string
			for n := range fams {
				have = append(have, n)
			}
			slices.Sort(have)
			t.Fatalf("no %s in scrape; have %v", name, have)
		}
	}
	ttft := fams["gen_ai_server_time_to_first_token_seconds"]
	if ttft.GetType() != dto.MetricType_HISTOGRAM {
		t.Fatalf("ttft type %v", ttft.GetType())
	}
	m := ttft.GetMetric()[0]
	labels := map[string]string{}
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	if labels["llmesh_class"] != "interactive" || labels["gen_ai_request_model"] != "llama" {
		t.Errorf("labels %v", labels)
	}
	h := m.GetHistogram()
	if h.GetSampleCount() != 1 || h.GetSampleSum() != 0.3 || len(h.GetBucket()) != len(BucketsTTFT)+1 { // with +Inf
		t.Errorf("histogram count %d sum %v buckets %d", h.GetSampleCount(), h.GetSampleSum(), len(h.GetBucket()))
	}
	// 0.3 s falls in the le=0.35 bucket, not in le=0.25.
	for _, b := range h.GetBucket() {
		want := uint64(0)
		if b.GetUpperBound() >= 0.3 {
			want = 1
		}
		if b.GetCumulativeCount() != want {
			t.Errorf("bucket le=%v count %d, want %d", b.GetUpperBound(), b.GetCumulativeCount(), want)
		}
	}

	off, err := New(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = off.Shutdown(context.Background()) }()
	if off.Registry() != nil {
		t.Error("registry without Prometheus")
	}
}

func TestTraceSpans(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	p, err := New(context.Background(), Options{SpanProcessors: []sdktrace.SpanProcessor{sr}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	obs := observe(t)
	sc := p.Recorder.Trace(context.Background(), obs, "interactive", "llama")
	if !sc.IsValid() {
		t.Fatal("invalid span context")
	}
	type span struct {
		Name       string
		Start, End time.Time
		Parent     bool
	}
	var got []span
	for _, s := range sr.Ended() {
		got = append(got, span{s.Name(), s.StartTime(), s.EndTime(), s.Parent().SpanID() == sc.SpanID()})
	}
	want := []span{
		{SpanQueue, at(0), at(100), true},
		{SpanPrefill, at(100), at(300), true},
		{SpanDecode, at(300), at(400), true},
		{SpanRequest, at(0), at(400), false},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("spans (-want +got):\n%s", diff)
	}

	// A failed request without tokens: prefill runs to the end, status error.
	sr2 := tracetest.NewSpanRecorder()
	p2, _ := New(context.Background(), Options{SpanProcessors: []sdktrace.SpanProcessor{sr2}})
	defer func() { _ = p2.Shutdown(context.Background()) }()
	o := exchange.NewObserver(exchange.Options{})
	o.MarkReceived(at(0))
	o.ResponseHeaders(at(5), 503, exchange.MapHeaders{"content-type": "application/json"})
	o.Finish(at(6), nil)
	p2.Recorder.Trace(context.Background(), o.Observation(), "batch", "m")
	ended := sr2.Ended()
	if len(ended) != 3 || ended[1].Name() != SpanPrefill || ended[1].EndTime() != at(6) || ended[2].Status().Code.String() != "Error" {
		for _, s := range ended {
			t.Logf("%s %v-%v %v", s.Name(), s.StartTime(), s.EndTime(), s.Status())
		}
		t.Error("unexpected spans for a failed request")
	}
}

func TestServerTiming(t *testing.T) {
	obs := observe(t)
	want := `queue;dur=100.000, ttft;dur=300.000, upstream-ttft;dur=199.000, tpot;dur=33.333, e2e;dur=400.000, tokens;desc="4"`
	if got := ServerTiming(&obs); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got := ServerTiming(&exchange.Observation{}); got != "" {
		t.Errorf("empty observation: %q", got)
	}
	early := exchange.Observation{Received: at(0), Admitted: at(7), QueueTime: 7 * time.Millisecond}
	if got := ServerTiming(&early); got != "queue;dur=7.000" {
		t.Errorf("headers-time: %q", got)
	}
}

func BenchmarkRecord(b *testing.B) {
	p, err := New(context.Background(), Options{Prometheus: true, Recorder: RecorderOptions{Classes: classes}})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	obs := exchange.Observation{Received: at(0), Admitted: at(1), UpstreamSent: at(2), FirstToken: at(50), End: at(500),
		HasTTFT: true, TTFT: 50 * time.Millisecond, HasTPOT: true, TPOT: 10 * time.Millisecond, OutputTokens: 46,
		PromptTokens: 100, DecodeSteps: 45, ITL: exchange.ITLSummary{Samples: make([]time.Duration, 45)}}
	b.ReportAllocs()
	for b.Loop() {
		p.Recorder.Record(obs, "interactive", "llama")
	}
}

// TestHostRecorder: one Record of either host becomes its metrics, one
// preemption count per preemption and four spans; a passthrough only its
// count.
func TestHostRecorder(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	sr := tracetest.NewSpanRecorder()
	p, err := New(context.Background(), Options{Readers: []sdkmetric.Reader{reader}, SpanProcessors: []sdktrace.SpanProcessor{sr}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	var rec exchange.Recorder = HostRecorder{p.Recorder}
	obs := observe(t)
	rec.Record(exchange.Record{Observation: obs, Class: "c", Model: "m", Preemptions: 2})
	rec.Record(exchange.Record{Observation: obs, Class: "c", Model: "m", Passthrough: true})
	HostRecorder{}.Record(exchange.Record{Observation: obs, Class: "c"})
	got := collect(t, reader)
	if c := counts(got[MetricRequests], AttrClass); c["c"] != 1 {
		t.Errorf("requests %v", c)
	}
	if c := counts(got[MetricPreemptions], AttrClass); c["c"] != 2 {
		t.Errorf("preemptions %v, want 2 of class c", c)
	}
	if n := len(sr.Ended()); n != 4 {
		t.Errorf("%d spans, want 4", n)
	}
}

// TestTraceOffCostsNothing: a Provider with no OTLP and no span processors
// (and a Recorder on no tracer provider) makes no spans, so Trace returns
// an invalid context without allocating; with a span processor the same
// call makes the spans.
func TestTraceOffCostsNothing(t *testing.T) {
	obs := observe(t)
	p, err := New(context.Background(), Options{Prometheus: true})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	bare, err := NewRecorder(nil, nil, RecorderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]*Recorder{"provider": p.Recorder, "nil providers": bare} {
		if sc := r.Trace(context.Background(), obs, "c", "m"); sc.IsValid() {
			t.Errorf("%s: Trace without a span processor returned a valid span context %v", name, sc)
		}
		if n := testing.AllocsPerRun(100, func() { r.Trace(context.Background(), obs, "c", "m") }); n != 0 {
			t.Errorf("%s: Trace without a span processor allocates %v times", name, n)
		}
	}
	sr := tracetest.NewSpanRecorder()
	traced, err := New(context.Background(), Options{Prometheus: true, SpanProcessors: []sdktrace.SpanProcessor{sr}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = traced.Shutdown(context.Background()) }()
	if sc := traced.Recorder.Trace(context.Background(), obs, "c", "m"); !sc.IsValid() || len(sr.Ended()) != 4 {
		t.Errorf("with a span processor: span context valid %v, %d spans ended, want 4", sc.IsValid(), len(sr.Ended()))
	}
}

// BenchmarkTraceOff is Trace on a Provider with no OTLP and no span
// processors, as the Envoy host calls it through HostRecorder.
func BenchmarkTraceOff(b *testing.B) {
	p, err := New(context.Background(), Options{Prometheus: true})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = p.Shutdown(context.Background()) }()
	obs := observe(&testing.T{})
	b.ReportAllocs()
	for b.Loop() {
		p.Recorder.Trace(context.Background(), obs, "c", "m")
	}
}
