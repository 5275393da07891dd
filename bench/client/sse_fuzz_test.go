package client

import (
	"context"
	"encoding/json"
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

// FuzzFastTokenEvent checks the fast path against the full decoder:
// whenever it answers, it must agree.
func FuzzFastTokenEvent(f *testing.F) {
	for _, s := range []string{
		`{"choices":[{"finish_reason":null,"index":0,"logprobs":null,"text":" lisiko"}],"created":1,"id":"c","model":"m","object":"text_completion"}`,
		`{"choices":[{"index":0,"delta":{"role":"assistant"}}]}`,
		`{"choices":[{"index":0,"delta":{"content":""}}]}`,
		`{"choices":[{"index":0,"delta":{"content": null}}]}`,
		`{"choices":[{"text":"a \"text","x":1}]}`,
		`{"choices":[{"text":"a"},{"text":""}]}`,
		`{"choices":[{"text" : "\u0000"}]}`,
		`{"text":"x"`,
		`{"choices":[{"delta":{"content":"x"}}],"usage":null}`,
		`{"choices":[{"text":"x"}],"uſage":{"completion_tokens":1}}`,
		`{"choiceſ":[{"text":"x"}]}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tok, ok := fastTokenEvent([]byte(s))
		if !ok {
			return
		}
		var ch chunk
		if err := json.Unmarshal([]byte(s), &ch); err != nil {
			t.Fatalf("fast path accepted %q, which does not decode: %v", s, err)
		}
		if ch.hasToken() != tok || ch.Usage != nil || ch.Error != nil || ch.Engine != nil {
			t.Fatalf("fast path says token=%v for %q; decoder says %v (usage %v error %v engine %v)", tok, s, ch.hasToken(), ch.Usage, ch.Error, ch.Engine)
		}
	})
}

func TestFastTokenEventTakesCommonChunks(t *testing.T) {
	for _, tc := range []struct {
		in        string
		token, ok bool
	}{
		{`{"choices":[{"finish_reason":null,"index":0,"logprobs":null,"text":" lisiko"}],"created":1,"id":"c","model":"m","object":"text_completion"}`, true, true},
		{`{"id":"x","choices":[{"index":0,"delta":{"content":" hi"},"finish_reason":null}]}`, true, true},
		{`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`, false, true},
		{`{"choices":[],"usage":{"completion_tokens":3}}`, false, false},
		{`{"choices":[{"text":"x"}],"llmesh_engine":{"arrival_ns":1}}`, false, false},
		{`{"error":{"message":"preempted"}}`, false, false},
		{`{"choices":[{"Text":"x"}]}`, false, false},
	} {
		tok, ok := fastTokenEvent([]byte(tc.in))
		if tok != tc.token || ok != tc.ok {
			t.Errorf("fastTokenEvent(%s) = %v, %v; want %v, %v", tc.in, tok, ok, tc.token, tc.ok)
		}
	}
}
