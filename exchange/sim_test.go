package exchange_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/api/vllmpb"
	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/sim/server"
	"github.com/llmesh/llmesh/sim/simtest"
	"github.com/llmesh/llmesh/testkit/grpcframe"
)

// These tests run the observer over real responses of the simulated engine
// on loopback, fed in whatever pieces the network delivers.

// run sends req and feeds the response through an observer as it arrives.
func run(t *testing.T, client *http.Client, req *http.Request, opts exchange.Options) exchange.Observation {
	t.Helper()
	o := exchange.NewObserver(opts)
	o.MarkReceived(time.Now())
	o.MarkUpstreamSent(time.Now())
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	o.ResponseHeaders(time.Now(), resp.StatusCode, resp.Header)
	buf := make([]byte, 32<<10)
	var cause error
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			_ = o.Observe(time.Now(), buf[:n])
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			cause = err
			break
		}
	}
	o.Trailers(time.Now(), resp.Trailer)
	o.Finish(time.Now(), cause)
	return o.Observation()
}

func post(t *testing.T, url, body string, header ...string) *http.Request {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("content-type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	return req
}

// The observer starts no goroutines; this checks that the tests' sims and
// clients stop theirs too.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestSimOpenAI(t *testing.T) {
	s := simtest.Start(t)
	c := &http.Client{Timeout: time.Minute, Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	chat := `{"model":"` + s.Model + `","messages":[{"role":"user","content":"hello there"}],"max_tokens":24,"stream":true,"stream_options":{"include_usage":true},"ignore_eos":true}`
	got := run(t, c, post(t, s.HTTPURL+"/v1/chat/completions", chat), exchange.Options{KeepOutput: true})
	if !got.OK() || got.Protocol != exchange.ProtocolSSE || !got.Complete || !got.UsageReported {
		t.Fatalf("chat stream: %+v", got)
	}
	if got.OutputTokens != 24 || got.CountedTokens != 24 || got.TokenChunks != 24 || got.DecodeSteps != 23 || got.ITL.Count != 23 {
		t.Errorf("tokens: output %d counted %d chunks %d steps %d gaps %d, want 24/24/24/23/23",
			got.OutputTokens, got.CountedTokens, got.TokenChunks, got.DecodeSteps, got.ITL.Count)
	}
	if !got.HasTPOT || got.TTFT <= 0 || got.Text == "" || got.PromptTokens == 0 {
		t.Errorf("timing/text: ttft %v tpot %v text %q prompt %d", got.TTFT, got.TPOT, got.Text, got.PromptTokens)
	}
	e := got.Engine
	if !e.Seen || e.Arrival.IsZero() || e.FirstToken.Before(e.FirstScheduled) || e.Finish.Before(e.FirstToken) {
		t.Errorf("engine ground truth %+v", e)
	}

	body := `{"model":"` + s.Model + `","prompt":"once upon a time","max_tokens":9,"ignore_eos":true}`
	got = run(t, c, post(t, s.HTTPURL+"/v1/completions", body), exchange.Options{})
	if !got.OK() || got.Protocol != exchange.ProtocolJSON || got.OutputTokens != 9 || !got.Engine.Seen {
		t.Errorf("non-streaming: %+v", got)
	}

	stream := `{"model":"` + s.Model + `","prompt":"x","max_tokens":50,"stream":true,"ignore_eos":true}`
	for _, tc := range []struct {
		fault string
		kind  exchange.ErrorKind
	}{
		{"503", exchange.ErrorHTTPStatus},
		{"429", exchange.ErrorHTTPStatus},
		{"drop-after=3", exchange.ErrorUpstreamReset},
	} {
		got = run(t, c, post(t, s.HTTPURL+"/v1/completions", stream, "x-llmesh-sim-fault", tc.fault), exchange.Options{})
		// A dropped connection after a chunked response can read as a clean
		// EOF without [DONE]: truncated, also a failure.
		if got.ErrorKind != tc.kind && !(tc.kind == exchange.ErrorUpstreamReset && got.ErrorKind == exchange.ErrorTruncated) {
			t.Errorf("fault %s: kind %v (%s), want %v", tc.fault, got.ErrorKind, got.Error, tc.kind)
		}
		t.Logf("fault %s: %v %q after %d token chunks", tc.fault, got.ErrorKind, got.Error, got.TokenChunks)
		if tc.fault == "drop-after=3" && got.TokenChunks > 3 {
			t.Errorf("drop-after=3 saw %d token chunks", got.TokenChunks)
		}
	}
}

func grpcRequest(t *testing.T, addr, method string, msg []byte) *http.Request {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, "http://"+addr+method, bytes.NewReader(msg))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("content-type", "application/grpc")
	req.Header.Set("te", "trailers")
	return req
}

