package server_test

import (
	"testing"

	"github.com/openai/openai-go/v3"

	"github.com/llmesh/llmesh/sim"
	"github.com/llmesh/llmesh/sim/simtest"
)

// TestPrefixCacheMetrics: the same long prompt sent twice through the HTTP
// API hits the blocks the first request computed, and /metrics counts the
// queried and hit tokens under vLLM's names; with caching off nothing hits.
func TestPrefixCacheMetrics(t *testing.T) {
	const n = 1000
	prompt := openai.CompletionNewParamsPromptUnion{OfString: openai.String(words(n, "p"))}
	for _, off := range []bool{false, true} {
		s := simtest.Start(t, simtest.WithTimeScale(testScale), simtest.WithEngine(sim.Config{DisablePrefixCaching: off}))
		c := newClient(s)
		first := complete(t, c, s.Model, prompt, 4)
		second := complete(t, c, s.Model, prompt, 4)
		if first != second {
			t.Errorf("off=%v: repeated prompt gave %q then %q", off, first, second)
		}
		// The loop updates the counters right after each step, before the
		// step's tokens go out (sim/server/loop.go).
		q, h := metric(t, s, "vllm:prefix_cache_queries_total"), metric(t, s, "vllm:prefix_cache_hits_total")
		wantQ, wantH := float64(2*n), float64((n-1)/sim.BlockSize*sim.BlockSize)
		if off {
			wantQ, wantH = 0, 0
		}
		if q != wantQ || h != wantH {
			t.Errorf("off=%v: queries %v hits %v, want %v and %v", off, q, h, wantQ, wantH)
		}
	}
}
