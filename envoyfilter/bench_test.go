package envoyfilter

import (
	"testing"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/testkit/fakesdk"
	"github.com/llmesh/llmesh/testkit/grpcframe"
)

// BenchmarkEncodeData measures the adapter's per-chunk cost on the fake:
// one token-bearing chunk per call on an admitted request (preemption
// check, observation, progress to the lease). Goal: ≤ 1 µs, 0 allocs.
func BenchmarkEncodeData(b *testing.B) {
	for _, tc := range []struct {
		name  string
		req   *fakesdk.HeaderMap
		resp  *fakesdk.HeaderMap
		chunk func() []byte
	}{
		{"sse", sseRequest(), sseResponse(), func() []byte { return []byte(sseChunks[0]) }},
		{"grpc", grpcRequest(), fakesdk.ResponseHeaders(200, "content-type", "application/grpc"),
			func() []byte { return grpcframe.Message(&llmv1.GenerateResponse{TokenIds: []uint32{42}, Text: "tok"}) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			h := newHarness(b, `{"mesh": `+testMesh("fifo", "")+`}`, true)
			s := h.stream(fakesdk.Options{})
			if r := s.DecodeHeaders(tc.req, true); r.Status != api.Continue {
				b.Fatalf("DecodeHeaders: %+v", r)
			}
			if r := s.EncodeHeaders(tc.resp, false); r.Status != api.Continue {
				b.Fatalf("EncodeHeaders: %+v", r)
			}
			chunk := tc.chunk()
			buf := fakesdk.NewBuffer(chunk)
			b.SetBytes(int64(len(chunk)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				buf.Reuse(chunk)
				if st := s.EncodeBuffer(buf, false); st != api.Continue {
					b.Fatalf("EncodeData: %d", st)
				}
			}
			b.StopTimer()
			s.Complete()
		})
	}
}

// BenchmarkObserveOnly is the filter core's share of BenchmarkEncodeData:
// the same chunks fed straight into an observer, without the adapter.
func BenchmarkObserveOnly(b *testing.B) {
	for _, tc := range []struct {
		name  string
		opts  exchange.Options
		chunk func() []byte
	}{
		{"sse", exchange.Options{Protocol: exchange.ProtocolSSE, MaxITLSamples: -1}, func() []byte { return []byte(sseChunks[0]) }},
		{"grpc", exchange.Options{Protocol: exchange.ProtocolGRPC, GRPCMethod: exchange.MethodLLMV1, MaxITLSamples: -1},
			func() []byte { return grpcframe.Message(&llmv1.GenerateResponse{TokenIds: []uint32{42}, Text: "tok"}) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			o := exchange.NewObserver(tc.opts)
			chunk := tc.chunk()
			clk := clock.Real{}
			b.SetBytes(int64(len(chunk)))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := o.Observe(clk.Now(), chunk); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
