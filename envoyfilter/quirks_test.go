package envoyfilter

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/llmesh/llmesh/api/vllmpb"
	"github.com/llmesh/llmesh/sim/server"
	"github.com/llmesh/llmesh/sim/simtest"
	"github.com/llmesh/llmesh/telemetry"
	"github.com/llmesh/llmesh/testkit/fakesdk"
	"github.com/llmesh/llmesh/testkit/grpcframe"
)

// TestSimEveryGapCounted: a stream far longer than the observer's bounded
// samples has every gap in the inter-chunk histogram: its count equals
// the request's decode steps.
func TestSimEveryGapCounted(t *testing.T) {
	sim := simtest.Start(t)
	reader := sdkmetric.NewManualReader()
	h := newHarness(t, `{"mesh": `+testMesh("fifo", "")+`}`, true, otelRecorder(reader))
	c := &http.Client{Timeout: time.Minute}
	defer c.CloseIdleConnections()
	body := `{"model":"` + sim.Model + `","prompt":"a b c","max_tokens":1300,"ignore_eos":true,"stream":true}`
	s := proxy(t, h, c, sim.HTTPURL+"/v1/completions", sseRequest(), []byte(body))
	md := s.Metadata(MetadataNamespace)
	steps, _ := md["decode_steps"].(float64)
	if steps < 1000 {
		t.Fatalf("decode steps %v: the stream should be long", md["decode_steps"])
	}
	want(t, "inter-chunk count", histogramCount(t, reader, telemetry.MetricInterChunk), uint64(steps))
}

// TestSimGRPCNoUsageThroughFilter: vLLM's engine API from an engine that
// reports no usage (the sim's grpc-no-usage quirk): the output tokens in
// the access-log metadata are the streamed ones, not the proto3 zero.
func TestSimGRPCNoUsageThroughFilter(t *testing.T) {
	sim := simtest.Start(t, simtest.WithConfig(func(c *server.Config) { c.Quirks = []string{string(server.QuirkGRPCNoUsage)} }))
	h := newHarness(t, `{"mesh": `+testMesh("fifo", "")+`}`, true)
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	c := &http.Client{Timeout: time.Minute, Transport: &http.Transport{Protocols: &protos}}
	defer c.CloseIdleConnections()
	mt := uint32(9)
	req := grpcframe.Message(&vllmpb.GenerateRequest{RequestId: "1", Input: &vllmpb.GenerateRequest_Text{Text: "a b c"}, Stream: true,
		SamplingParams: &vllmpb.SamplingParams{MaxTokens: &mt, IgnoreEos: true}})
	hdr := fakesdk.RequestHeaders("POST", "/vllm.grpc.engine.VllmEngine/Generate", "content-type", "application/grpc", "te", "trailers")
	s := proxy(t, h, c, "http://"+sim.GRPCAddr+"/vllm.grpc.engine.VllmEngine/Generate", hdr, req)
	md := s.Metadata(MetadataNamespace)
	want(t, "output_tokens", md["output_tokens"], 9)
	if tpot, _ := md["tpot_ms"].(float64); tpot <= 0 {
		t.Errorf("tpot_ms = %v, want a TPOT from the streamed tokens", md["tpot_ms"])
	}
	if e, bad := md["error"]; bad {
		t.Errorf("error = %v", e)
	}
}

// counterSum adds up an OpenTelemetry counter's data points.
func counterSum(t *testing.T, reader sdkmetric.Reader, name string) int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if s, ok := m.Data.(metricdata.Sum[int64]); ok && m.Name == name {
				for _, dp := range s.DataPoints {
					n += dp.Value
				}
			}
		}
	}
	return n
}

// TestNonGenerationNotAdmitted: with the pool's only slot taken, GET
// /v1/models passes at once (no admission, so no queueing and no
// preemption), and is recorded apart from generations.
func TestNonGenerationNotAdmitted(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	h := newHarness(t, `{"mesh": `+testMesh("preemptive", "")+`}`, true, otelRecorder(reader))
	a := h.stream(fakesdk.Options{})
	wantStatus(t, "generation", a.DecodeHeaders(sseRequest(), true), api.Continue)
	m := h.stream(fakesdk.Options{})
	wantStatus(t, "GET /v1/models", m.DecodeHeaders(fakesdk.RequestHeaders("GET", "/v1/models"), true), api.Continue)
	rh := fakesdk.ResponseHeaders(200)
	rh.Set("content-type", "application/json")
	wantStatus(t, "EncodeHeaders", m.EncodeHeaders(rh, false), api.Continue)
	wantStatus(t, "EncodeData", m.EncodeData([]byte(`{"object":"list","data":[]}`), true), api.Continue)
	m.Complete()
	noViolations(t, m)
	want(t, "generation metadata", m.Metadata(MetadataNamespace)["generation"], false)
	want(t, StatAdmitted, h.counter(StatAdmitted), 1)
	want(t, "passthrough count", counterSum(t, reader, telemetry.MetricPassthrough), int64(1))
	want(t, "request duration count", histogramCount(t, reader, "gen_ai.server.request.duration"), uint64(0))
	a.Complete()
	noViolations(t, a)
}

// TestSimMergeDeltasThroughFilter: the Envoy host's account of an engine
// that merges piled-up deltas and reports usage unasked.
func TestSimMergeDeltasThroughFilter(t *testing.T) {
	sim := simtest.Start(t, simtest.WithConfig(func(c *server.Config) {
		c.Quirks = []string{string(server.QuirkMergeDeltas), string(server.QuirkUsageWithoutStreamOptions)}
	}))
	h := newHarness(t, `{"mesh": `+testMesh("fifo", "")+`}`, true)
	c := &http.Client{Timeout: time.Minute}
	defer c.CloseIdleConnections()
	body := `{"model":"` + sim.Model + `","prompt":"a b c","max_tokens":40,"stream":true}`
	s := proxy(t, h, c, sim.HTTPURL+"/v1/completions", sseRequest(server.FaultHeader, "stall=300ms"), []byte(body))
	md := s.Metadata(MetadataNamespace)
	want(t, "output_tokens", md["output_tokens"], 40)
	if steps, _ := md["decode_steps"].(float64); steps >= 39 {
		t.Errorf("decode steps %v: the deltas were not merged", steps)
	}
}

// TestSimRoleChunkFirstThroughFilter: the opening chat event with a bare
// role is not the first token in the Envoy host's account.
func TestSimRoleChunkFirstThroughFilter(t *testing.T) {
	sim := simtest.Start(t, simtest.WithConfig(func(c *server.Config) { c.Quirks = []string{string(server.QuirkRoleChunkFirst)} }))
	h := newHarness(t, `{"mesh": `+testMesh("fifo", "")+`}`, true)
	c := &http.Client{Timeout: time.Minute}
	defer c.CloseIdleConnections()
	body := `{"model":"` + sim.Model + `","messages":[{"role":"user","content":"a b"}],"max_tokens":6,"stream":true}`
	hdr := fakesdk.RequestHeaders("POST", "/v1/chat/completions", "content-type", "application/json")
	s := proxy(t, h, c, sim.HTTPURL+"/v1/chat/completions", hdr, []byte(body))
	md := s.Metadata(MetadataNamespace)
	want(t, "decode_steps", md["decode_steps"], 5)
	want(t, "output_tokens", md["output_tokens"], 6)
}
