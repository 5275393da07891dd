// Package kvblock names the KV-cache blocks of a token sequence the way a
// prefix-caching engine does (vLLM V1's automatic prefix caching): the
// sequence is cut into blocks of a fixed number of tokens, and each full
// block is identified by a hash of its parent block's hash and its own token
// ids. Two sequences share a cached block exactly when they share every
// token up to that block's end, so a chain of hashes is a prefix's identity.
//
// The engine model (sim), the workloads that reuse prefixes (bench) and the
// endpoint picker's prefix index all name blocks with this package, so a
// block hashed by one is found by the others.
package kvblock

import "encoding/binary"

// Hash identifies one full block: its tokens and all tokens before it.
// Zero is the parent of a sequence's first block and never a block's hash.
type Hash uint64

// DefaultBlockSize is vLLM's default KV block size in tokens.
const DefaultBlockSize = 16

// Extend returns the hash of the block holding tokens whose parent block
// has hash parent (0 for the first block). The hash is FNV-1a over the
// parent's 8 bytes and each token id's 4 bytes (little endian), mixed by a
// final avalanche so that nearby inputs do not give nearby hashes.
func Extend(parent Hash, tokens []uint32) Hash {
	const (
		offset = 14695981039346656037
		prime  = 1099511628211
	)
	h := uint64(offset)
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(parent))
	for _, c := range b {
		h ^= uint64(c)
		h *= prime
	}
	for _, t := range tokens {
		h ^= uint64(t & 0xff)
		h *= prime
		h ^= uint64(t >> 8 & 0xff)
		h *= prime
		h ^= uint64(t >> 16 & 0xff)
		h *= prime
		h ^= uint64(t >> 24)
		h *= prime
	}
	h = mix(h)
	if h == 0 {
		h = 1
	}
	return Hash(h)
}

// mix is splitmix64's finaliser.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// Chain appends to dst the hashes of the full blocks of tokens (a trailing
// partial block has none), the first one's parent being parent, and returns
// the extended slice. blockSize < 1 means DefaultBlockSize.
func Chain(dst []Hash, parent Hash, tokens []uint32, blockSize int) []Hash {
	if blockSize < 1 {
		blockSize = DefaultBlockSize
	}
	for len(tokens) >= blockSize {
		parent = Extend(parent, tokens[:blockSize])
		dst = append(dst, parent)
		tokens = tokens[blockSize:]
	}
	return dst
}

// Cacheable is how many of a prompt's blocks an engine may serve from its
// cache: whole blocks only, and never the block holding the last prompt
// token, since at least one token must be computed to produce the first
// output token.
func Cacheable(promptTokens, blockSize int) int {
	if blockSize < 1 {
		blockSize = DefaultBlockSize
	}
	if promptTokens <= 1 {
		return 0
	}
	return (promptTokens - 1) / blockSize
}
