package sim

import (
	"testing"
	"time"

	"github.com/llmesh/llmesh/kvblock"
)

// mirror rebuilds an engine's set of cached blocks from its block events
// alone, as a subscriber to its KV-cache events does.
type mirror struct {
	t      *testing.T
	held   map[kvblock.Hash]bool
	stored int
}

func (m *mirror) BlockStored(parent kvblock.Hash, blocks []kvblock.Hash, tokens []uint32) {
	if len(tokens) != len(blocks)*BlockSize {
		m.t.Fatalf("%d tokens for %d blocks", len(tokens), len(blocks))
	}
	// The tokens and the parent name the blocks as the engine does.
	if got := kvblock.Chain(nil, parent, tokens, BlockSize); !equalHashes(got, blocks) {
		m.t.Fatalf("blocks %x, chained from parent %x and tokens: %x", blocks, parent, got)
	}
	if parent != 0 && !m.held[parent] {
		m.t.Fatalf("parent %x of a stored run is not cached", parent)
	}
	for _, h := range blocks {
		if m.held[h] {
			m.t.Fatalf("block %x stored twice", h)
		}
		m.held[h] = true
		m.stored++
	}
}

func (m *mirror) BlockRemoved(h kvblock.Hash) {
	if !m.held[h] {
		m.t.Fatalf("block %x removed but not stored", h)
	}
	delete(m.held, h)
}

func equalHashes(a, b []kvblock.Hash) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestBlockEventsMirrorTheCache: under eviction pressure from prompts that
// share prefixes, the events rebuild exactly the pool's cached set.
func TestBlockEventsMirrorTheCache(t *testing.T) {
	e := newTestEngine(t, Config{KVCacheTokens: 64 * BlockSize, MaxNumSeqs: 4})
	m := &mirror{t: t, held: map[kvblock.Hash]bool{}}
	e.SetBlockEvents(m)
	now := time.Unix(0, 0)
	for i := range 40 {
		fam := uint32(i % 5)
		n := 100 + 37*(i%7)
		toks := make([]uint32, n+8)
		for j := range toks {
			toks[j] = fam*7919 + uint32(j)
		}
		blocks := kvblock.Chain(nil, 0, toks, BlockSize)
		if err := e.Add(SeqSpec{ID: uint64(i + 1), PromptTokens: n, MaxTokens: 8, Blocks: blocks, Tokens: toks}); err != nil {
			t.Fatal(err)
		}
		if i%3 == 2 {
			now = drain(t, e, now)
		}
	}
	drain(t, e, now)
	if m.stored <= len(e.pool.cached) {
		t.Errorf("%d blocks stored, %d cached: no eviction happened", m.stored, len(e.pool.cached))
	}
	if len(m.held) != len(e.pool.cached) {
		t.Fatalf("events say %d blocks cached, the pool has %d", len(m.held), len(e.pool.cached))
	}
	for h := range e.pool.cached {
		if !m.held[h] {
			t.Fatalf("cached block %x never reported", h)
		}
	}
}
