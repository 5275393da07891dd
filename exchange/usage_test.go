package exchange

import (
	"testing"
	"time"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/api/vllmpb"
	"github.com/llmesh/llmesh/testkit/grpcframe"
)

// TestUsageAbsent: an engine that reports no usage, or a usage of 0 while
// the stream carried tokens, gets the counted tokens and a TPOT; an engine
// that reports usage keeps its figure.
func TestUsageAbsent(t *testing.T) {
	vchunk := func(ids ...uint32) []byte {
		return grpcframe.Message(&vllmpb.GenerateResponse{Response: &vllmpb.GenerateResponse_Chunk{Chunk: &vllmpb.GenerateStreamChunk{TokenIds: ids}}})
	}
	vdone := func(completion uint32) []byte {
		return grpcframe.Message(&vllmpb.GenerateResponse{Response: &vllmpb.GenerateResponse_Complete{Complete: &vllmpb.GenerateComplete{
			OutputIds: []uint32{1, 2, 3, 4}, FinishReason: "length", CompletionTokens: completion}}})
	}
	for _, tc := range []struct {
		name       string
		method     string
		frames     [][]byte
		want       int
		wantSource TokenSource
		wantUsage  bool
	}{
		{"vllm complete without counts", MethodVLLM, [][]byte{vchunk(1), vchunk(2), vchunk(3, 4), vdone(0)}, 4, TokensFromStream, false},
		{"vllm complete with counts", MethodVLLM, [][]byte{vchunk(1), vchunk(2), vchunk(3, 4), vdone(4)}, 4, TokensFromUsage, true},
		{"vllm usage larger than the stream", MethodVLLM, [][]byte{vchunk(1), vchunk(2), vdone(7)}, 7, TokensFromUsage, true},
		{"llm.v1 no usage", MethodLLMV1, [][]byte{
			grpcframe.Message(&llmv1.GenerateResponse{TokenIds: []uint32{1}}),
			grpcframe.Message(&llmv1.GenerateResponse{TokenIds: []uint32{2, 3}, FinishReason: "length"}),
		}, 3, TokensFromStream, false},
		{"llm.v1 usage of zero", MethodLLMV1, [][]byte{
			grpcframe.Message(&llmv1.GenerateResponse{TokenIds: []uint32{1}}),
			grpcframe.Message(&llmv1.GenerateResponse{TokenIds: []uint32{2, 3}, Usage: &llmv1.Usage{PromptTokens: 4}}),
		}, 3, TokensFromStream, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, errs := feedGRPC(t, Options{GRPCMethod: tc.method}, MapHeaders{"grpc-status": "0"}, tc.frames...)
			if len(errs) > 0 {
				t.Fatal(errs)
			}
			if got.OutputTokens != tc.want || got.OutputTokensSource != tc.wantSource || got.UsageReported != tc.wantUsage {
				t.Errorf("output %d from %v (usage reported %v), want %d from %v (%v)",
					got.OutputTokens, got.OutputTokensSource, got.UsageReported, tc.want, tc.wantSource, tc.wantUsage)
			}
			if !got.HasTPOT || got.TPOT <= 0 || got.TPOT != (got.E2E-got.TTFT)/time.Duration(got.OutputTokens-1) {
				t.Errorf("TPOT %v (has %v), want one from %d tokens", got.TPOT, got.HasTPOT, got.OutputTokens)
			}
		})
	}
}

// TestUsageSSEZero: the same rule holds for SSE usage.
func TestUsageSSEZero(t *testing.T) {
	o := NewObserver(Options{})
	o.MarkReceived(at(0))
	o.ResponseHeaders(at(1), 200, MapHeaders{"content-type": "text/event-stream"})
	_ = o.Observe(at(10), []byte("data: {\"choices\":[{\"text\":\"a\"}]}\n\n"))
	_ = o.Observe(at(20), []byte("data: {\"choices\":[{\"text\":\"b\"}]}\n\n"))
	_ = o.Observe(at(30), []byte("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":0}}\n\ndata: [DONE]\n\n"))
	o.Finish(at(30), nil)
	got := o.Observation()
	if got.OutputTokens != 2 || got.OutputTokensSource != TokensFromStream || !got.HasTPOT || got.TPOT != 20*time.Millisecond {
		t.Errorf("output %d from %v, TPOT %v %v; want 2 from stream, 20ms", got.OutputTokens, got.OutputTokensSource, got.TPOT, got.HasTPOT)
	}
}
