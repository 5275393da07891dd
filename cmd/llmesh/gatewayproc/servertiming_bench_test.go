package gatewayproc

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/bench/client"
	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/sim/simtest"
)

// TestBenchReadsServerTiming: the harness reads the gateway's
// Server-Timing (queue time in the header, the rest in the trailer) for
// both protocols, so its reports can show llmesh's queue time per class.
func TestBenchReadsServerTiming(t *testing.T) {
	s := simtest.Start(t)
	data, _ := startRun(t, Config{Listen: "127.0.0.1:0", Upstream: s.HTTPURL, GRPCUpstream: s.GRPCAddr,
		Policy: "fifo", MaxInflight: 4, ServerTiming: true, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	for _, protocol := range []string{workload.ProtocolCompletions, workload.ProtocolGRPC} {
		target := data
		if protocol == workload.ProtocolGRPC {
			target = strings.TrimPrefix(data, "http://")
		}
		c, err := client.New(protocol, target, 0)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var rec result.Record
		start := time.Now()
		c.Do(ctx, &client.Request{ID: "1", Model: s.Model, PromptTokens: 4, MaxTokens: 6, Stream: true}, &rec,
			func() int64 { return int64(time.Since(start)) })
		cancel()
		c.Close()
		if rec.Status != result.StatusOK || rec.LLMesh == nil || !rec.LLMesh.HasQueue || rec.LLMesh.QueueNS < 0 {
			t.Errorf("%s: status %s %q, llmesh %+v: want the gateway's queue time", protocol, rec.Status, rec.Error, rec.LLMesh)
		}
	}
}
