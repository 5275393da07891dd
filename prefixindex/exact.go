package prefixindex

import (
	"fmt"

	"github.com/llmesh/llmesh/kvblock"
)

// Exact is the precise counterpart of Index: per endpoint, exactly the set
// of blocks the engine reports holding (its KV-cache events, package
// kvevents, or the engine model's store and evict points in virtual time).
// Nothing ages: a block stays until the engine says it evicted it, or the
// endpoint is cleared. Match has Index's semantics, so the picker reads
// either the same way; Record is a no-op, as where a request was sent says
// nothing the engine will not report itself.
//
// Like Index, an Exact is not safe for concurrent use and starts no
// goroutines: its owner serializes the picker's reads and the events'
// writes (scheduler.Scheduler's mutex).
type Exact struct {
	n     []int // blocks per endpoint
	limit int
	// holders lists, per block, the endpoints that hold it (a handful at
	// most: a block is cached where its prefix was sent).
	holders map[kvblock.Hash][]int32
}

// NewExact returns an exact index of endpoints endpoints, each holding at
// most limit blocks (stores beyond it are dropped, so that a runaway
// publisher cannot grow the index without bound); limit < 1 or above
// MaxCapacity means MaxCapacity.
func NewExact(endpoints, limit int) (*Exact, error) {
	if endpoints < 0 {
		return nil, fmt.Errorf("prefixindex: endpoints: %d must not be negative", endpoints)
	}
	if limit < 1 || limit > MaxCapacity {
		limit = MaxCapacity
	}
	return &Exact{n: make([]int, endpoints), limit: limit, holders: map[kvblock.Hash][]int32{}}, nil
}

// Endpoints is the number of endpoints.
func (x *Exact) Endpoints() int { return len(x.n) }

// Len is the number of blocks endpoint ep holds.
func (x *Exact) Len(ep int) int { return x.n[ep] }

// Record does nothing (type doc).
func (x *Exact) Record(int, []kvblock.Hash) {}

func (x *Exact) valid(ep int) bool { return ep >= 0 && ep < len(x.n) }

// Store notes that endpoint ep holds blocks. Blocks it already holds and
// endpoints out of range are ignored.
func (x *Exact) Store(ep int, blocks []kvblock.Hash) {
	if !x.valid(ep) {
		return
	}
	e := int32(ep)
	for _, h := range blocks {
		hs := x.holders[h]
		if holds(hs, e) >= 0 {
			continue
		}
		if x.n[ep] >= x.limit {
			return
		}
		x.holders[h] = append(hs, e)
		x.n[ep]++
	}
}

// Remove notes that endpoint ep evicted blocks; blocks it does not hold
// are ignored.
func (x *Exact) Remove(ep int, blocks []kvblock.Hash) {
	if !x.valid(ep) {
		return
	}
	e := int32(ep)
	for _, h := range blocks {
		hs := x.holders[h]
		i := holds(hs, e)
		if i < 0 {
			continue
		}
		hs[i] = hs[len(hs)-1]
		hs = hs[:len(hs)-1]
		if len(hs) == 0 {
			delete(x.holders, h)
		} else {
			x.holders[h] = hs
		}
		x.n[ep]--
	}
}

// Clear forgets every block of endpoint ep: O(blocks of all endpoints),
// for the rare engine restart or missed event.
func (x *Exact) Clear(ep int) {
	if !x.valid(ep) || x.n[ep] == 0 {
		return
	}
	e := int32(ep)
	for h, hs := range x.holders {
		if i := holds(hs, e); i >= 0 {
			hs[i] = hs[len(hs)-1]
			if hs = hs[:len(hs)-1]; len(hs) == 0 {
				delete(x.holders, h)
			} else {
				x.holders[h] = hs
			}
		}
	}
	x.n[ep] = 0
}

func holds(hs []int32, ep int32) int {
	for i, e := range hs {
		if e == ep {
			return i
		}
	}
	return -1
}

// Match is Index.Match over the exact sets: per endpoint, the number of
// leading blocks it holds, stopping at its first miss.
func (x *Exact) Match(dst []int, blocks []kvblock.Hash) []int {
	if cap(dst) < len(x.n) {
		dst = make([]int, len(x.n))
	}
	dst = dst[:len(x.n)]
	clear(dst)
	for i, h := range blocks {
		advanced := false
		for _, ep := range x.holders[h] {
			if dst[ep] == i {
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

// Endpoint returns endpoint ep's side of x as a kvevents.Sink (Stored,
// Removed, Cleared). It does no locking.
func (x *Exact) Endpoint(ep int) EndpointSink { return EndpointSink{x: x, ep: ep} }

// EndpointSink is one endpoint of an Exact index.
type EndpointSink struct {
	x  *Exact
	ep int
}

// Stored calls Store.
func (s EndpointSink) Stored(blocks []kvblock.Hash) { s.x.Store(s.ep, blocks) }

// Removed calls Remove.
func (s EndpointSink) Removed(blocks []kvblock.Hash) { s.x.Remove(s.ep, blocks) }

// Cleared calls Clear.
func (s EndpointSink) Cleared() { s.x.Clear(s.ep) }
