package scheduler

import (
	"testing"
	"time"
)

// TestRecomputeLeavesTheCachedPrompt: in a pool that routes by prefix, a
// victim's recompute counts only the part of its computed prompt that its
// engine's prefix cache does not keep.
func TestRecomputeLeavesTheCachedPrompt(t *testing.T) {
	now := time.Unix(100, 0)
	p := &pool{}
	p.obs.firstToken(now, 1000, time.Second) // 1 ms a prompt token
	m := &Machine{}
	running := func(cached int, firstToken bool, admitted time.Duration) *entry {
		return &entry{req: reqFields{PromptTokens: 1000}, firstToken: firstToken, tokens: 40, cachedPrompt: cached, admitted: now.Add(-admitted)}
	}
	for _, tc := range []struct {
		name string
		e    *entry
		want time.Duration
	}{
		{"no prefix booked: prompt and output", running(0, true, 2*time.Second), 1040 * time.Millisecond},
		{"prompt cached but 200 tokens: those and the output", running(800, true, 2*time.Second), 240 * time.Millisecond},
		{"half prefilled, 800 cached: nothing lost", running(800, false, 500*time.Millisecond), 0},
		{"900 prefilled, 800 cached: 100", running(800, false, 900*time.Millisecond), 100 * time.Millisecond},
	} {
		if got := m.recompute(now, p, tc.e); got != tc.want {
			t.Errorf("%s: recompute %v, want %v", tc.name, got, tc.want)
		}
	}
}
