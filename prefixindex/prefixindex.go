// Package prefixindex is the endpoint picker's approximate view of which
// engine replica holds which prompt prefix in its KV cache. The picker
// cannot see the engines' caches; it remembers instead which prompt blocks
// (chained kvblock hashes) it sent to which endpoint, in one
// least-recently-used set per endpoint sized to that endpoint's KV capacity
// in blocks, so that what the engine has likely evicted is forgotten too.
// A request's match on an endpoint is the number of its leading blocks the
// endpoint's set holds, stopping at the first miss, as a prefix cache hits.
//
// The index only approximates: an engine that evicts earlier (other
// sequences' decode blocks take room too) or that was restarted holds less
// than the index says. The picker weighs the match against load, so a wrong
// guess costs one cache miss, never a request.
//
// # Ownership
//
// An Index is not safe for concurrent use and starts no goroutines. The
// scheduler's Machine owns one per pool that enables prefix routing and
// calls it only from its own methods, which its owner serializes (the
// Scheduler's mutex, or the single loop of a simulator).
package prefixindex

import (
	"fmt"

	"github.com/llmesh/llmesh/kvblock"
)

// MaxCapacity bounds one endpoint's capacity in blocks (at 16 tokens a
// block, 268M tokens: far above any engine's KV cache), so that a typo
// cannot make the index's memory unbounded.
const MaxCapacity = 1 << 24

// Index holds, per endpoint, an LRU set of block hashes.
type Index struct {
	eps []lru
	// heads maps a block hash to the first of its entries (one per
	// endpoint that holds it, chained by entry.same), so that a lookup
	// serves every endpoint at once.
	heads   map[kvblock.Hash]int32
	entries []entry
}

// entry is one block held by one endpoint, linked into that endpoint's
// recency list (prev is towards the most recent end) and into its hash's
// chain of holders.
type entry struct {
	h          kvblock.Hash
	ep         int32
	prev, next int32 // recency; -1: none
	same       int32 // the next holder of h; -1: none
}

// lru is one endpoint's recency list over Index.entries.
type lru struct {
	capacity   int
	n          int
	head, tail int32 // most and least recently used; -1 when empty
	free       int32 // a slot of an evicted entry to reuse; -1 when none
}

// New returns an index of len(capacities) endpoints, endpoint i holding at
// most capacities[i] blocks. A capacity of 0 makes an endpoint that holds
// nothing (it never matches). A capacity that is negative or above
// MaxCapacity is an error naming the endpoint.
func New(capacities []int) (*Index, error) {
	x := &Index{eps: make([]lru, len(capacities)), heads: map[kvblock.Hash]int32{}}
	for i, c := range capacities {
		if c < 0 || c > MaxCapacity {
			return nil, fmt.Errorf("prefixindex: capacities[%d]: %d blocks must be in [0, %d]", i, c, MaxCapacity)
		}
		x.eps[i] = lru{capacity: c, head: -1, tail: -1, free: -1}
	}
	return x, nil
}

// Endpoints is the number of endpoints.
func (x *Index) Endpoints() int { return len(x.eps) }

// Len is the number of blocks endpoint ep holds.
func (x *Index) Len(ep int) int { return x.eps[ep].n }

// find is ep's entry for h, or -1.
func (x *Index) find(h kvblock.Hash, ep int32) int32 {
	s, ok := x.heads[h]
	if !ok {
		return -1
	}
	for ; s >= 0; s = x.entries[s].same {
		if x.entries[s].ep == ep {
			return s
		}
	}
	return -1
}

// Record notes that the request whose prompt blocks are blocks (first block
// first) was sent to endpoint ep: every block becomes the most recently
// used of ep's set, the first block most recent of all, so that eviction
// takes a prompt's tail before its head, as an engine freeing a sequence's
// blocks from its end does. When blocks outnumber ep's capacity the leading
// ones are kept. An endpoint out of range is ignored. O(len(blocks)) map
// operations.
func (x *Index) Record(ep int, blocks []kvblock.Hash) {
	if ep < 0 || ep >= len(x.eps) {
		return
	}
	l := &x.eps[ep]
	if l.capacity == 0 {
		return
	}
	if len(blocks) > l.capacity {
		blocks = blocks[:l.capacity]
	}
	e32 := int32(ep)
	for i := len(blocks) - 1; i >= 0; i-- {
		h := blocks[i]
		if s := x.find(h, e32); s >= 0 {
			x.unlink(l, s)
			x.pushFront(l, s)
			continue
		}
		if l.n == l.capacity {
			x.evict(l)
		}
		s := l.free
		if s >= 0 {
			l.free = -1
		} else {
			s = int32(len(x.entries))
			x.entries = append(x.entries, entry{})
		}
		same := int32(-1)
		if first, ok := x.heads[h]; ok {
			same = first
		}
		x.entries[s] = entry{h: h, ep: e32, same: same}
		x.heads[h] = s
		x.pushFront(l, s)
		l.n++
	}
}

// evict drops l's least recently used block; its slot is l's to reuse.
func (x *Index) evict(l *lru) {
	s := l.tail
	x.unlink(l, s)
	h, next := x.entries[s].h, x.entries[s].same
	if first := x.heads[h]; first == s {
		if next >= 0 {
			x.heads[h] = next
		} else {
			delete(x.heads, h)
		}
	} else {
		p := first
		for x.entries[p].same != s {
			p = x.entries[p].same
		}
		x.entries[p].same = next
	}
	l.n--
	l.free = s
}

func (x *Index) unlink(l *lru, s int32) {
	e := &x.entries[s]
	if e.prev >= 0 {
		x.entries[e.prev].next = e.next
	} else {
		l.head = e.next
	}
	if e.next >= 0 {
		x.entries[e.next].prev = e.prev
	} else {
		l.tail = e.prev
	}
	e.prev, e.next = -1, -1
}

func (x *Index) pushFront(l *lru, s int32) {
	e := &x.entries[s]
	e.prev, e.next = -1, l.head
	if l.head >= 0 {
		x.entries[l.head].prev = s
	}
	l.head = s
	if l.tail < 0 {
		l.tail = s
	}
}

// Match writes into dst (grown as needed and returned) the number of
// leading blocks of blocks each endpoint holds, endpoint i at dst[i]: a
// count stops at the endpoint's first miss. It changes no recency (only
// Record, when the request is sent, does). One map lookup per block, up to
// the first block that no endpoint still matching holds, and a walk over
// that block's holders.
func (x *Index) Match(dst []int, blocks []kvblock.Hash) []int {
	if cap(dst) < len(x.eps) {
		dst = make([]int, len(x.eps))
	}
	dst = dst[:len(x.eps)]
	clear(dst)
	for i, h := range blocks {
		s, ok := x.heads[h]
		if !ok {
			break
		}
		advanced := false
		for ; s >= 0; s = x.entries[s].same {
			// An endpoint that matched every block before this one.
			if ep := x.entries[s].ep; dst[ep] == i {
				dst[ep] = i + 1
				advanced = true
			}
		}
		if !advanced {
			break
		}
	}
	return dst
}
