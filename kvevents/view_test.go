package kvevents

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/llmesh/llmesh/kvblock"
	"github.com/llmesh/llmesh/prefixindex"
)

func seqTokens(n int) []uint32 {
	t := make([]uint32, n)
	for i := range t {
		t[i] = uint32(i*31 + 7)
	}
	return t
}

// The view names stored blocks exactly as kvblock.Chain names a prompt's,
// across events that continue one another through parent_block_hash, so
// that the index matches prompts hashed by the proxy.
func TestViewNamesBlocksLikeTheProxy(t *testing.T) {
	x, _ := prefixindex.NewExact(2, 0)
	v := NewView(4, x.Endpoint(1))
	toks := seqTokens(16)
	want := kvblock.Chain(nil, 0, toks, 4)
	v.Apply(&Batch{Events: []Event{
		{Kind: BlockStored, Hashes: []uint64{0xa, 0xb}, Tokens: toks[:8], BlockSize: 4, Medium: "GPU", Group: -1},
		{Kind: BlockStored, Hashes: []uint64{0xc, 0xd}, Parent: 0xb, HasParent: true, Tokens: toks[8:], BlockSize: 4, Group: 0},
	}})
	if got := x.Match(nil, want); !cmp.Equal(got, []int{0, 4}) {
		t.Fatalf("match %v, want [0 4]", got)
	}
	// Evicting the third block cuts the match there.
	v.Apply(&Batch{Events: []Event{{Kind: BlockRemoved, Hashes: []uint64{0xc, 0x99}, Group: -1}}})
	if got := x.Match(nil, want); !cmp.Equal(got, []int{0, 2}) {
		t.Fatalf("after eviction: match %v, want [0 2]", got)
	}
	st := v.Stats()
	if st.Stored != 4 || st.Removed != 1 || st.Skipped != 0 {
		t.Errorf("stats %+v", st)
	}
	v.Apply(&Batch{Events: []Event{{Kind: AllBlocksCleared, Group: -1}}})
	if x.Len(1) != 0 || v.Len() != 0 {
		t.Errorf("after AllBlocksCleared: index %d, view %d blocks", x.Len(1), v.Len())
	}
}

func TestViewSkipsWhatItCannotName(t *testing.T) {
	x, _ := prefixindex.NewExact(1, 0)
	v := NewView(4, x.Endpoint(0))
	toks := seqTokens(4)
	v.Apply(&Batch{Events: []Event{
		{Kind: BlockStored, Hashes: []uint64{1}, Parent: 77, HasParent: true, Tokens: toks, BlockSize: 4, Group: -1}, // parent never seen
		{Kind: BlockStored, Hashes: []uint64{2}, Tokens: toks, BlockSize: 4, Medium: "CPU", Group: -1},
		{Kind: BlockStored, Hashes: []uint64{3}, Tokens: toks, BlockSize: 4, Adapted: true, Group: -1},
		{Kind: BlockStored, Hashes: []uint64{4, 5}, Tokens: append(toks, toks...), BlockSize: 2, Group: -1},
		{Kind: BlockStored, Hashes: []uint64{6}, Tokens: toks, BlockSize: 4, Group: 1},
	}})
	if x.Len(0) != 0 || v.Stats().Skipped != 6 {
		t.Errorf("index holds %d blocks, skipped %d; want 0 and 6", x.Len(0), v.Stats().Skipped)
	}
}

// vLLM may cache two blocks under one hash; the block stays until both
// are removed.
func TestViewCountsDuplicateBlocks(t *testing.T) {
	x, _ := prefixindex.NewExact(1, 0)
	v := NewView(4, x.Endpoint(0))
	st := Event{Kind: BlockStored, Hashes: []uint64{1}, Tokens: seqTokens(4), BlockSize: 4, Group: -1}
	rm := Event{Kind: BlockRemoved, Hashes: []uint64{1}, Group: -1}
	v.Apply(&Batch{Events: []Event{st, st, rm}})
	if x.Len(0) != 1 {
		t.Fatalf("after two stores and one removal the index holds %d blocks, want 1", x.Len(0))
	}
	v.Apply(&Batch{Events: []Event{rm}})
	if x.Len(0) != 0 {
		t.Fatalf("after both removals the index holds %d blocks", x.Len(0))
	}
}
