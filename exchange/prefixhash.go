package exchange

import (
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/llmesh/llmesh/kvblock"
	"github.com/llmesh/llmesh/scheduler"
)

// Prefix hashing for prefix-aware endpoint picking (scheduler.Request.
// Blocks). A prompt of token ids (gRPC llm.v1 prompt_token_ids, vLLM's
// TokenizedInput) is named as an engine names it: kvblock hashes of its
// prefixBlockTokens-token blocks. A host cannot know a text prompt's
// tokens without the model's tokenizer, so it names the prompt's leading
// blocks by its bytes instead (kvblock.TextChain, prefixBlockBytes a
// block, about prefixBlockTokens tokens): the raw JSON of the prompt, then
// of each message's content in order, a zero byte after each piece so
// that pieces never run together. Requests that resend the same history
// (a chat's earlier turns, a shared system prompt) get the same leading
// hashes either way. The bytes are those the core already read: nothing
// more is buffered, and at most scheduler.MaxBlocks blocks are hashed.

// prefixBlockTokens is the block size of a host's prompt hashes in
// tokens (vLLM's default KV block size), and prefixBlockBytes in bytes
// for text, at bytesPerToken bytes to a token; a pool's
// prefix_routing.capacity_blocks counts blocks of this size.
const (
	prefixBlockTokens = kvblock.DefaultBlockSize
	prefixBlockBytes  = prefixBlockTokens * bytesPerToken
)

// HashPrompt writes the request's prompt into c (Reset first by the
// caller); c.MaxBlocks bounds the work.
func (r *OpenAIRequest) HashPrompt(c *kvblock.TextChain) {
	sep := []byte{0}
	if len(r.Prompt) > 0 {
		c.Write(r.Prompt)
		c.Write(sep)
	}
	for _, m := range r.Messages {
		if c.Full() {
			return
		}
		c.Write(m.Content)
		c.Write(sep)
	}
}

// hashOpenAIPrompt is the prompt's Blocks, nil when it has no full block.
func hashOpenAIPrompt(r *OpenAIRequest) []kvblock.Hash {
	c := kvblock.TextChain{BlockBytes: prefixBlockBytes, MaxBlocks: scheduler.MaxBlocks}
	r.HashPrompt(&c)
	return c.Blocks
}

// hashGRPCPrompt is the Blocks of a gRPC prompt: its text, else its token
// ids (packed runs of varints).
func hashGRPCPrompt(text []byte, runs [][]byte) []kvblock.Hash {
	if len(text) > 0 {
		c := kvblock.TextChain{BlockBytes: prefixBlockBytes, MaxBlocks: scheduler.MaxBlocks}
		c.Write(text)
		return c.Blocks
	}
	var ids []uint32
	for _, run := range runs {
		for len(run) > 0 && len(ids) < scheduler.MaxBlocks*prefixBlockTokens {
			v, k := protowire.ConsumeVarint(run)
			if k < 0 {
				return nil
			}
			ids = append(ids, uint32(v))
			run = run[k:]
		}
	}
	return kvblock.Chain(nil, 0, ids, prefixBlockTokens)
}
