package client

import (
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"

	"github.com/llmesh/llmesh/api/llmv1"
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

// TestMergeDeltas: against an engine that merges piled-up tokens into one
// SSE event, the output tokens come from the usage, not from counting
// events, and so does the TPOT.
func TestMergeDeltas(t *testing.T) {
	s := simtest.Start(t, simtest.WithConfig(func(c *server.Config) { c.Quirks = []string{string(server.QuirkMergeDeltas)} }))
	c, err := New(workload.ProtocolCompletions, s.HTTPURL, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rec := do(t, c, Request{ID: "1", Model: s.Model, PromptTokens: 3, MaxTokens: 40, Stream: true,
		Headers: map[string]string{server.FaultHeader: "stall=300ms"}})
	if rec.Status != result.StatusOK || rec.OutputTokens != 40 || rec.OutputTokensSource != result.SourceUsage || len(rec.ChunkNS) >= 40 {
		t.Errorf("status %s output %d from %q in %d chunks; want 40 from usage in fewer chunks", rec.Status, rec.OutputTokens, rec.OutputTokensSource, len(rec.ChunkNS))
	}
}

// TestRoleChunkFirst: a first event without a token (a bare role, an
// empty text) is not the first token, for completions and chat.
func TestRoleChunkFirst(t *testing.T) {
	s := simtest.Start(t, simtest.WithConfig(func(c *server.Config) { c.Quirks = []string{string(server.QuirkRoleChunkFirst)} }))
	for _, protocol := range []string{workload.ProtocolCompletions, workload.ProtocolChat} {
		c, err := New(protocol, s.HTTPURL, 0)
		if err != nil {
			t.Fatal(err)
		}
		rec := do(t, c, Request{ID: "1", Model: s.Model, PromptTokens: 3, MaxTokens: 6, Stream: true})
		c.Close()
		if rec.Status != result.StatusOK || rec.OutputTokens != 6 || len(rec.ChunkNS) != 6 {
			t.Errorf("%s: status %s %q output %d chunks %d; want 6 token chunks", protocol, rec.Status, rec.Error, rec.OutputTokens, len(rec.ChunkNS))
		}
	}
}

// batchedServer is an llm.v1 engine that fell behind: it sends its tokens
// several ids per message and never fills usage.
type batchedServer struct {
	llmv1.UnimplementedGenerationServer
}

func (batchedServer) Generate(_ *llmv1.GenerateRequest, st grpc.ServerStreamingServer[llmv1.GenerateResponse]) error {
	for _, ids := range [][]uint32{{1, 2, 3}, {4}, {5, 6}} {
		if err := st.Send(&llmv1.GenerateResponse{TokenIds: ids, Text: "t"}); err != nil {
			return err
		}
	}
	return st.Send(&llmv1.GenerateResponse{FinishReason: "length"})
}

// TestGRPCCountsTokenIDs: without usage the output tokens are the streamed
// token ids, not the messages that carried them (3 messages, 6 tokens).
func TestGRPCCountsTokenIDs(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	llmv1.RegisterGenerationServer(s, batchedServer{})
	go func() { _ = s.Serve(ln) }()
	t.Cleanup(s.Stop)
	c, err := New(workload.ProtocolGRPC, ln.Addr().String(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rec := do(t, c, Request{ID: "1", Model: "m", PromptTokens: 5, MaxTokens: 6, Stream: true})
	if rec.Status != result.StatusOK || rec.OutputTokens != 6 || rec.OutputTokensSource != result.SourceStream || len(rec.ChunkNS) != 3 {
		t.Errorf("status %s output %d from %q in %d chunks; want 6 from %q in 3 chunks",
			rec.Status, rec.OutputTokens, rec.OutputTokensSource, len(rec.ChunkNS), result.SourceStream)
	}
}
