package relocate

import (
	"math/bits"
	"sync"
)

// First messages carrying multi-megabyte prompts are assembled in large
// buffers; allocating (and zeroing) a fresh one per request costs as much as
// copying the prompt. Buffers of minPooled bytes and more are recycled in
// power-of-two classes once their bytes have been handed on: GRPCReader
// after the caller has read them (Read copies out, WriteTo's writer must not
// retain them), GRPCRewriter after emit returned (emit's slices are valid
// only during the call). A request still holds at most one buffer, under
// twice its message limit.
const minPooled = 64 << 10

var bufPools [33]sync.Pool // index: log2 of the capacity

// pooling is switched off only by the benchmark that counts allocations.
var pooling = true

// getBuf returns a slice of length n whose contents are unspecified.
func getBuf(n int) []byte {
	if n < minPooled || !pooling {
		return make([]byte, n)
	}
	c := bits.Len(uint(n - 1))
	if c >= len(bufPools) {
		return make([]byte, n)
	}
	if p, ok := bufPools[c].Get().(*[]byte); ok {
		return (*p)[:n]
	}
	return make([]byte, n, 1<<c)
}

// putBuf recycles b, which the caller must no longer use.
func putBuf(b []byte) {
	c := cap(b)
	if c < minPooled || c&(c-1) != 0 || !pooling {
		return
	}
	i := bits.Len(uint(c - 1))
	if i >= len(bufPools) {
		return
	}
	b = b[:0]
	bufPools[i].Put(&b)
}
