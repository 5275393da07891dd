package sim

import (
	"fmt"

	"github.com/llmesh/llmesh/kvblock"
)

// blockPool is the engine's KV blocks in the manner of vLLM V1's block
// pool: every block has a reference count (the sequences whose block table
// holds it); blocks nobody holds wait in a free queue in LRU order, where a
// block that held a full block of tokens keeps its hash and stays hittable
// until a new block is needed and it reaches the queue's head. Blocks are
// int32 indexes; the free queue is an intrusive doubly-linked list through
// prev and next, with a sentinel at index n, so every operation is O(1).
//
// Until a block is first named (register), every free block is anonymous:
// blocks differ only by index, which nothing outside the pool reads but
// the block tables, so the free queue's order cannot be observed. The pool
// then keeps its free blocks on a stack (lifo) instead, the most recently
// freed on top, whose counts are still in the processor's cache, and leaves
// hash, prev and next unallocated; a fleet replaying a workload without
// prompt segments never names a block and walks no list of cold blocks.
// No block is shared then either (a hit needs a named block), so a held
// block has exactly one holder and ref is left unallocated too: release
// pushes every block it is given. The first register moves the stack into
// the queue, in any order, and sets ref from it.
type blockPool struct {
	ref    []int32 // nil while lifo: 1 for every block not on the stack
	lifo   bool
	stack  []int32        // free blocks while lifo
	hash   []kvblock.Hash // 0: not registered; nil while lifo
	prev   []int32        // nil while lifo
	next   []int32        // nil while lifo
	free   int            // blocks in the free queue (or on the stack)
	cached map[kvblock.Hash]int32
	// events, when set, hears of every eviction of a named block.
	events BlockEvents
}

func newBlockPool(n int) *blockPool {
	p := &blockPool{
		lifo:   true,
		stack:  make([]int32, n),
		free:   n,
		cached: map[kvblock.Hash]int32{},
	}
	// Taken from the top: block 0 first, as from the queue.
	for i := range n {
		p.stack[i] = int32(n - 1 - i)
	}
	return p
}

// toQueue leaves lifo mode: the free blocks, all anonymous, enter the
// queue, the stack's top at the tail.
func (p *blockPool) toQueue() {
	n := len(p.stack)
	p.ref = make([]int32, n)
	for b := range n {
		p.ref[b] = 1
	}
	for _, b := range p.stack[:p.free] {
		p.ref[b] = 0
	}
	p.hash = make([]kvblock.Hash, n)
	p.prev = make([]int32, n+1)
	p.next = make([]int32, n+1)
	for b := range n {
		p.prev[b], p.next[b] = -1, -1
	}
	s := int32(n)
	p.prev[s], p.next[s] = s, s
	stack := p.stack[:p.free]
	p.stack, p.lifo, p.free = nil, false, 0
	for _, b := range stack {
		p.pushTail(b)
	}
}

func (p *blockPool) sentinel() int32 { return int32(len(p.ref)) }

func (p *blockPool) pushTail(b int32) {
	if p.lifo {
		p.stack[p.free] = b
		p.free++
		return
	}
	s := p.sentinel()
	last := p.prev[s]
	p.prev[b], p.next[b] = last, s
	p.next[last] = b
	p.prev[s] = b
	p.free++
}

func (p *blockPool) unlink(b int32) {
	p.next[p.prev[b]] = p.next[b]
	p.prev[p.next[b]] = p.prev[b]
	p.prev[b], p.next[b] = -1, -1
	p.free--
}

// take pops the least recently freed block, evicting its hash, and gives
// it to one holder. The caller has checked that a block is free.
func (p *blockPool) take() int32 {
	if p.lifo {
		p.free--
		return p.stack[p.free]
	}
	b := p.next[p.sentinel()]
	p.unlink(b)
	if h := p.hash[b]; h != 0 {
		delete(p.cached, h)
		p.hash[b] = 0
		if p.events != nil {
			p.events.BlockRemoved(h)
		}
	}
	p.ref[b] = 1
	return b
}

// lookup appends to dst the cached blocks of the longest run of leading
// hashes, at most limit of them, without touching them.
func (p *blockPool) lookup(dst []int32, hashes []kvblock.Hash, limit int) []int32 {
	for _, h := range hashes[:min(limit, len(hashes))] {
		b, ok := p.cached[h]
		if !ok {
			break
		}
		dst = append(dst, b)
	}
	return dst
}

// evictable is how many of blocks are free: holding them takes them from
// the free queue.
func (p *blockPool) evictable(blocks []int32) int {
	n := 0
	for _, b := range blocks {
		if p.ref[b] == 0 {
			n++
		}
	}
	return n
}

// hold adds a holder to a cached block, taking it out of the free queue if
// nobody held it.
func (p *blockPool) hold(b int32) {
	if p.ref[b] == 0 {
		p.unlink(b)
	}
	p.ref[b]++
}

