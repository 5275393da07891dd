package exchange

import (
	"encoding/json"
	"strings"
	"testing"
)

// benchRequestBodies are the request shapes the hosts decode most: a small
// streamed chat request, a completions request, and a chat request with an
// 8 KiB prompt.
func benchRequestBodies() []struct {
	name string
	body []byte
} {
	long := strings.Repeat("The quick brown fox jumps over the lazy dog. ", 8192/45+1)[:8192]
	return []struct {
		name string
		body []byte
	}{
		{"chat-small", []byte(`{"model":"llama-3.1-8b","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"Write a haiku about the sea."}],"stream":true,"stream_options":{"include_usage":true},"max_tokens":64,"temperature":0.7}`)},
		{"completions", []byte(`{"model":"llama-3.1-8b","prompt":"Once upon a time, in a land far away, there lived","max_tokens":128,"stream":true,"temperature":0,"top_p":1,"n":1,"logprobs":null,"echo":false}`)},
		{"chat-8KiB", []byte(`{"model":"llama-3.1-8b","messages":[{"role":"system","content":"You are a helpful assistant."},{"role":"user","content":"` + long + `"}],"stream":true,"max_tokens":256}`)},
	}
}

// BenchmarkParseOpenAIRequest compares ParseOpenAIRequest (new) with
// json.Unmarshal into OpenAIRequest (old) per body shape.
func BenchmarkParseOpenAIRequest(b *testing.B) {
	for _, bb := range benchRequestBodies() {
		b.Run(bb.name+"/old", func(b *testing.B) {
			b.SetBytes(int64(len(bb.body)))
			b.ReportAllocs()
			for b.Loop() {
				var r OpenAIRequest
				if err := json.Unmarshal(bb.body, &r); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(bb.name+"/new", func(b *testing.B) {
			var r OpenAIRequest
			if !parseOpenAIFast(bb.body, &r) {
				b.Fatal("the fast path does not take this body")
			}
			b.SetBytes(int64(len(bb.body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := ParseOpenAIRequest(bb.body); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
