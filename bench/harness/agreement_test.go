package harness

import (
	"context"
	"testing"

	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/sim/simtest"
)

// TestAgreementWithSim compares the harness's TTFT with the simulated
// engine's ground truth (arrival → first token on the engine clock, run at
// real-time scale so both clocks tick alike). The difference is the
// loopback HTTP/gRPC path plus the harness's own overhead: it must never be
// negative and should be small.
func TestAgreementWithSim(t *testing.T) {
	s := simtest.Start(t, simtest.WithTimeScale(1))
	for _, p := range []string{workload.ProtocolCompletions, workload.ProtocolGRPC, workload.ProtocolVLLM, workload.ProtocolChat} {
		t.Run(p, func(t *testing.T) {
			target := s.HTTPURL
			if p == workload.ProtocolGRPC || p == workload.ProtocolVLLM {
				target = s.GRPCAddr
			}
			sp, err := workload.Parse([]byte(`
model: ` + s.Model + `
protocol: ` + p + `
requests: 30
arrival: {process: poisson, rate: 15}
classes: [{name: a, prompt_tokens: {kind: uniform, min: 64, max: 512}, output_tokens: {value: 16}}]`))
			if err != nil {
				t.Fatal(err)
			}
			sp.Default()
			w, err := workload.Compile(sp, workload.CompileOptions{})
			if err != nil {
				t.Fatal(err)
			}
			rep, recs, err := Run(context.Background(), Options{Workload: w, Target: target})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Completed != 30 {
				t.Fatalf("completed %d of 30; first error %q", rep.Completed, recs[0].Error)
			}
			for _, r := range recs {
				if r.OutputTokens != 16 || len(r.ChunkNS) == 0 {
					t.Fatalf("record %d: %d tokens in %d chunks, want 16", r.Index, r.OutputTokens, len(r.ChunkNS))
				}
			}
			a := rep.Engine
			if a == nil || a.N != 30 {
				t.Fatalf("engine agreement %+v: the sim's ground truth was not read", a)
			}
			t.Logf("%s: client TTFT − engine TTFT over %d requests: p50 %.3f ms, p90 %.3f ms, p99 %.3f ms, max %.3f ms; client TTFT p50 %.2f ms",
				p, a.N, a.DeltaMs.P50, a.DeltaMs.P90, a.DeltaMs.P99, a.DeltaMs.Max, rep.Overall.TTFTMs.P50)
			if a.NegativeN > 0 {
				t.Errorf("%d requests had a client TTFT shorter than the engine's", a.NegativeN)
			}
			// Very generous, because the machine running the tests may be
			// heavily loaded: this catches unit and clock mix-ups, not
			// overhead (docs/bench.md has measured numbers).
			if a.DeltaMs.P50 > 250 {
				t.Errorf("median client−engine TTFT difference %.1f ms, want ≤ 250", a.DeltaMs.P50)
			}
		})
	}
}