// register names block b, now full and computed, by h, and reports
// whether it did; a block already cached under h keeps the name and b
// stays anonymous.
func (p *blockPool) register(b int32, h kvblock.Hash) bool {
	if h == 0 {
		return false
	}
	if p.lifo {
		p.toQueue()
	}
	if p.hash[b] != 0 {
		return false
	}
	if _, ok := p.cached[h]; ok {
		return false
	}
	p.cached[h] = b
	p.hash[b] = h
	return true
}

// release drops one holder from each of blocks, last block first, so that
// the free queue evicts a sequence's tail before its prefix (as vLLM frees
// a request's blocks in reverse order).
func (p *blockPool) release(blocks []int32) {
	if p.lifo {
		for i := len(blocks) - 1; i >= 0; i-- {
			p.stack[p.free] = blocks[i]
			p.free++
		}
		return
	}
	for i := len(blocks) - 1; i >= 0; i-- {
		b := blocks[i]
		p.ref[b]--
		if p.ref[b] == 0 {
			p.pushTail(b)
		}
	}
}

// check verifies the pool's invariants against holders, the block tables
// of all live sequences.
func (p *blockPool) check(holders [][]int32) error {
	n, ref := len(p.ref), p.ref
	if p.lifo {
		n = len(p.stack)
	}
	want := make([]int32, n)
	for _, t := range holders {
		for _, b := range t {
			want[b]++
		}
	}
	inQueue := make([]bool, n)
	count := 0
	if p.lifo {
		if len(p.cached) != 0 || p.hash != nil || p.prev != nil || p.next != nil {
			return fmt.Errorf("stack of free blocks with named blocks or a queue")
		}
		for _, b := range p.stack[:p.free] {
			if inQueue[b] {
				return fmt.Errorf("block %d twice on the free stack", b)
			}
			inQueue[b] = true
			count++
		}
		if p.ref != nil {
			return fmt.Errorf("reference counts on the stack")
		}
		ref = make([]int32, n) // one holder for every block held
		for b := range n {
			if !inQueue[b] {
				ref[b] = 1
			}
		}
	}
	if !p.lifo {
		for b := p.next[p.sentinel()]; b != p.sentinel(); b = p.next[b] {
			if inQueue[b] {
				return fmt.Errorf("block %d twice in the free queue", b)
			}
			if p.next[p.prev[b]] != b {
				return fmt.Errorf("block %d: broken links", b)
			}
			inQueue[b] = true
			count++
			if count > n {
				return fmt.Errorf("free queue longer than the pool")
			}
		}
	}
	if count != p.free {
		return fmt.Errorf("free queue has %d blocks, counter says %d", count, p.free)
	}
	used := 0
	for b := range n {
		if ref[b] < 0 {
			return fmt.Errorf("block %d: ref count %d", b, ref[b])
		}
		if ref[b] != want[b] {
			return fmt.Errorf("block %d: ref count %d, held by %d", b, ref[b], want[b])
		}
		if (ref[b] == 0) != inQueue[b] {
			return fmt.Errorf("block %d: ref count %d, in free queue %v", b, ref[b], inQueue[b])
		}
		if ref[b] > 0 {
			used++
		}
		if p.lifo {
			continue
		}
		if h := p.hash[b]; h != 0 && p.cached[h] != int32(b) {
			return fmt.Errorf("block %d: hash %x maps to block %d", b, h, p.cached[h])
		}
	}
	if used+p.free != n {
		return fmt.Errorf("%d used + %d free != %d blocks", used, p.free, n)
	}
	for h, b := range p.cached {
		if b < 0 || int(b) >= n || p.hash[b] != h {
			return fmt.Errorf("hash %x maps to block %d, which holds %x", h, b, p.hash[b])
		}
	}
	return nil
}

// checkBlocks verifies the engine's block tables against its pool.
func (e *Engine) checkBlocks() error {
	tables := make([][]int32, 0, len(e.seqs))
	for _, q := range e.seqs {
		if len(q.table) < blocksFor(q.computed) {
			return fmt.Errorf("seq %d: %d blocks for %d computed tokens", q.id, len(q.table), q.computed)
		}
		if q.state == stateWaiting && len(q.table) != 0 {
			return fmt.Errorf("waiting seq %d holds %d blocks", q.id, len(q.table))
		}
		if q.hashed > len(q.table) {
			return fmt.Errorf("seq %d: %d blocks hashed of %d", q.id, q.hashed, len(q.table))
		}
		tables = append(tables, q.table)
	}
	if u := e.KVUsage(); u < 0 || u > 1 {
		return fmt.Errorf("kv usage %v", u)
	}
	if e.prefixHits > e.prefixQueries || e.prefixHits < 0 {
		return fmt.Errorf("prefix hits %d of %d queries", e.prefixHits, e.prefixQueries)
	}
	return e.pool.check(tables)
}
