package filter

import (
	"strings"
	"testing"

	"github.com/llmesh/llmesh/kvblock"
)

// TestHashPromptFollowsTheHistory: a chat turn that resends the previous
// turn's messages shares the previous prompt's leading blocks; another
// system prompt shares none.
func TestHashPromptFollowsTheHistory(t *testing.T) {
	sys := strings.Repeat("You are a careful assistant. ", 40)
	msg := func(content string) string { return `{"role":"user","content":"` + content + `"}` }
	turn1 := `{"model":"m","messages":[` + msg(sys) + `,` + msg("first question") + `]}`
	turn2 := `{"model":"m","max_tokens":9,"messages":[` + msg(sys) + `,` + msg("first question") + `,{"role":"assistant","content":"an answer"},` + msg("second") + `]}`
	other := `{"model":"m","messages":[` + msg(strings.Repeat("Other rules apply here. ", 50)) + `]}`
	hash := func(body string) []kvblock.Hash {
		r, err := ParseOpenAIRequest([]byte(body))
		if err != nil {
			t.Fatal(err)
		}
		c := kvblock.TextChain{BlockBytes: PrefixBlockBytes, MaxBlocks: 64}
		r.HashPrompt(&c)
		return c.Blocks
	}
	h1, h2, h3 := hash(turn1), hash(turn2), hash(other)
	if len(h1) < 4 || len(h2) < len(h1) {
		t.Fatalf("blocks: turn 1 %d, turn 2 %d", len(h1), len(h2))
	}
	for i := range h1 {
		if h1[i] != h2[i] {
			t.Fatalf("turn 2 differs from turn 1 at block %d of %d", i, len(h1))
		}
	}
	if h3[0] == h1[0] {
		t.Error("another system prompt shares the first block")
	}
}
