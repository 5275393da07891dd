package trace

import "github.com/llmesh/llmesh/kvblock"

// BlockTokens appends to dst the n token ids of the trace block at position
// pos with hash id id, each in [0, vocab). They are a deterministic
// function of (id, pos, k), so prompts share blocks exactly where their
// hash_ids agree; the position takes part too so that equal ids at
// different positions (which the trace does not promise to be equal
// content) never alias.
func BlockTokens(dst []uint32, id uint64, pos, n int, vocab uint32) []uint32 {
	seed := id*0x9e3779b97f4a7c15 ^ uint64(pos)<<40
	for k := 0; k < n; k++ {
		x := seed + uint64(k)*0xbf58476d1ce4e5b9
		x ^= x >> 30
		x *= 0xbf58476d1ce4e5b9
		x ^= x >> 27
		x *= 0x94d049bb133111eb
		x ^= x >> 31
		dst = append(dst, uint32(x%uint64(vocab)))
	}
	return dst
}

// PromptTokens appends to dst the token ids of a prompt of promptTokens
// tokens made of the trace blocks hashIDs (MooncakeBlockTokens each, the
// last one cut at promptTokens).
func PromptTokens(dst []uint32, hashIDs []uint64, promptTokens int, vocab uint32) []uint32 {
	for i, id := range hashIDs {
		n := min(MooncakeBlockTokens, promptTokens-i*MooncakeBlockTokens)
		if n <= 0 {
			break
		}
		dst = BlockTokens(dst, id, i, n, vocab)
	}
	return dst
}

// PromptBlocks appends to dst the chained hashes (kvblock.Chain) of the full
// blockSize-token blocks of the prompt PromptTokens describes. It builds the
// tokens one trace block at a time in buf (returned for reuse), so a long
// prompt's tokens are never held whole.
func PromptBlocks(dst []kvblock.Hash, buf []uint32, hashIDs []uint64, promptTokens, blockSize int, vocab uint32) ([]kvblock.Hash, []uint32) {
	if blockSize < 1 {
		blockSize = kvblock.DefaultBlockSize
	}
	var parent kvblock.Hash
	buf = buf[:0]
	for i, id := range hashIDs {
		n := min(MooncakeBlockTokens, promptTokens-i*MooncakeBlockTokens)
		if n <= 0 {
			break
		}
		buf = BlockTokens(buf, id, i, n, vocab)
		full := len(buf) / blockSize * blockSize
		start := len(dst)
		dst = kvblock.Chain(dst, parent, buf[:full], blockSize)
		if len(dst) > start {
			parent = dst[len(dst)-1]
		}
		buf = append(buf[:0], buf[full:]...)
	}
	return dst, buf
}
