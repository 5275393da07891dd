package filter

import "github.com/llmesh/llmesh/kvblock"

// Prefix hashing for prefix-aware endpoint picking: a host cannot know a
// prompt's tokens without the model's tokenizer, so it names the prompt's
// leading blocks by its bytes (kvblock.TextChain): the raw JSON of the
// prompt, then of each message's content in order, a zero byte after each
// piece so that pieces never run together. Two requests that resend the
// same history (a chat's earlier turns, a shared system prompt) get the
// same leading hashes. The bytes are those ParseOpenAIRequest already
// holds: nothing more is buffered.

// PrefixBlockBytes is the block size of a host's prompt hashes: about
// PrefixBlockTokens tokens at BytesPerToken bytes to a token.
const (
	PrefixBlockTokens = 64
	PrefixBlockBytes  = PrefixBlockTokens * BytesPerToken
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
