package envoyfilter

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/sim/simtest"
	"github.com/llmesh/llmesh/telemetry"
	"github.com/llmesh/llmesh/testkit/fakesdk"
	"github.com/llmesh/llmesh/testkit/grpcframe"
)

// These tests put the adapter, inside the fake SDK, in front of the real
// simulated engine on loopback: the request goes through the filter (which
// may hold it, relocate its prompt), what the filter forwards is sent to
// the sim, and the sim's response is fed back through the encode callbacks
// in whatever pieces the network delivers.

// proxy plays Envoy's router for one request.
func proxy(t *testing.T, h *harness, c *http.Client, url string, reqH *fakesdk.HeaderMap, body []byte) *fakesdk.Stream {
	t.Helper()
	s := h.stream(fakesdk.Options{})
	r := s.DecodeHeaders(reqH, false)
	if r.Status == api.Continue || r.Status == api.StopAndBuffer {
		r = s.DecodeData(body, true)
	}
	wantStatus(t, "request phase", r, api.Continue)
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, bytes.NewReader(s.Upstream()))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range reqH.Snapshot() {
		if !strings.HasPrefix(k, ":") {
			req.Header[http.CanonicalHeaderKey(k)] = vs
		}
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rh := fakesdk.ResponseHeaders(resp.StatusCode)
	for k, vs := range resp.Header {
		for _, v := range vs {
			rh.Add(k, v)
		}
	}
	wantStatus(t, "EncodeHeaders", s.EncodeHeaders(rh, false), api.Continue)
	buf := make([]byte, 32<<10)
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			wantStatus(t, "EncodeData", s.EncodeData(buf[:n], false), api.Continue)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(resp.Trailer) > 0 {
		tr := fakesdk.NewHeaders()
		for k, vs := range resp.Trailer {
			for _, v := range vs {
				tr.Add(k, v)
			}
		}
		s.EncodeTrailers(tr)
	} else {
		s.EncodeData(nil, true)
	}
	s.Complete()
	noViolations(t, s)
	return s
}

func otelRecorder(reader sdkmetric.Reader) func(*Env) {
	return func(e *Env) {
		e.NewRecorder = func(*config.Config) (Recorder, error) {
			p, err := telemetry.New(context.Background(), telemetry.Options{Readers: []sdkmetric.Reader{reader}})
			if err != nil {
				return nil, err
			}
			return telemetry.HostRecorder{R: p.Recorder}, nil
		}
	}
}

func histogramCount(t *testing.T, reader sdkmetric.Reader, name string) uint64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			if m.Name != name {
				continue
			}
			if h, ok := m.Data.(metricdata.Histogram[float64]); ok {
				for _, dp := range h.DataPoints {
					n += dp.Count
				}
			}
		}
	}
	return n
}

var usageRE = regexp.MustCompile(`"completion_tokens":\s*(\d+)`)

// TestSimSSEThroughFilter: an OpenAI streaming request whose prompt
// arrives in a header is relocated into the body, scheduled, sent to the
// sim, and measured; the access-log metadata and the OpenTelemetry
// histograms agree with the engine's usage.
func TestSimSSEThroughFilter(t *testing.T) {
	sim := simtest.Start(t)
	reader := sdkmetric.NewManualReader()
	h := newHarness(t, `{"mesh": `+testMesh("fifo", relocationMesh)+`}`, true, otelRecorder(reader))
	c := &http.Client{Timeout: time.Minute}
	defer c.CloseIdleConnections()
	prompt := strings.Repeat("tell me a story ", 8)
	body := `{"model":"` + sim.Model + `","max_tokens":12,"stream":true,"stream_options":{"include_usage":true}}`
	s := proxy(t, h, c, sim.HTTPURL+"/v1/completions", sseRequest("x-llmesh-prompt", prompt, "x-tenant-id", "gold"), []byte(body))

	down := string(s.Downstream())
	if !strings.HasSuffix(strings.TrimSpace(down), "data: [DONE]") {
		t.Fatalf("stream did not end with [DONE]:\n%s", down)
	}
	m := usageRE.FindAllStringSubmatch(down, -1)
	if len(m) == 0 {
		t.Fatalf("no usage in the stream:\n%s", down)
	}
	usage, _ := strconv.Atoi(m[len(m)-1][1])
	md := s.Metadata(MetadataNamespace)
	want(t, "class", md["class"], "interactive")
	want(t, "output_tokens", md["output_tokens"], usage)
	if ttft, _ := md["ttft_ms"].(float64); ttft <= 0 {
		t.Errorf("ttft_ms = %v", md["ttft_ms"])
	}
	if _, bad := md["error"]; bad {
		t.Errorf("error = %v", md["error"])
	}
	want(t, StatRelocated, h.counter(StatRelocated), 1)
	want(t, "TTFT histogram count", histogramCount(t, reader, telemetry.MetricTTFT), 1)
	// One inter-chunk sample per gap between token-bearing chunks.
	steps, _ := md["decode_steps"].(float64)
	want(t, "inter-chunk samples", histogramCount(t, reader, telemetry.MetricInterChunk), uint64(steps))
}

// TestSimGRPCThroughFilter: an llm.v1 stream over h2c whose prompt is in
// metadata, relocated into field 2 of the request message.
func TestSimGRPCThroughFilter(t *testing.T) {
	sim := simtest.Start(t)
	h := newHarness(t, `{"mesh": `+testMesh("fifo", relocationMesh)+`}`, true)
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	c := &http.Client{Timeout: time.Minute, Transport: &http.Transport{Protocols: &protos}}
	defer c.CloseIdleConnections()
	req := grpcframe.Message(&llmv1.GenerateRequest{Model: sim.Model, MaxTokens: 9, Sampling: &llmv1.SamplingParams{IgnoreEos: true}})
	s := proxy(t, h, c, "http://"+sim.GRPCAddr+"/llm.v1.Generation/Generate",
		grpcRequest("x-llmesh-prompt", strings.Repeat("a prompt in metadata ", 4)), req)
	md := s.Metadata(MetadataNamespace)
	want(t, "output_tokens", md["output_tokens"], 9)
	want(t, "decode_steps", md["decode_steps"], 8)
	if _, bad := md["error"]; bad {
		t.Errorf("error = %v (the sim got a request without a prompt?)", md["error"])
	}
	want(t, StatRelocated, h.counter(StatRelocated), 1)
	want(t, StatCompleted, h.counter(StatCompleted), 1)
}
