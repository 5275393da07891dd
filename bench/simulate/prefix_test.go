package simulate

import (
	"strings"
	"testing"

	"github.com/llmesh/llmesh/bench/trace"
	"github.com/llmesh/llmesh/bench/workload"
)

// TestPrefixBoundsFollowHashIDs: two prompts sharing their first 512-token
// trace block share exactly its 32 engine blocks of 16 tokens.
func TestPrefixBoundsFollowHashIDs(t *testing.T) {
	items := []workload.Item{
		{PromptTokens: 1000, Segments: trace.MooncakeSegments(nil, []uint64{1, 2}, 1000)},
		{PromptTokens: 1000, Segments: trace.MooncakeSegments(nil, []uint64{1, 3}, 1000)},
		{PromptTokens: 100}, // no identity: counts, never hits
	}
	got := prefixBounds(items, 0)
	if got.PromptTokens != 2100 || got.UnboundedHitTokens != 512 || got.PooledHitTokens != 512 {
		t.Errorf("bounds = %+v, want 2100 prompt tokens, 512 hits each", got)
	}
	// The first prompt's 62 blocks enter tail first, so a pool of 40 keeps
	// its first 40 and the shared 32 survive; a pool of 10 keeps 10.
	if small := prefixBounds(items, 40); small.PooledHitTokens != 512 {
		t.Errorf("pooled in 40 blocks = %d, want 512", small.PooledHitTokens)
	}
	if tiny := prefixBounds(items, 10); tiny.PooledHitTokens != 160 {
		t.Errorf("pooled in 10 blocks = %d, want 160 (10 blocks of 16)", tiny.PooledHitTokens)
	}
	if b := promptBlocks(items[0]); len(b) != 1000/16 {
		t.Errorf("promptBlocks = %d blocks, want %d", len(b), 1000/16)
	}
	if line := prefixLine(got); !strings.Contains(line, "unbounded 24.4%") {
		t.Errorf("prefixLine = %q", line)
	}
	if line := prefixLine(prefixBounds(items[2:], 0)); line != "" {
		t.Errorf("prefixLine without identity = %q, want empty", line)
	}
}
