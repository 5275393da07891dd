package prefixlru

import (
	"path/filepath"
	"testing"

	"github.com/llmesh/llmesh/bench/trace"
	"github.com/llmesh/llmesh/kvblock"
)

func chain(ids ...uint32) []kvblock.Hash {
	var out []kvblock.Hash
	var p kvblock.Hash
	for _, id := range ids {
		p = kvblock.Extend(p, []uint32{id})
		out = append(out, p)
	}
	return out
}

func TestAdmitCountsLeadingCachedBlocksUpToCacheable(t *testing.T) {
	c := New(0)
	if got := c.Admit(chain(1, 2, 3), 3); got != 0 {
		t.Fatalf("cold admit = %d, want 0", got)
	}
	if got := c.Admit(chain(1, 2, 9), 3); got != 2 {
		t.Errorf("shared two-block prefix = %d, want 2", got)
	}
	if got := c.Admit(chain(1, 2, 3), 1); got != 1 {
		t.Errorf("cacheable 1 = %d, want 1", got)
	}
	if got := c.Admit(chain(5, 2, 3), 3); got != 0 {
		t.Errorf("different first block = %d, want 0 (hashes are chained)", got)
	}
}

func TestLRUEvictsTailBeforePrefixAndLeastRecentFirst(t *testing.T) {
	c := New(3)
	c.Admit(chain(1, 2, 3), 3)
	c.Admit(chain(7), 1) // evicts block 3 (the tail) of the first sequence
	if c.Len() != 3 {
		t.Fatalf("len = %d, want 3", c.Len())
	}
	if got := c.Admit(chain(1, 2, 3), 3); got != 2 {
		t.Errorf("after one eviction = %d, want 2 (prefix kept, tail evicted)", got)
	}
	if got := c.Admit(chain(7), 1); got != 0 {
		t.Errorf("least recently used block survived: hits = %d, want 0", got)
	}
}

func TestReplayUsesCacheableRule(t *testing.T) {
	r := NewReplay(1, 0)
	r.Observe(3, chain(1, 2, 3))
	r.Observe(3, chain(1, 2, 3)) // last prompt token never served: 2 hits
	if got := r.Totals(); got != (Totals{PromptTokens: 6, PooledHitTokens: 2, UnboundedHitTokens: 2}) {
		t.Errorf("totals = %+v", got)
	}
}

// MooncakeBlocks turns a Mooncake row's hash ids into chained block hashes
// of its full 512-token blocks.
func mooncakeBlocks(dst []kvblock.Hash, row trace.MooncakeRow) []kvblock.Hash {
	var p kvblock.Hash
	for i := 0; i < row.PromptTokens/trace.MooncakeBlockTokens; i++ {
		id := row.HashIDs[i]
		p = kvblock.Extend(p, []uint32{uint32(id), uint32(id >> 32)})
		dst = append(dst, p)
	}
	return dst
}

// TestConversationTraceHitRatios checks the model caches against the
// figures for the Mooncake conversation trace: a cache that never evicts
// serves 37.4% of prompt tokens, one LRU of 8 x 1,500 blocks about 23.5%.
func TestConversationTraceHitRatios(t *testing.T) {
	path := filepath.Join("..", "traces", "mooncake-conversation.jsonl") // bench/traces/README.md
	rows, err := trace.ReadMooncakeFile(path)
	if err != nil {
		t.Fatal(err)
	}
	r := NewReplay(trace.MooncakeBlockTokens, 8*1500)
	var blocks []kvblock.Hash
	for _, row := range rows {
		blocks = mooncakeBlocks(blocks[:0], row)
		r.Observe(row.PromptTokens, blocks)
	}
	tot := r.Totals()
	unbounded := float64(tot.UnboundedHitTokens) / float64(tot.PromptTokens)
	pooled := float64(tot.PooledHitTokens) / float64(tot.PromptTokens)
	t.Logf("prompt tokens %d, unbounded %.2f%%, pooled 8x1500 %.2f%%", tot.PromptTokens, 100*unbounded, 100*pooled)
	if unbounded < 0.369 || unbounded > 0.379 {
		t.Errorf("unbounded hit ratio %.4f, want 0.374 +- 0.005", unbounded)
	}
	if pooled < 0.20 || pooled > 0.27 {
		t.Errorf("pooled hit ratio %.4f, want about 0.235", pooled)
	}
}
