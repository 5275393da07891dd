package filter

import (
	"testing"
	"time"

	"github.com/llmesh/llmesh/api/llmv1"
)

// BenchmarkObserveSSE measures one typical chat-completion chunk (one SSE
// event, one token) per op, in steady state.
func BenchmarkObserveSSE(b *testing.B) {
	chunk := []byte(`data: {"id":"chatcmpl-8f3a","object":"chat.completion.chunk","created":1732900000,"model":"llama-3.1-8b","choices":[{"index":0,"delta":{"content":" token"},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	o := NewObserver(Options{})
	o.MarkReceived(t0)
	o.ResponseHeaders(t0, 200, MapHeaders{"content-type": "text/event-stream"})
	now := t0
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	reportCPU(b)
	for b.Loop() {
		now = now.Add(time.Millisecond)
		if err := o.Observe(now, chunk); err != nil {
			b.Fatal(err)
		}
	}
	if o.obs.TokenChunks == 0 {
		b.Fatal("no tokens seen")
	}
}

// BenchmarkObserveSSESplit is the same chunk arriving in three pieces with
// boundaries inside the data line.
func BenchmarkObserveSSESplit(b *testing.B) {
	chunk := []byte(`data: {"id":"chatcmpl-8f3a","object":"chat.completion.chunk","created":1732900000,"model":"llama-3.1-8b","choices":[{"index":0,"delta":{"content":" token"},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	p1, p2, p3 := chunk[:40], chunk[40:150], chunk[150:]
	o := NewObserver(Options{})
	o.ResponseHeaders(t0, 200, MapHeaders{"content-type": "text/event-stream"})
	now := t0
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	reportCPU(b)
	for b.Loop() {
		now = now.Add(time.Millisecond)
		_ = o.Observe(now, p1)
		_ = o.Observe(now, p2)
		_ = o.Observe(now, p3)
	}
}

// BenchmarkObserveGRPC measures one llm.v1 response message (one token id
// and its text) per op, in steady state.
func BenchmarkObserveGRPC(b *testing.B) {
	chunk := frame(b, &llmv1.GenerateResponse{TokenIds: []uint32{31337}, Text: " token"})
	o := NewObserver(Options{GRPCMethod: MethodLLMV1})
	o.ResponseHeaders(t0, 200, MapHeaders{"content-type": "application/grpc"})
	now := t0
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	reportCPU(b)
	for b.Loop() {
		now = now.Add(time.Millisecond)
		if err := o.Observe(now, chunk); err != nil {
			b.Fatal(err)
		}
	}
	if o.obs.TokenChunks == 0 {
		b.Fatal("no tokens seen")
	}
}

// BenchmarkObserveGRPCVLLM is the vLLM engine API's stream chunk.
func BenchmarkObserveGRPCVLLM(b *testing.B) {
	chunk := rawFrame(0, []byte{0x0a, 0x06, 0x0a, 0x02, 0xe9, 0x07, 0x18, 0x01}) // chunk{token_ids:[1001], completion_tokens:1}
	o := NewObserver(Options{GRPCMethod: MethodVLLM})
	o.ResponseHeaders(t0, 200, MapHeaders{"content-type": "application/grpc"})
	now := t0
	b.ReportAllocs()
	reportCPU(b)
	for b.Loop() {
		now = now.Add(time.Millisecond)
		if err := o.Observe(now, chunk); err != nil {
			b.Fatal(err)
		}
	}
	if o.obs.CountedTokens != b.N {
		b.Fatalf("counted %d tokens over %d chunks", o.obs.CountedTokens, b.N)
	}
}
