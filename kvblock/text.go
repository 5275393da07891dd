package kvblock

// TextChain hashes text in blocks of a fixed number of bytes, for hosts
// that see a prompt's text but not its tokens (a proxy without the model's
// tokenizer): equal leading bytes give equal leading hashes, which is what
// an endpoint picker's approximate prefix index needs. Its hashes are not
// an engine's block hashes (those are over token ids, Extend); they name
// the same prefixes in the host's own units. Write may be called with the
// text in any number of pieces; it keeps no reference to them and
// allocates nothing but the hashes it appends.
type TextChain struct {
	// BlockBytes is the block size in bytes (at least 1).
	BlockBytes int
	// MaxBlocks caps the blocks hashed (0: none are); the rest of the
	// text is skipped, which bounds the work a long prompt costs.
	MaxBlocks int
	// Blocks are the full blocks' hashes so far.
	Blocks []Hash

	h      uint64
	n      int // bytes in the current block
	parent Hash
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// Reset starts a new text, keeping Blocks' storage.
func (c *TextChain) Reset() {
	c.Blocks, c.n, c.parent = c.Blocks[:0], 0, 0
}

// Full reports whether MaxBlocks blocks are hashed: further text is
// ignored.
func (c *TextChain) Full() bool { return len(c.Blocks) >= c.MaxBlocks }

// Write hashes p as the text's next bytes. It never fails.
func (c *TextChain) Write(p []byte) (int, error) {
	if c.BlockBytes < 1 {
		c.BlockBytes = 1
	}
	for _, b := range p {
		if c.Full() {
			break
		}
		if c.n == 0 {
			c.h = fnvOffset
			for i := range 8 {
				c.h ^= uint64(c.parent) >> (8 * i) & 0xff
				c.h *= fnvPrime
			}
		}
		c.h ^= uint64(b)
		c.h *= fnvPrime
		c.n++
		if c.n == c.BlockBytes {
			h := mix(c.h ^ 0x7e47) // apart from Extend's hashes of the same bytes
			if h == 0 {
				h = 1
			}
			c.parent = Hash(h)
			c.Blocks = append(c.Blocks, c.parent)
			c.n = 0
		}
	}
	return len(p), nil
}
