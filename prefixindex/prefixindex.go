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
	// at maps an (endpoint, hash) pair to its slot in entries.
	at      map[key]int32
	entries []entry
	// alive is Match's scratch list of endpoints still matching.
	alive []int32
}

type key struct {
	h  kvblock.Hash
	ep int32
}

// entry is one block held by one endpoint, linked into that endpoint's
// recency list (prev is towards the most recent end).
type entry struct {
	h          kvblock.Hash
	prev, next int32 // -1: none
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
	x := &Index{eps: make([]lru, len(capacities)), at: map[key]int32{}}
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

// Record notes that the request whose prompt blocks are blocks (first block
// first) was sent to endpoint ep: every block becomes the most recently
// used of ep's set, the first block most recent of all, so that eviction
// takes a prompt's tail before its head, as an engine freeing a sequence's
// blocks from its end does. When blocks outnumber ep's capacity the leading
// ones are kept. An endpoint out of range is ignored. O(len(blocks)).
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
	for i := len(blocks) - 1; i >= 0; i-- {
		k := key{blocks[i], int32(ep)}
		if s, ok := x.at[k]; ok {
			x.unlink(l, s)
			x.pushFront(l, s)
			continue
		}
		if l.n == l.capacity {
			x.evict(l, int32(ep))
		}
		s := l.free
		if s >= 0 {
			l.free = -1
		} else {
			s = int32(len(x.entries))
			x.entries = append(x.entries, entry{})
		}
		x.entries[s].h = k.h
		x.pushFront(l, s)
		l.n++
		x.at[k] = s
	}
}

// evict drops ep's least recently used block; its slot is l's to reuse.
func (x *Index) evict(l *lru, ep int32) {
	s := l.tail
	x.unlink(l, s)
	delete(x.at, key{x.entries[s].h, ep})
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
// Record, when the request is sent, does). O(len(blocks) × the endpoints
// still matching).
func (x *Index) Match(dst []int, blocks []kvblock.Hash) []int {
	if cap(dst) < len(x.eps) {
		dst = make([]int, len(x.eps))
	}
	dst = dst[:len(x.eps)]
	clear(dst)
	alive := x.alive[:0]
	for i := range x.eps {
		if x.eps[i].n > 0 {
			alive = append(alive, int32(i))
		}
	}
	for i, h := range blocks {
		if len(alive) == 0 {
			break
		}
		kept := alive[:0]
		for _, ep := range alive {
			if _, ok := x.at[key{h, ep}]; ok {
				dst[ep] = i + 1
				kept = append(kept, ep)
			}
		}
		alive = kept
	}
	x.alive = alive[:0]
	return dst
}
