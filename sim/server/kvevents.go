package server

import (
	"time"

	"github.com/llmesh/llmesh/kvblock"
	"github.com/llmesh/llmesh/kvevents"
	"github.com/llmesh/llmesh/sim"
)

// KVEventPublisher takes the engine's KV-cache events, one batch per
// engine step that changed the prefix cache, as vLLM publishes them
// (kvevents.Publisher). Publish is called from the engine loop goroutine,
// owns the batch it is given, and must not block.
type KVEventPublisher interface {
	Publish(kvevents.Batch)
}

// blockEvents collects a step's prefix-cache changes into vLLM events
// (sim.BlockEvents); the loop goroutine owns it and flushes it after each
// step. Block hashes are the engine's own (kvblock hashes of the
// synthetic token ids), token ids the blocks' synthetic ids.
type blockEvents struct {
	pub    KVEventPublisher
	events []kvevents.Event
}

var _ sim.BlockEvents = (*blockEvents)(nil)

func (b *blockEvents) BlockStored(parent kvblock.Hash, blocks []kvblock.Hash, tokens []uint32) {
	ev := kvevents.Event{Kind: kvevents.BlockStored, BlockSize: sim.BlockSize, Medium: kvevents.Medium, Group: -1,
		Hashes: make([]uint64, len(blocks)), Parent: uint64(parent), HasParent: parent != 0}
	for i, h := range blocks {
		ev.Hashes[i] = uint64(h)
	}
	if tokens == nil {
		// A sequence without token ids (none come from the servers):
		// vLLM always sends them; skip rather than send a bad event.
		return
	}
	ev.Tokens = append([]uint32(nil), tokens...)
	b.events = append(b.events, ev)
}

func (b *blockEvents) BlockRemoved(h kvblock.Hash) {
	// Consecutive removals in one step share an event, as vLLM's removals
	// of one allocation would if it grouped them; one per block is also
	// valid, and bigger.
	if n := len(b.events); n > 0 && b.events[n-1].Kind == kvevents.BlockRemoved {
		b.events[n-1].Hashes = append(b.events[n-1].Hashes, uint64(h))
		return
	}
	b.events = append(b.events, kvevents.Event{Kind: kvevents.BlockRemoved, Hashes: []uint64{uint64(h)}, Medium: kvevents.Medium, Group: -1})
}

// flush publishes what the step changed, stamped at now.
func (b *blockEvents) flush(now time.Time) {
	if b == nil || len(b.events) == 0 {
		return
	}
	b.pub.Publish(kvevents.Batch{TS: float64(now.UnixNano()) / 1e9, Events: b.events, DPRank: 0})
	b.events = nil
}
