package server

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// referenceChunk is the event shape as maps, marshalled by encoding/json:
// what the encoder must be equivalent to.
func referenceChunk(o *openAIOut, text string, role, last bool, truth *engineTruth) map[string]any {
	var finish any
	if last {
		finish = "length"
	}
	c := map[string]any{"index": 0, "logprobs": nil, "finish_reason": finish}
	if o.req.chat {
		d := map[string]any{"content": text}
		if role {
			d["role"] = "assistant"
		}
		c["delta"] = d
	} else {
		c["text"] = text
	}
	m := map[string]any{"id": o.id, "object": o.object(true), "created": o.created, "model": o.s.cfg.ServedModelName, "choices": []any{c}}
	if truth != nil {
		m["llmesh_engine"] = truth
	}
	return m
}

// decodeEvents splits "data: …\n\n" events and decodes each payload.
func decodeEvents(t *testing.T, b []byte) []any {
	t.Helper()
	var out []any
	for _, ev := range strings.SplitAfter(string(b), "\n\n") {
		if ev == "" {
			continue
		}
		p, ok := strings.CutPrefix(ev, "data: ")
		if !ok || !strings.HasSuffix(p, "\n\n") {
			t.Fatalf("malformed event %q", ev)
		}
		p = strings.TrimSuffix(p, "\n\n")
		if p == "[DONE]" {
			out = append(out, p)
			continue
		}
		var v any
		if err := json.Unmarshal([]byte(p), &v); err != nil {
			t.Fatalf("event %q: %v", p, err)
		}
		out = append(out, v)
	}
	return out
}

func roundTrip(t *testing.T, v any) any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestSSEEncoderMatchesJSON(t *testing.T) {
	srv := &Server{cfg: Config{ServedModelName: `m<"odd">`}}
	truth := &engineTruth{ArrivalNs: 1, FirstScheduledNs: 2, FirstTokenNs: 3, FinishNs: 4, Preemptions: 5}
	for _, chat := range []bool{false, true} {
		o := &openAIOut{s: srv, req: &apiRequest{chat: chat, prompt: []uint32{1, 2}}, id: "cmpl-1", created: 1700000000}
		for _, tc := range []struct {
			text        string
			role, last  bool
			truth       *engineTruth
			withUsage   bool
			description string
		}{
			{"", true, false, nil, false, "chat role event"},
			{" the of", false, false, nil, false, "plain tokens"},
			{"tab\there \"quoted\" <b> & é \u2028 \xff", false, false, nil, false, "escapes"},
			{" last", false, true, truth, false, "last with truth"},
			{" last", false, true, truth, true, "last with truth and usage"},
		} {
			enc := newSSEEncoder(o)
			enc.chunk(tc.text, tc.role, tc.last, tc.truth)
			want := []any{roundTrip(t, referenceChunk(o, tc.text, tc.role, tc.last, tc.truth))}
			if tc.withUsage {
				u := usage{2, 7, 9}
				enc.usage(u, tc.truth)
				want = append(want, roundTrip(t, map[string]any{"id": o.id, "object": o.object(true), "created": o.created,
					"model": srv.cfg.ServedModelName, "choices": []any{}, "usage": u, "llmesh_engine": tc.truth}))
			}
			enc.done()
			want = append(want, "[DONE]")
			if diff := cmp.Diff(want, decodeEvents(t, enc.buf)); diff != "" {
				t.Errorf("chat=%v %s: events differ (-want +got):\n%s", chat, tc.description, diff)
			}
		}
	}
}

// BenchmarkSSEEvent compares the cost of one streamed token event written
// by the encoder with the map marshalled by encoding/json that it
// replaced.
func BenchmarkSSEEvent(b *testing.B) {
	srv := &Server{cfg: Config{ServedModelName: "llama3-8b-h200"}}
	o := &openAIOut{s: srv, req: &apiRequest{}, id: "cmpl-6b0caa13-1", created: 1795992179}
	b.Run("encoder", func(b *testing.B) {
		b.ReportAllocs()
		enc := newSSEEncoder(o)
		for b.Loop() {
			enc.reset()
			enc.chunk(" lisiko", false, false, nil)
		}
	})
	b.Run("json-map", func(b *testing.B) {
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			m, _ := json.Marshal(referenceChunk(o, " lisiko", false, false, nil))
			buf = append(append(append(buf[:0], "data: "...), m...), "\n\n"...)
		}
	})
}
