package workload

import (
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/bench/trace"
)

// TestSessionsResendTheirHistory: every turn's prompt is the previous
// turn's prompt, its reply and a new message, sent think_time_ms after it.
func TestSessionsResendTheirHistory(t *testing.T) {
	w, err := load(t, `
duration: 60s
arrival: {process: constant, rate: 0.5}
classes:
  - name: chat
    system_prompt_tokens: 300
    prompt_tokens: {kind: uniform, min: 20, max: 80}
    output_tokens: {kind: uniform, min: 10, max: 40}
    session: {turns: {value: 4}, think_time_ms: {value: 5000}}`)
	if err != nil {
		t.Fatal(err)
	}
	its := items(w)
	bySession := map[uint64][]Item{}
	for i, it := range its {
		if i > 0 && it.At < its[i-1].At {
			t.Fatalf("item %d at %v before item %d at %v", i, it.At, i-1, its[i-1].At)
		}
		if it.Index != i {
			t.Fatalf("item %d has index %d", i, it.Index)
		}
		if got := trace.SegmentsTokens(it.Segments); got != it.PromptTokens {
			t.Fatalf("item %d: segments hold %d tokens, prompt %d", i, got, it.PromptTokens)
		}
		bySession[it.Session] = append(bySession[it.Session], it)
	}
	if len(bySession) < 25 {
		t.Fatalf("%d sessions in 60 s at 0.5/s", len(bySession))
	}
	full := 0
	for id, turns := range bySession {
		if id == 0 {
			t.Fatal("a session item without a session number")
		}
		if turns[0].Segments[0].Tokens != 300 || turns[0].Segments[0] != its[0].Segments[0] {
			t.Fatalf("session %d does not start with the class's system prompt: %+v", id, turns[0].Segments[0])
		}
		for k := 1; k < len(turns); k++ {
			prev, cur := turns[k-1], turns[k]
			if cur.Turn != prev.Turn+1 || cur.At-prev.At != 5*time.Second {
				t.Fatalf("session %d: turn %d at %v after turn %d at %v", id, cur.Turn, cur.At, prev.Turn, prev.At)
			}
			if len(cur.Segments) != len(prev.Segments)+2 {
				t.Fatalf("session %d turn %d: %d segments after %d", id, cur.Turn, len(cur.Segments), len(prev.Segments))
			}
			for j, s := range prev.Segments {
				if cur.Segments[j] != s {
					t.Fatalf("session %d turn %d: segment %d changed", id, cur.Turn, j)
				}
			}
			if reply := cur.Segments[len(prev.Segments)]; reply.Tokens != prev.MaxTokens {
				t.Fatalf("session %d turn %d: reply segment of %d tokens, previous output %d", id, cur.Turn, reply.Tokens, prev.MaxTokens)
			}
		}
		if len(turns) == 4 {
			full++
		}
	}
	if full == 0 {
		t.Error("no session reached its 4 turns")
	}
	// Messages of different sessions never share an identity.
	seen := map[uint64]uint64{}
	for _, it := range its {
		for _, s := range it.Segments[1:] {
			if o, ok := seen[s.ID]; ok && o != it.Session {
				t.Fatalf("segment id %d in sessions %d and %d", s.ID, o, it.Session)
			}
			seen[s.ID] = it.Session
		}
	}
}

// TestSessionContextCapEndsTheSession: a turn whose prompt and reply would
// pass max_context_tokens is not sent, nor any after it.
func TestSessionContextCapEndsTheSession(t *testing.T) {
	w, err := load(t, `
requests: 40
arrival: {process: constant, rate: 1}
classes:
  - name: chat
    prompt_tokens: {value: 100}
    output_tokens: {value: 100}
    session: {turns: {value: 10}, think_time_ms: {value: 100}, max_context_tokens: 450}`)
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range items(w) {
		if it.PromptTokens+it.MaxTokens > 450 {
			t.Fatalf("turn %d of session %d: %d+%d tokens past the cap", it.Turn, it.Session, it.PromptTokens, it.MaxTokens)
		}
		if it.Turn > 2 { // 100+100, 300+100, then 500+100 is past 450
			t.Fatalf("turn %d sent", it.Turn)
		}
	}
}

// TestSystemPromptIsSharedWithinAClassOnly.
func TestSystemPromptIsSharedWithinAClassOnly(t *testing.T) {
	w, err := load(t, `
requests: 50
arrival: {rate: 10}
classes:
  - {name: a, share: 1, system_prompt_tokens: 64, prompt_tokens: {value: 10}, output_tokens: {value: 1}}
  - {name: b, share: 1, system_prompt_tokens: 64, prompt_tokens: {value: 10}, output_tokens: {value: 1}}
  - {name: c, share: 1, prompt_tokens: {value: 10}, output_tokens: {value: 1}}`)
	if err != nil {
		t.Fatal(err)
	}
	sys := map[int]trace.Segment{}
	for _, it := range items(w) {
		if it.Class == 2 {
			if it.Segments != nil || it.PromptTokens != 10 {
				t.Fatalf("class c item: %+v", it)
			}
			continue
		}
		if it.PromptTokens != 74 || len(it.Segments) != 2 {
			t.Fatalf("class %d item: %+v", it.Class, it)
		}
		if s, ok := sys[it.Class]; ok && s != it.Segments[0] {
			t.Fatalf("class %d: two system prompts", it.Class)
		}
		sys[it.Class] = it.Segments[0]
	}
	if sys[0] == sys[1] {
		t.Error("classes a and b share a system prompt")
	}
}

func TestSessionValidation(t *testing.T) {
	for _, tc := range []struct{ yaml, want string }{
		{`classes: [{name: a, prompt_tokens: {value: 1}, output_tokens: {value: 1}, session: {turns: {kind: fixed, value: 0}}}]`, "classes[0].session.turns.value: 0 must be in [1,"},
		{`classes: [{name: a, prompt_tokens: {value: 1}, output_tokens: {value: 1}, session: {turns: {kind: empirical, trace: x.csv}}}]`, "classes[0].session.turns.kind"},
		{`classes: [{name: a, prompt_tokens: {value: 1}, output_tokens: {value: 1}, session: {turns: {value: 2}, max_context_tokens: -1}}]`, "classes[0].session.max_context_tokens"},
		{`classes: [{name: a, prompt_tokens: {value: 1}, output_tokens: {value: 1}, system_prompt_tokens: -5}]`, "classes[0].system_prompt_tokens: -5"},
		{`classes: [{name: a, prompt_tokens: {value: 1}, output_tokens: {value: 1}, session: {turns: {value: 2}, think_time_ms: {kind: lognormal, median: 0}}}]`, "classes[0].session.think_time_ms.median"},
	} {
		_, err := load(t, "requests: 5\narrival: {rate: 1}\n"+tc.yaml)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s\n  err = %v, want %q", tc.yaml, err, tc.want)
		}
	}
	_, err := load(t, `
requests: 5
arrival: {process: closed, concurrency: 2}
classes: [{name: a, prompt_tokens: {value: 1}, output_tokens: {value: 1}, session: {turns: {value: 2}}}]`)
	if err == nil || !strings.Contains(err.Error(), "classes[0].session") {
		t.Errorf("closed loop with sessions: err = %v", err)
	}
}
