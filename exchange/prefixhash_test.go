package exchange

import (
	"slices"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/api/llmv1"
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
		c := kvblock.TextChain{BlockBytes: prefixBlockBytes, MaxBlocks: 64}
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

// TestExchangeNamesPromptBlocks: with HashPrefix, Size names the prompt's
// leading blocks for the scheduler (a chat's next turn shares the previous
// turn's; a gRPC prompt of token ids gets the engine's block hashes), and
// without it the request carries none.
func TestExchangeNamesPromptBlocks(t *testing.T) {
	cfg := &ExchangeConfig{Classifier: exClassifier(t), SizeBody: true}
	sys := strings.Repeat("You are a careful assistant. ", 40)
	turn1 := `{"model":"m","messages":[{"role":"system","content":"` + sys + `"},{"role":"user","content":"first"}]}`
	turn2 := `{"model":"m","messages":[{"role":"system","content":"` + sys + `"},{"role":"user","content":"first"},{"role":"assistant","content":"ok"},{"role":"user","content":"second"}]}`
	blocks := func(hash bool, path, ct string, body []byte) []kvblock.Hash {
		var x Exchange
		x.Start(cfg, RequestHead{Path: path, ContentType: ct, Headers: MapHeaders{}, Pool: "p", HashPrefix: hash, HasBody: true})
		if err := x.Size(body, MapHeaders{}); err != nil {
			t.Fatal(err)
		}
		return x.View().Request.Blocks
	}
	b1 := blocks(true, "/v1/chat/completions", "application/json", []byte(turn1))
	b2 := blocks(true, "/v1/chat/completions", "application/json", []byte(turn2))
	if len(b1) < len(sys)/prefixBlockBytes || len(b2) < len(b1) {
		t.Fatalf("blocks: turn 1 %d, turn 2 %d", len(b1), len(b2))
	}
	for i := range b1 {
		if b1[i] != b2[i] {
			t.Fatalf("turn 2 differs from turn 1 at block %d", i)
		}
	}
	if b := blocks(false, "/v1/chat/completions", "application/json", []byte(turn1)); b != nil {
		t.Errorf("without HashPrefix: %d blocks", len(b))
	}
	ids := make([]uint32, 100)
	for i := range ids {
		ids[i] = uint32(i * 7)
	}
	frame := metaFrame(t, &llmv1.GenerateRequest{Model: "m", PromptTokenIds: ids, MaxTokens: 4})
	got := blocks(true, MethodLLMV1, "application/grpc", frame)
	if want := kvblock.Chain(nil, 0, ids, prefixBlockTokens); !slices.Equal(got, want) || len(want) != 6 {
		t.Errorf("llm.v1 token ids: %d blocks, want the engine's %d", len(got), len(want))
	}
}
