package e2e

import (
	"strconv"
	"testing"

	"github.com/llmesh/llmesh/testkit/proctest"
	"github.com/llmesh/llmesh/testkit/promtext"
)

// TestBenchThroughGateway drives `llmesh bench run` through a quick-mode
// gateway to the sim over each protocol the gateway proxies, and checks the
// bench report against the gateway's own TTFT histogram: every request the
// client saw complete was measured once by the gateway.
func TestBenchThroughGateway(t *testing.T) {
	sim := startSim(t, "sim")
	gw := startGateway(t, "gateway", "--upstream", sim.URL, "--grpc-upstream", sim.GRPC)

	const requests, maxTokens = 12, 24
	measured := 0
	for _, tc := range []struct {
		protocol, target string
	}{
		{"openai-completions", gw.URL()},
		{"openai-chat", gw.URL()},
		{"grpc-llm-v1", gw.Addr},
		{"grpc-vllm", gw.Addr},
	} {
		t.Run(tc.protocol, func(t *testing.T) {
			b := runBench(t, tc.target, "--protocol", tc.protocol, "--model", sim.Model,
				"--requests", strconv.Itoa(requests), "--concurrency", "4",
				"--prompt-tokens", "64", "--max-tokens", strconv.Itoa(maxTokens))
			b.checkAllOK(t, requests, maxTokens)
			measured += requests

			// The gateway records a request when its response ends, which
			// may be a moment after the client read the last byte.
			var got float64
			proctest.WaitFor(t, "gateway TTFT histogram count to reach the requests sent", func() bool {
				got, _ = promtext.Sum(gw.metrics(t), "gen_ai_server_time_to_first_token_seconds_count")
				return got >= float64(measured)
			}, gw.Proc)
			if got != float64(measured) {
				t.Fatalf("gen_ai_server_time_to_first_token_seconds_count = %v, want %d", got, measured)
			}
		})
	}
}
