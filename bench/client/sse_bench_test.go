package client

import (
	"context"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/bench/result"
)

// BenchmarkReadStream measures the SSE reader's cost per event on a
// vLLM-shaped completion stream (the sim's chunks).
func BenchmarkReadStream(b *testing.B) {
	ev := `data: {"choices":[{"finish_reason":null,"index":0,"logprobs":null,"text":" lisiko"}],"created":1795992179,"id":"cmpl-6b0caa13-1","model":"llama3-8b-h200","object":"text_completion"}` + "\n\n"
	stream := strings.Repeat(ev, 100) + `data: {"choices":[],"usage":{"completion_tokens":100}}` + "\n\ndata: [DONE]\n\n"
	c := &openAI{}
	b.ReportAllocs()
	b.SetBytes(int64(len(stream)))
	for i := 0; i < b.N; i++ {
		var rec result.Record
		c.readStream(context.Background(), strings.NewReader(stream), &rec, func() int64 { return 1 })
		if rec.OutputTokens != 100 {
			b.Fatal(rec.OutputTokens)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*101), "ns/event")
}
