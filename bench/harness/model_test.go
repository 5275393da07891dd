package harness

import (
	"context"
	"testing"

	"github.com/llmesh/llmesh/bench/client"
	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/sim/simtest"
)

// TestRunWithoutModel runs the quick workload with no model against the
// sim, which serves its profile's name and rejects any other: the harness
// must ask the target (GET /v1/models) for OpenAI protocols, and send no
// model over gRPC, so every request completes.
func TestRunWithoutModel(t *testing.T) {
	s := simtest.Start(t)
	m, err := client.ServedModel(context.Background(), workload.ProtocolCompletions, s.HTTPURL)
	if err != nil || m != s.Model {
		t.Fatalf("ServedModel = %q, %v; want %q", m, err, s.Model)
	}
	for _, p := range []string{workload.ProtocolCompletions, workload.ProtocolChat, workload.ProtocolGRPC} {
		t.Run(p, func(t *testing.T) {
			target := s.HTTPURL
			if p == workload.ProtocolGRPC {
				target = s.GRPCAddr
			}
			sp := QuickSpec(Quick{Protocol: p, Requests: 5, Concurrency: 2, PromptTokens: 16, MaxTokens: 4})
			if sp.Model != "" {
				t.Fatalf("quick spec model %q, want none", sp.Model)
			}
			w, err := workload.Compile(sp, workload.CompileOptions{})
			if err != nil {
				t.Fatal(err)
			}
			rep, recs, err := Run(context.Background(), Options{Workload: w, Target: target})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Completed != 5 {
				t.Fatalf("completed %d of 5; first error %q", rep.Completed, recs[0].Error)
			}
		})
	}
	if _, err := client.ServedModel(context.Background(), workload.ProtocolCompletions, "http://127.0.0.1:1"); err == nil {
		t.Error("ServedModel of a closed port: no error")
	}
}
