package envoy

import (
	"testing"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/filter"
	"github.com/llmesh/llmesh/filter/filtertest"
)

// BenchmarkEncodeData measures the adapter's per-chunk cost on the fake:
// one token-bearing chunk per call on an admitted request (preemption
// check, observation, progress to the lease). Goal: ≤ 1 µs, 0 allocs.
func BenchmarkEncodeData(b *testing.B) {
	for _, tc := range []struct {
		name  string
		req   *filtertest.HeaderMap
		resp  *filtertest.HeaderMap
		chunk func() []byte
	}{
		{"sse", sseRequest(), sseResponse(), func() []byte { return []byte(sseChunks[0]) }},
		{"grpc", grpcRequest(), filtertest.ResponseHeaders(200, "content-type", "application/grpc"),
			func() []byte { return grpcFrame(b, &llmv1.GenerateResponse{TokenIds: []uint32{42}, Text: "tok"}) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			h := newHarness(b, `{"mesh": `+testMesh("fifo", "")+`}`, true)
			s := h.stream(filtertest.Options{})
			if r := s.DecodeHeaders(tc.req, true); r.Status != api.Continue {
				b.Fatalf("DecodeHeaders: %+v", r)
			}
			if r := s.EncodeHeaders(tc.resp, false); r.Status != api.Continue {
				b.Fatalf("EncodeHeaders: %+v", r)
			}
			chunk := tc.chunk()
			buf := filtertest.NewBuffer(chunk)
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
		opts  filter.Options
		chunk func() []byte
	}{
		{"sse", filter.Options{Protocol: filter.ProtocolSSE, MaxITLSamples: -1}, func() []byte { return []byte(sseChunks[0]) }},
		{"grpc", filter.Options{Protocol: filter.ProtocolGRPC, GRPCMethod: filter.MethodLLMV1, MaxITLSamples: -1},
			func() []byte { return grpcFrame(b, &llmv1.GenerateResponse{TokenIds: []uint32{42}, Text: "tok"}) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			o := filter.NewObserver(tc.opts)
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
