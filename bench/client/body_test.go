package client

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/bench/trace"
	"github.com/llmesh/llmesh/sim"
)

// referenceBody is the request body as a map marshalled by encoding/json:
// what appendBody must be equivalent to.
func referenceBody(req *Request, chat bool) []byte {
	m := map[string]any{"max_tokens": req.MaxTokens, "ignore_eos": true, "stream": req.Stream}
	if req.Model != "" {
		m["model"] = req.Model
	}
	if req.Stream {
		m["stream_options"] = map[string]any{"include_usage": true}
	}
	if req.SendPriority {
		m["priority"] = req.Priority
	}
	p := Prompt(req.seed(), req.PromptTokens)
	if chat {
		m["messages"] = []map[string]string{{"role": "user", "content": p}}
	} else {
		m["prompt"] = p
	}
	b, _ := json.Marshal(m)
	return b
}

func checkBody(t *testing.T, req *Request, chat bool) {
	t.Helper()
	got := appendBody(nil, req, chat)
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("body %s is not JSON: %v", got, err)
	}
	if err := json.Unmarshal(referenceBody(req, chat), &w); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(w, g); diff != "" {
		t.Errorf("body for %+v chat=%v differs (-want +got):\n%s", req, chat, diff)
	}
}

func TestAppendBodyMatchesJSON(t *testing.T) {
	for _, req := range []*Request{
		{ID: "0", Model: "llmesh-sim", PromptTokens: 16, MaxTokens: 8, Stream: true},
		{ID: "17", Model: `m"<é>\`, PromptTokens: 1, MaxTokens: 1, Priority: -3, SendPriority: true},
		{ID: "x-1", Model: "", PromptTokens: 0, MaxTokens: 0, Stream: true, SendPriority: true},
	} {
		for _, chat := range []bool{false, true} {
			checkBody(t, req, chat)
		}
	}
}

// FuzzAppendBody checks the body against encoding/json for arbitrary
// models, ids and sizes, and the string encoder against its bytes.
func FuzzAppendBody(f *testing.F) {
	f.Add("llmesh-sim", "12", 16, 8, 0, true, false, true)
	f.Add("m\"<\x00\xff", "id", 0, 1, -5, false, true, false)
	f.Fuzz(func(t *testing.T, model, id string, prompt, maxTokens, priority int, stream, sendPriority, chat bool) {
		req := &Request{ID: id, Model: model, PromptTokens: prompt % 300, MaxTokens: maxTokens, Priority: priority, SendPriority: sendPriority, Stream: stream}
		checkBody(t, req, chat)
	})
}

// BenchmarkRequestBody compares building a 16-token completion body with
// appendBody and with the map marshalled by encoding/json it replaced.
func BenchmarkRequestBody(b *testing.B) {
	req := &Request{ID: "1234", Model: "llmesh-sim", PromptTokens: 16, MaxTokens: 8, Stream: true}
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = appendBody(make([]byte, 0, 192+4*req.PromptTokens), req, false)
		}
	})
	b.Run("json-map", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			_ = referenceBody(req, false)
		}
	})
}

// TestSegmentsPromptIsTheirTokens: a prompt with segments is sent as the
// words of exactly their token ids, so the simulated engine's tokenizer
// reads back the ids and equal segments give equal text.
func TestSegmentsPromptIsTheirTokens(t *testing.T) {
	segs := []trace.Segment{{ID: 7, Tokens: 40}, {ID: 9, Tokens: 13}}
	req := &Request{Model: "m", PromptTokens: 53, MaxTokens: 4, Segments: segs}
	for _, chat := range []bool{false, true} {
		var body struct {
			Prompt   string `json:"prompt"`
			Messages []struct {
				Content string `json:"content"`
			} `json:"messages"`
		}
		if err := json.Unmarshal(appendBody(nil, req, chat), &body); err != nil {
			t.Fatal(err)
		}
		text := body.Prompt
		if chat {
			text = body.Messages[0].Content
		}
		want := trace.PromptTokens(nil, segs, sim.VocabSize)
		if got := sim.Tokenize(text); !slices.Equal(got, want) {
			t.Fatalf("chat=%v: tokenized prompt differs from the segments' ids (%d vs %d tokens)", chat, len(got), len(want))
		}
	}
}
