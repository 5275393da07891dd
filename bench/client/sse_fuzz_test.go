package client

import (
	"context"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/bench/result"
)

// FuzzReadStream feeds arbitrary bytes to the SSE reader: it must end every
// stream with a status and never panic or report more chunks than events.
func FuzzReadStream(f *testing.F) {
	f.Add("data: {\"choices\":[{\"text\":\" a\"}]}\n\ndata: [DONE]\n\n")
	f.Add("data: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\ndata: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\ndata: {\"choices\":[],\"usage\":{\"completion_tokens\":7},\"llmesh_engine\":{\"arrival_ns\":1,\"first_token_ns\":2}}\n\ndata: [DONE]\n\n")
	f.Add(": comment\nevent: x\ndata: {\"error\":{\"message\":\"preempted\"}}\n\n")
	f.Add("data: {not json\n\n")
	f.Add("data: {\"choices\":[{\"text\":\"a\"}]}\r\n\r\n")
	f.Fuzz(func(t *testing.T, in string) {
		c := &openAI{}
		var rec result.Record
		n := int64(0)
		c.readStream(context.Background(), strings.NewReader(in), &rec, func() int64 { n++; return n })
		if rec.Status == "" {
			t.Fatal("no status")
		}
		if len(rec.ChunkNS) > strings.Count(in, "data:") {
			t.Fatalf("%d chunks from %d data lines", len(rec.ChunkNS), strings.Count(in, "data:"))
		}
		if rec.Status == result.StatusOK && rec.DoneNS == 0 {
			t.Fatal("ok without done time")
		}
	})
}
