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

// FuzzFastEvent checks the fast path against the full decoder: whenever it
// answers, it must agree on the token, the usage and the ground truth.
func FuzzFastEvent(f *testing.F) {
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
		`{"id":"c","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":" a b","logprobs":null,"finish_reason":"length"}],"llmesh_engine":{"arrival_ns":1,"first_scheduled_ns":2,"first_token_ns":3,"finish_ns":4,"preemptions":5}}`,
		`{"id":"c","choices":[],"usage":{"prompt_tokens":16,"completion_tokens":8,"total_tokens":24},"llmesh_engine":{"arrival_ns":-1,"first_token_ns":9223372036854775807}}`,
		`{"choices":[],"usage":{"completion_tokens":8,"Completion_tokens":9}}`,
		`{"choices":[],"usage":{"completion_tokens":8,"completion_tokens":9}}`,
		`{"choices":[],"usage":{"completion_tokens":1e2}}`,
		`{"choices":[],"usage":{"completion_tokens":9223372036854775808}}`,
		`{"choices":[],"usage":{"completion_tokens":null}}`,
		`{"choices":[],"usage":{"prompt_tokens_details":{"completion_tokens":"x"}}}`,
		`{"choices":[{"usage":{"completion_tokens":3}}]}`,
		`{"llmesh_engine":{"preemptions":1.0}}`,
		`{"llmesh_engine":{"finiſh_ns":1}}`,
		`{"usage":{}}`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := fastEvent([]byte(s))
		if !ok {
			return
		}
		var ch chunk
		if err := json.Unmarshal([]byte(s), &ch); err != nil {
			t.Fatalf("fast path accepted %q, which does not decode: %v", s, err)
		}
		want := fastFields{token: ch.hasToken(), usage: -1}
		if ch.Usage != nil {
			want.usage = ch.Usage.CompletionTokens
		}
		if ch.Engine != nil {
			want.engine, want.hasEngine = *ch.Engine, true
		}
		if ch.Error != nil || got != want {
			t.Fatalf("fast path read %+v from %q; decoder: %+v (error %v)", got, s, want, ch.Error)
		}
	})
}

func TestFastEventTakesCommonChunks(t *testing.T) {
	engine := result.EngineTimes{ArrivalNS: 1, FirstScheduledNS: 2, FirstTokenNS: 3, FinishNS: 4, Preemptions: 5}
	for _, tc := range []struct {
		in   string
		want fastFields
		ok   bool
	}{
		{`{"choices":[{"finish_reason":null,"index":0,"logprobs":null,"text":" lisiko"}],"created":1,"id":"c","model":"m","object":"text_completion"}`, fastFields{token: true, usage: -1}, true},
		{`{"id":"x","choices":[{"index":0,"delta":{"content":" hi"},"finish_reason":null}]}`, fastFields{token: true, usage: -1}, true},
		{`{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`, fastFields{usage: -1}, true},
		{`{"choices":[],"usage":{"prompt_tokens":2,"completion_tokens":3,"total_tokens":5}}`, fastFields{usage: 3}, true},
		{`{"choices":[{"text":"x","finish_reason":"length"}],"llmesh_engine":{"arrival_ns":1,"first_scheduled_ns":2,"first_token_ns":3,"finish_ns":4,"preemptions":5}}`, fastFields{token: true, usage: -1, engine: engine, hasEngine: true}, true},
		{`{"error":{"message":"preempted"}}`, fastFields{usage: -1}, false},
		{`{"choices":[{"Text":"x"}]}`, fastFields{usage: -1}, false},
		{`{"choices":[],"usage":null}`, fastFields{usage: -1}, false},
		{`{"choices":[],"usage":{"completion_tokens":3.5}}`, fastFields{usage: 0}, false},
	} {
		got, ok := fastEvent([]byte(tc.in))
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("fastEvent(%s) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
