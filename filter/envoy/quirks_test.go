package envoy

import (
	"net/http"
	"testing"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/llmesh/llmesh/api/vllmpb"
	"github.com/llmesh/llmesh/filter/filtertest"
	"github.com/llmesh/llmesh/sim/server"
	"github.com/llmesh/llmesh/sim/simtest"
	"github.com/llmesh/llmesh/telemetry"
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
	req := grpcFrame(t, &vllmpb.GenerateRequest{RequestId: "1", Input: &vllmpb.GenerateRequest_Text{Text: "a b c"}, Stream: true,
		SamplingParams: &vllmpb.SamplingParams{MaxTokens: &mt, IgnoreEos: true}})
	hdr := filtertest.RequestHeaders("POST", "/vllm.grpc.engine.VllmEngine/Generate", "content-type", "application/grpc", "te", "trailers")
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
