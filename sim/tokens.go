package sim

import (
	"hash/fnv"
	"strings"
)

// Synthetic tokens. The simulated engine has no real model; it makes up
// output deterministically so that tests and proxies can check what they
// relay:
//
//   - The vocabulary has VocabSize words. Word i is three two-letter
//     syllables from a fixed table of 32 (so every word is six lowercase
//     letters, and word and id map to each other one to one).
//   - Text is tokenized by whitespace (strings.Fields): a word that is a
//     vocabulary word becomes its id; any other word becomes
//     FNV-1a-64(word) mod VocabSize. So a prompt's token count is its
//     number of whitespace-separated words, and text made of vocabulary
//     words round-trips exactly.
//   - Chat messages contribute the words of their content in order (roles
//     and the template add nothing), so appending an assistant message with
//     generated text continues the same token sequence.
//   - The next output token is FNV-1a-64(seed, the last ContextWindow
//     tokens of prompt+output so far) mod VocabSize; its text is a space
//     and its word.
//
// Hence a continuation request (the prompt plus the text or ids generated
// so far, with the remaining max_tokens) produces exactly the tokens the
// original request would have produced next.

// VocabSize is the number of synthetic vocabulary words.
const VocabSize = 32768

// ContextWindow is how many previous tokens determine the next one.
const ContextWindow = 4

var syllables = [32]string{
	"ba", "be", "bi", "bo", "da", "de", "di", "do",
	"ka", "ke", "ki", "ko", "la", "le", "li", "lo",
	"ma", "me", "mi", "mo", "na", "ne", "ni", "no",
	"ra", "re", "ri", "ro", "sa", "se", "si", "so",
}

var syllableIndex = func() map[string]uint32 {
	m := make(map[string]uint32, len(syllables))
	for i, s := range syllables {
		m[s] = uint32(i)
	}
	return m
}()

var vocab = func() []string {
	v := make([]string, VocabSize)
	for i := range v {
		v[i] = syllables[i>>10&31] + syllables[i>>5&31] + syllables[i&31]
	}
	return v
}()

// Word is the text of token id (ids wrap modulo VocabSize).
func Word(id uint32) string { return vocab[id%VocabSize] }

// TokenID maps one word to its token id.
func TokenID(word string) uint32 {
	if len(word) == 6 {
		a, ok1 := syllableIndex[word[0:2]]
		b, ok2 := syllableIndex[word[2:4]]
		c, ok3 := syllableIndex[word[4:6]]
		if ok1 && ok2 && ok3 {
			return a<<10 | b<<5 | c
		}
	}
	h := fnv.New64a()
	h.Write([]byte(word))
	return uint32(h.Sum64() % VocabSize)
}

// Tokenize maps text to token ids by the rule above.
func Tokenize(text string) []uint32 {
	return AppendTokens(nil, text)
}

// AppendTokens appends text's token ids to ids.
func AppendTokens(ids []uint32, text string) []uint32 {
	for _, w := range strings.Fields(text) {
		ids = append(ids, TokenID(w))
	}
	return ids
}

// CountTokens is len(Tokenize(text)) without allocating.
func CountTokens(text string) int {
	n := 0
	for range strings.FieldsSeq(text) {
		n++
	}
	return n
}

// Detokenize is the text of ids: each token as a space and its word.
func Detokenize(ids []uint32) string {
	var b strings.Builder
	b.Grow(7 * len(ids))
	for _, id := range ids {
		b.WriteByte(' ')
		b.WriteString(Word(id))
	}
	return b.String()
}

// Generator produces the synthetic output that follows a context.
type Generator struct {
	seed uint64
	last [ContextWindow]uint32
	n    int // tokens seen, capped at ContextWindow
}

// NewGenerator starts a generator after the context ids with seed.
func NewGenerator(seed uint64, context []uint32) *Generator {
	g := &Generator{seed: seed}
	if len(context) > ContextWindow {
		context = context[len(context)-ContextWindow:]
	}
	for _, id := range context {
		g.push(id)
	}
	return g
}

func (g *Generator) push(id uint32) {
	copy(g.last[:], g.last[1:])
	g.last[ContextWindow-1] = id
	if g.n < ContextWindow {
		g.n++
	}
}

// Next returns the next token id and appends it to the context.
func (g *Generator) Next() uint32 {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	mix := func(v uint64) {
		for i := 0; i < 8; i++ {
			h ^= v & 0xff
			h *= prime
			v >>= 8
		}
	}
	mix(g.seed)
	mix(uint64(g.n))
	for _, id := range g.last[ContextWindow-g.n:] {
		mix(uint64(id))
	}
	id := uint32(h % VocabSize)
	g.push(id)
	return id
}
