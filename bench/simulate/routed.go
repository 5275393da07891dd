package simulate

import (
	"fmt"

	"github.com/llmesh/llmesh/bench/prefixlru"
	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/kvblock"
	"github.com/llmesh/llmesh/sim"
)

// routedCaches model, for a fleet, one prefix cache per engine fed the
// requests the proxies sent there, in the order of their first admission:
// what the engines' caches would serve given where requests went, as far
// as an LRU of one engine's KV capacity tells. Unlike the pooled and
// unbounded model caches (prefix.go), which see arrivals only, it depends
// on routing, so it compares routings while the engines keep no prefix
// counters of their own. Like them it counts whole sim.BlockSize blocks
// and never the block holding a prompt's last token.
type routedCaches struct {
	caches []*prefixlru.Cache
	hits   int64
}

// newRoutedCaches returns the model for engines of capacityBlocks blocks
// each; a fleet makes one only when some item has a prompt identity
// (hasSegments: else nothing could hit).
func newRoutedCaches(engines, capacityBlocks int) *routedCaches {
	r := &routedCaches{caches: make([]*prefixlru.Cache, engines)}
	for i := range r.caches {
		r.caches[i] = prefixlru.New(max(1, capacityBlocks))
	}
	return r
}

// hasSegments reports whether any item's prompt has an identity.
func hasSegments(items []workload.Item) bool {
	for _, it := range items {
		if it.Segments != nil {
			return true
		}
	}
	return false
}

// observe counts item's first admission, sent to engine ep; blocks are
// its prompt's (promptBlocks).
func (r *routedCaches) observe(ep int, it workload.Item, blocks []kvblock.Hash) {
	if it.Segments == nil {
		return
	}
	if full := it.PromptTokens / sim.BlockSize; len(blocks) > full {
		blocks = blocks[:full]
	}
	n := int64(r.caches[ep].Admit(blocks, kvblock.Cacheable(it.PromptTokens, sim.BlockSize)) * sim.BlockSize)
	r.hits += n
}

// promptBlocks is v's prompt's blocks (promptBlocks), computed on first
// use and kept until v finishes (fleet.go); nil without a prompt identity.
func (v *vreq) promptBlocks() []kvblock.Hash {
	x := v.it.x
	if x == nil {
		return nil // no segments: promptBlocks is nil
	}
	if !x.hasBlocks {
		x.blocks, x.hasBlocks = promptBlocks(v.item()), true
	}
	return x.blocks
}

// dropBlocks lets go of v's prompt blocks once computed (a later
// promptBlocks gives nil then), as the request finishes.
func (v *vreq) dropBlocks() {
	if x := v.it.x; x != nil {
		x.blocks = nil
	}
}

// routedLine is the text report's line for the routed model, or "" when
// there is none.
func routedLine(p *PrefixCache) string {
	if p == nil || p.RoutedHitTokens == nil || p.PromptTokens == 0 {
		return ""
	}
	return fmt.Sprintf("prefix cache hits by where requests went (an LRU of one engine's KV per engine): %.1f%% of prompt tokens\n",
		100*float64(*p.RoutedHitTokens)/float64(p.PromptTokens))
}
