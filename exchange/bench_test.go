package exchange

import (
	"testing"
	"time"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/testkit/cputime"
	"github.com/llmesh/llmesh/testkit/grpcframe"
)

// benchTokens are the texts the SSE benchmarks cycle through: real
// streams change the text every event, and some texts carry escapes.
var benchTokens = []string{" token", " the", "\\n", " quick", ",", " \\\"brown\\\"", " fox", " caf\\u00e9"}

// benchSSEChunks are typical chat-completion chunks (one SSE event, one
// token each), of one request: only the text changes.
func benchSSEChunks() [][]byte {
	out := make([][]byte, len(benchTokens))
	for i, tok := range benchTokens {
		out[i] = []byte(`data: {"id":"chatcmpl-8f3a","object":"chat.completion.chunk","created":1732900000,"model":"llama-3.1-8b","choices":[{"index":0,"delta":{"content":"` + tok + `"},"logprobs":null,"finish_reason":null}]}` + "\n\n")
	}
	return out
}

// BenchmarkObserveSSE measures one typical chat-completion chunk (one SSE
// event, one token) per op, in steady state, with the SSE fast path.
func BenchmarkObserveSSE(b *testing.B) { benchObserveSSE(b, Options{}) }

// BenchmarkObserveSSEGeneral is BenchmarkObserveSSE with every event taking
// the general JSON scan (Options.GeneralScan): the cost without the fast
// path, in the same run.
func BenchmarkObserveSSEGeneral(b *testing.B) { benchObserveSSE(b, Options{GeneralScan: true}) }

func benchObserveSSE(b *testing.B, opts Options) {
	chunks := benchSSEChunks()
	o := NewObserver(opts)
	o.MarkReceived(t0)
	o.ResponseHeaders(t0, 200, MapHeaders{"content-type": "text/event-stream"})
	now := t0
	b.SetBytes(int64(len(chunks[0])))
	b.ReportAllocs()
	cputime.ReportThread(b)
	i := 0
	for b.Loop() {
		now = now.Add(time.Millisecond)
		if err := o.Observe(now, chunks[i%len(chunks)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	if o.obs.TokenChunks != i {
		b.Fatalf("%d token chunks over %d events", o.obs.TokenChunks, i)
	}
}

// BenchmarkObserveSSESplit is the same chunks arriving in three pieces
// with boundaries inside the data line.
func BenchmarkObserveSSESplit(b *testing.B) { benchObserveSSESplit(b, Options{}) }

// BenchmarkObserveSSESplitGeneral is BenchmarkObserveSSESplit without the
// fast path.
func BenchmarkObserveSSESplitGeneral(b *testing.B) {
	benchObserveSSESplit(b, Options{GeneralScan: true})
}

func benchObserveSSESplit(b *testing.B, opts Options) {
	chunks := benchSSEChunks()
	o := NewObserver(opts)
	o.ResponseHeaders(t0, 200, MapHeaders{"content-type": "text/event-stream"})
	now := t0
	b.SetBytes(int64(len(chunks[0])))
	b.ReportAllocs()
	cputime.ReportThread(b)
	i := 0
	for b.Loop() {
		now = now.Add(time.Millisecond)
		c := chunks[i%len(chunks)]
		_ = o.Observe(now, c[:40])
		_ = o.Observe(now, c[40:150])
		_ = o.Observe(now, c[150:])
		i++
	}
	if o.obs.TokenChunks != i {
		b.Fatalf("%d token chunks over %d events", o.obs.TokenChunks, i)
	}
}

// BenchmarkObserveGRPC measures one llm.v1 response message (one token id
// and its text) per op, in steady state.
func BenchmarkObserveGRPC(b *testing.B) {
	chunk := grpcframe.Message(&llmv1.GenerateResponse{TokenIds: []uint32{31337}, Text: " token"})
	o := NewObserver(Options{GRPCMethod: MethodLLMV1})
	o.ResponseHeaders(t0, 200, MapHeaders{"content-type": "application/grpc"})
	now := t0
	b.SetBytes(int64(len(chunk)))
	b.ReportAllocs()
	cputime.ReportThread(b)
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
	chunk := grpcframe.Raw(0, []byte{0x0a, 0x06, 0x0a, 0x02, 0xe9, 0x07, 0x18, 0x01}) // chunk{token_ids:[1001], completion_tokens:1}
	o := NewObserver(Options{GRPCMethod: MethodVLLM})
	o.ResponseHeaders(t0, 200, MapHeaders{"content-type": "application/grpc"})
	now := t0
	b.ReportAllocs()
	cputime.ReportThread(b)
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
