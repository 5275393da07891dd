package kvevents

import (
	"github.com/llmesh/llmesh/kvblock"
)

// Sink receives one engine's cache changes in llmesh's block hashes.
// prefixindex.Exact's per-endpoint methods have this shape; a Sink used
// by a Subscriber is called from its goroutine and must do its own
// locking.
type Sink interface {
	// Stored: the engine now holds blocks (first block first).
	Stored(blocks []kvblock.Hash)
	// Removed: the engine evicted blocks.
	Removed(blocks []kvblock.Hash)
	// Cleared: the engine holds nothing, or what it holds is unknown.
	Cleared()
}

// Medium is the only storage medium a View counts: the engine's GPU KV
// cache, where a hit saves the prefill. Blocks offloaded elsewhere (CPU,
// disk) are ignored.
const Medium = "GPU"

// Stats counts what a View did with the events it saw.
type Stats struct {
	Stored, Removed, Cleared uint64 // blocks, blocks, events
	// Skipped counts stored blocks the view could not name: an unknown
	// parent (events missed before it), a block size other than the
	// view's, an adapter or extra keys, another medium or KV group.
	Skipped uint64
}

// View follows one engine's KV-cache events: it maps the engine's block
// hashes to llmesh's (package doc) and forwards the changes to its Sink.
// Not safe for concurrent use: one Subscriber goroutine owns it.
type View struct {
	blockSize int
	sink      Sink
	// names maps an engine hash to its llmesh hash; refs counts the
	// engine's blocks under that hash (vLLM may cache two blocks with the
	// same hash, storing and removing each).
	names map[uint64]named
	stats Stats
	buf   []kvblock.Hash
}

type named struct {
	h    kvblock.Hash
	refs int32
}

// NewView returns a view whose llmesh hashes chain blocks of blockSize
// tokens (< 1: kvblock.DefaultBlockSize); events with another block size
// are skipped, since their blocks would never match a prompt hashed at
// blockSize.
func NewView(blockSize int, sink Sink) *View {
	if blockSize < 1 {
		blockSize = kvblock.DefaultBlockSize
	}
	return &View{blockSize: blockSize, sink: sink, names: map[uint64]named{}}
}

// Stats returns the counts so far.
func (v *View) Stats() Stats { return v.stats }

// Len is the number of distinct blocks the view holds.
func (v *View) Len() int { return len(v.names) }

// Reset forgets everything and tells the sink the engine's content is
// unknown (Cleared): after missed events the view would otherwise keep
// blocks the engine evicted and miss the parents of blocks it stores.
func (v *View) Reset() {
	clear(v.names)
	v.sink.Cleared()
}

// Apply applies b's events in order.
func (v *View) Apply(b *Batch) {
	for i := range b.Events {
		v.apply(&b.Events[i])
	}
}

func (v *View) counted(ev *Event) bool {
	return (ev.Medium == "" || ev.Medium == Medium) && ev.Group <= 0
}

func (v *View) apply(ev *Event) {
	switch ev.Kind {
	case AllBlocksCleared:
		v.stats.Cleared++
		v.Reset()
	case BlockStored:
		if !v.counted(ev) || ev.Adapted || ev.BlockSize != v.blockSize || len(ev.Tokens) != len(ev.Hashes)*ev.BlockSize {
			v.stats.Skipped += uint64(len(ev.Hashes))
			return
		}
		var parent kvblock.Hash
		if ev.HasParent {
			p, ok := v.names[ev.Parent]
			if !ok {
				v.stats.Skipped += uint64(len(ev.Hashes))
				return
			}
			parent = p.h
		}
		out := v.buf[:0]
		for i, eh := range ev.Hashes {
			h := kvblock.Extend(parent, ev.Tokens[i*v.blockSize:(i+1)*v.blockSize])
			n := v.names[eh]
			if n.refs > 0 && n.h != h {
				// The engine reuses a hash for other tokens (a collision,
				// or an adapter it did not report): keep the first name.
				h = n.h
			}
			n.h = h
			n.refs++
			v.names[eh] = n
			if n.refs == 1 {
				out = append(out, h)
			}
			parent = h
		}
		v.stats.Stored += uint64(len(out))
		if len(out) > 0 {
			v.sink.Stored(out)
		}
		v.buf = out
	case BlockRemoved:
		if !v.counted(ev) {
			return
		}
		out := v.buf[:0]
		for _, eh := range ev.Hashes {
			n, ok := v.names[eh]
			if !ok {
				continue
			}
			if n.refs--; n.refs > 0 {
				v.names[eh] = n
				continue
			}
			delete(v.names, eh)
			out = append(out, n.h)
		}
		v.stats.Removed += uint64(len(out))
		if len(out) > 0 {
			v.sink.Removed(out)
		}
		v.buf = out
	}
}
