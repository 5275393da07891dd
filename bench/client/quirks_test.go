package client

import (
	"testing"
	"time"

	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/sim/server"
	"github.com/llmesh/llmesh/sim/simtest"
)

// TestGRPCNoUsage runs both gRPC protocols against the sim with its
// grpc-no-usage quirk: the output tokens are the streamed ones (not the
// proto3 zero) and a TPOT can be computed; without the quirk the engine's
// usage is the source.
func TestGRPCNoUsage(t *testing.T) {
	for _, quirk := range []bool{true, false} {
		s := simtest.Start(t, simtest.WithConfig(func(c *server.Config) {
			if quirk {
				c.Quirks = []string{string(server.QuirkGRPCNoUsage)}
			}
		}))
		wantSource := result.SourceUsage
		if quirk {
			wantSource = result.SourceStream
		}
		for _, protocol := range []string{workload.ProtocolVLLM, workload.ProtocolGRPC} {
			c, err := New(protocol, s.GRPCAddr, 0)
			if err != nil {
				t.Fatal(err)
			}
			rec := do(t, c, Request{ID: "1", Model: s.Model, PromptTokens: 5, MaxTokens: 12, Stream: true})
			c.Close()
			tpot, ok := rec.TPOT()
			if rec.Status != result.StatusOK || rec.OutputTokens != 12 || rec.OutputTokensSource != wantSource || !ok || tpot <= 0 || tpot > time.Minute {
				t.Errorf("%s quirk %v: status %s output %d from %q tpot %v %v; want 12 from %q",
					protocol, quirk, rec.Status, rec.OutputTokens, rec.OutputTokensSource, tpot, ok, wantSource)
			}
		}
	}
}
