package server_test

import (
	"context"
	"io"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/api/vllmpb"
	"github.com/llmesh/llmesh/sim/server"
	"github.com/llmesh/llmesh/sim/simtest"
)

func TestParseQuirks(t *testing.T) {
	q, err := server.ParseQuirks([]string{" grpc-no-usage ,", ""})
	if err != nil || !q.Has(server.QuirkGRPCNoUsage) {
		t.Fatalf("ParseQuirks = %v, %v", q, err)
	}
	if q, err := server.ParseQuirks(nil); err != nil || q.Has(server.QuirkGRPCNoUsage) {
		t.Fatalf("ParseQuirks(nil) = %v, %v", q, err)
	}
	_, err = server.ParseQuirks([]string{"grpc-no-usage,no-such-thing,other"})
	if err == nil || !strings.Contains(err.Error(), `"no-such-thing"`) || !strings.Contains(err.Error(), `"other"`) ||
		!strings.Contains(err.Error(), "grpc-no-usage") {
		t.Fatalf("unknown quirk: err = %v, want both names and the known list", err)
	}
	if _, err := server.New(server.Config{Quirks: []string{"bogus"}}); err == nil || !strings.Contains(err.Error(), `quirks: quirk "bogus" unknown`) {
		t.Fatalf("server.New with an unknown quirk: %v", err)
	}
}

// TestQuirkGRPCNoUsage: with grpc-no-usage neither gRPC API reports token
// counts, but the tokens themselves still stream.
func TestQuirkGRPCNoUsage(t *testing.T) {
	s := simtest.Start(t, simtest.WithTimeScale(testScale), simtest.WithConfig(func(c *server.Config) {
		c.Quirks = []string{string(server.QuirkGRPCNoUsage)}
	}))
	conn := dial(t, s)
	ctx := context.Background()

	st, err := llmv1.NewGenerationClient(conn).Generate(ctx, &llmv1.GenerateRequest{Model: s.Model, Prompt: "a b c", MaxTokens: 5})
	if err != nil {
		t.Fatal(err)
	}
	ids := 0
	for {
		r, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		ids += len(r.TokenIds)
		if r.Usage != nil {
			t.Errorf("llm.v1 message carries usage %v", r.Usage)
		}
	}
	if ids != 5 {
		t.Errorf("llm.v1: %d token ids, want 5", ids)
	}

	mt := uint32(5)
	vs, err := vllmpb.NewVllmEngineClient(conn).Generate(ctx, &vllmpb.GenerateRequest{
		Input: &vllmpb.GenerateRequest_Text{Text: "a b c"}, Stream: true, SamplingParams: &vllmpb.SamplingParams{MaxTokens: &mt},
	})
	if err != nil {
		t.Fatal(err)
	}
	ids = 0
	var done *vllmpb.GenerateComplete
	for {
		r, err := vs.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if ch := r.GetChunk(); ch != nil {
			ids += len(ch.TokenIds)
			if ch.PromptTokens != 0 || ch.CompletionTokens != 0 {
				t.Errorf("vLLM chunk carries counts %v", ch)
			}
		}
		if c := r.GetComplete(); c != nil {
			done = c
		}
	}
	if ids != 5 || done == nil || done.CompletionTokens != 0 || done.PromptTokens != 0 || len(done.OutputIds) != 5 {
		t.Errorf("vLLM: %d streamed ids, complete %v; want 5 ids and a complete without counts", ids, done)
	}
}
