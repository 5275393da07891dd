package trace

import "github.com/llmesh/llmesh/kvblock"

// Segment is a run of prompt tokens with an identity: two prompts whose
// segments agree (same IDs and lengths, in the same positions) have the
// same tokens there, so a prefix cache hits exactly where they agree. A
// Mooncake trace's hash_ids are segments of MooncakeBlockTokens tokens; a
// multi-turn session's prompt is its system prompt, then each earlier
// turn's user message and reply, then the new message (bench/workload).
type Segment struct {
	ID     uint64
	Tokens int
}

// SegmentsTokens is the number of tokens segs hold.
func SegmentsTokens(segs []Segment) int {
	n := 0
	for _, s := range segs {
		n += s.Tokens
	}
	return n
}

// MooncakeSegments appends to dst the segments of a Mooncake prompt of
// promptTokens tokens made of the blocks hashIDs (MooncakeBlockTokens
// each, the last one cut at promptTokens).
func MooncakeSegments(dst []Segment, hashIDs []uint64, promptTokens int) []Segment {
	for i, id := range hashIDs {
		n := min(MooncakeBlockTokens, promptTokens-i*MooncakeBlockTokens)
		if n <= 0 {
			break
		}
		dst = append(dst, Segment{ID: id, Tokens: n})
	}
	return dst
}

// BlockTokens appends to dst the n token ids of the segment at position
// pos with id id, each in [0, vocab). They are a deterministic function of
// (id, pos, k), so prompts share tokens exactly where their segments
// agree; the position takes part too so that equal ids at different
// positions (which a trace does not promise to be equal content) never
// alias.
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

// PromptTokens appends to dst the token ids of the prompt segs describe.
func PromptTokens(dst []uint32, segs []Segment, vocab uint32) []uint32 {
	for i, s := range segs {
		dst = BlockTokens(dst, s.ID, i, s.Tokens, vocab)
	}
	return dst
}

// PromptBlocks appends to dst the chained hashes (kvblock.Chain) of the full
// blockSize-token blocks of the prompt segs describe. It builds the tokens
// one segment at a time in buf (returned for reuse), so a long prompt's
// tokens are never held whole.
func PromptBlocks(dst []kvblock.Hash, buf []uint32, segs []Segment, blockSize int, vocab uint32) ([]kvblock.Hash, []uint32) {
	if blockSize < 1 {
		blockSize = kvblock.DefaultBlockSize
	}
	var parent kvblock.Hash
	buf = buf[:0]
	for i, s := range segs {
		buf = BlockTokens(buf, s.ID, i, s.Tokens, vocab)
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
