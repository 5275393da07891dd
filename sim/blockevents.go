package sim

import "github.com/llmesh/llmesh/kvblock"

// BlockEvents hears of the prefix cache's changes as they happen, at the
// points where vLLM V1's block pool emits its KV-cache events: a block is
// stored when its tokens are computed and it gets its hash (cache_full_blocks,
// BlockStored), removed when its freed slot is taken for a new block
// (BlockRemoved). Calls come from the goroutine that owns the Engine,
// inside Step or Add, and must not call back into it.
type BlockEvents interface {
	// BlockStored: blocks, the hashes of a run of consecutive blocks of one
	// sequence, became hittable. parent is the hash of the block before the
	// run (0 when the run starts the sequence). tokens are the run's token
	// ids, BlockSize per block, from SeqSpec.Tokens; nil when the
	// sequence's Tokens do not cover the run. The slices are valid only
	// during the call.
	BlockStored(parent kvblock.Hash, blocks []kvblock.Hash, tokens []uint32)
	// BlockRemoved: the block with hash h was evicted.
	BlockRemoved(h kvblock.Hash)
}

// SetBlockEvents makes the engine report its prefix cache's changes to o
// (nil: to nobody, the default). Set it before the first Add; blocks named
// earlier are never reported stored. An engine with prefix caching off
// names no blocks and reports nothing.
func (e *Engine) SetBlockEvents(o BlockEvents) { e.pool.events = o }

// storedRun reports q's blocks [from, to) stored.
func (e *Engine) storedRun(q *seq, from, to int) {
	var parent kvblock.Hash
	if from > 0 {
		parent = q.hashes[from-1]
	}
	var toks []uint32
	if to*BlockSize <= len(q.ids) {
		toks = q.ids[from*BlockSize : to*BlockSize]
	}
	e.pool.events.BlockStored(parent, q.hashes[from:to], toks)
}