func TestSimGRPC(t *testing.T) {
	s := simtest.Start(t)
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	c := &http.Client{Timeout: time.Minute, Transport: &http.Transport{Protocols: &protos}}
	defer c.CloseIdleConnections()

	req := grpcRequest(t, s.GRPCAddr, exchange.MethodLLMV1, grpcframe.Message(&llmv1.GenerateRequest{Model: s.Model, Prompt: "hi", MaxTokens: 17,
		Sampling: &llmv1.SamplingParams{IgnoreEos: true}}))
	got := run(t, c, req, exchange.Options{GRPCMethod: exchange.MethodLLMV1, KeepOutput: true})
	if !got.OK() || got.Protocol != exchange.ProtocolGRPC || !got.HasGRPCStatus || got.GRPCStatus != 0 {
		t.Fatalf("llm.v1: %+v", got)
	}
	if got.OutputTokens != 17 || got.CountedTokens != 17 || len(got.TokenIDs) != 17 || !got.Engine.Seen || !got.UsageReported {
		t.Errorf("llm.v1 tokens: output %d counted %d ids %d engine %v", got.OutputTokens, got.CountedTokens, len(got.TokenIDs), got.Engine.Seen)
	}

	max := uint32(11)
	req = grpcRequest(t, s.GRPCAddr, exchange.MethodVLLM, grpcframe.Message(&vllmpb.GenerateRequest{RequestId: "r1",
		Input: &vllmpb.GenerateRequest_Text{Text: "hello"}, Stream: true,
		SamplingParams: &vllmpb.SamplingParams{MaxTokens: &max, IgnoreEos: true}}))
	got = run(t, c, req, exchange.Options{GRPCMethod: exchange.MethodVLLM})
	if !got.OK() || got.OutputTokens != 11 || got.CountedTokens != 11 || got.TokenChunks < 2 {
		t.Errorf("vllm: %+v", got)
	}

	req = grpcRequest(t, s.GRPCAddr, exchange.MethodLLMV1, grpcframe.Message(&llmv1.GenerateRequest{Model: s.Model, Prompt: "hi", MaxTokens: 5}))
	req.Header.Set("x-llmesh-sim-fault", "503")
	got = run(t, c, req, exchange.Options{GRPCMethod: exchange.MethodLLMV1})
	if got.ErrorKind != exchange.ErrorGRPCStatus || got.GRPCStatus == 0 {
		t.Errorf("grpc fault: kind %v status %d %q", got.ErrorKind, got.GRPCStatus, got.Error)
	}
}

// TestSimGRPCNoUsage: against an engine whose gRPC streams carry no usage
// (the sim's grpc-no-usage quirk), output tokens are those the stream
// carried, for both gRPC APIs.
func TestSimGRPCNoUsage(t *testing.T) {
	s := simtest.Start(t, simtest.WithConfig(func(c *server.Config) { c.Quirks = []string{string(server.QuirkGRPCNoUsage)} }))
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	c := &http.Client{Timeout: time.Minute, Transport: &http.Transport{Protocols: &protos}}
	defer c.CloseIdleConnections()

	max := uint32(11)
	req := grpcRequest(t, s.GRPCAddr, exchange.MethodVLLM, grpcframe.Message(&vllmpb.GenerateRequest{RequestId: "r1",
		Input: &vllmpb.GenerateRequest_Text{Text: "hello"}, Stream: true,
		SamplingParams: &vllmpb.SamplingParams{MaxTokens: &max, IgnoreEos: true}}))
	got := run(t, c, req, exchange.Options{GRPCMethod: exchange.MethodVLLM})
	if !got.OK() || got.OutputTokens != 11 || got.OutputTokensSource != exchange.TokensFromStream || !got.HasTPOT {
		t.Errorf("vllm: output %d from %v, TPOT %v: %+v", got.OutputTokens, got.OutputTokensSource, got.HasTPOT, got)
	}
	req = grpcRequest(t, s.GRPCAddr, exchange.MethodLLMV1, grpcframe.Message(&llmv1.GenerateRequest{Model: s.Model, Prompt: "hi", MaxTokens: 9}))
	got = run(t, c, req, exchange.Options{GRPCMethod: exchange.MethodLLMV1})
	if !got.OK() || got.OutputTokens != 9 || got.OutputTokensSource != exchange.TokensFromStream || got.UsageReported || !got.HasTPOT {
		t.Errorf("llm.v1: output %d from %v: %+v", got.OutputTokens, got.OutputTokensSource, got)
	}
}
