package client

import (
	"context"
	"encoding/json"
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

// BenchmarkFinalEvent compares reading the sim's last two chunks of a
// stream (finish with ground truth, then usage) on the fast path with
// decoding them fully, as every stream did before the fast path read
// usage and ground truth.
func BenchmarkFinalEvent(b *testing.B) {
	events := [][]byte{
		[]byte(`{"id":"cmpl-6b0caa13-1","object":"text_completion","created":1795992179,"model":"llama3-8b-h200","choices":[{"index":0,"text":" lisiko","logprobs":null,"finish_reason":"length"}],"llmesh_engine":{"arrival_ns":1795992179000000000,"first_scheduled_ns":1795992179000100000,"first_token_ns":1795992179020000000,"finish_ns":1795992179090000000,"preemptions":0}}`),
		[]byte(`{"id":"cmpl-6b0caa13-1","object":"text_completion","created":1795992179,"model":"llama3-8b-h200","choices":[],"usage":{"prompt_tokens":16,"completion_tokens":8,"total_tokens":24},"llmesh_engine":{"arrival_ns":1795992179000000000,"first_scheduled_ns":1795992179000100000,"first_token_ns":1795992179020000000,"finish_ns":1795992179090000000,"preemptions":0}}`),
	}
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, ev := range events {
				if _, ok := fastEvent(ev); !ok {
					b.Fatal("not on the fast path")
				}
			}
		}
	})
	b.Run("decoder", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for _, ev := range events {
				var ch chunk
				if err := json.Unmarshal(ev, &ch); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
}
