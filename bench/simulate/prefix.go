package simulate

import (
	"fmt"

	"github.com/llmesh/llmesh/bench/prefixlru"
	"github.com/llmesh/llmesh/bench/trace"
	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/kvblock"
	"github.com/llmesh/llmesh/sim"
)

// PrefixCache is how much of the prompts' tokens a prefix cache served in a
// run. HitTokens comes from the engines' own counters; the other two are
// model caches fed the same arrivals in arrival order (bench/prefixlru):
// one LRU holding the whole fleet's KV capacity (Pooled), and one that
// never evicts (Unbounded). Both count whole sim.BlockSize blocks and never
// the block holding a prompt's last token (kvblock.Cacheable). Only prompts
// with an identity (workload.Item.Segments: a Mooncake replay, a system
// prompt, a session's history) can hit; others count in
// PromptTokens only.
type PrefixCache struct {
	PromptTokens int64 `json:"prompt_tokens"`
	// HitTokens is absent while the engines keep no prefix counters.
	HitTokens          *int64 `json:"hit_tokens,omitempty"`
	PooledHitTokens    int64  `json:"pooled_hit_tokens"`
	UnboundedHitTokens int64  `json:"unbounded_hit_tokens"`
	// RoutedHitTokens, for a fleet, is what one LRU per engine of that
	// engine's KV capacity would serve, fed the requests sent to that
	// engine (routed.go): the only one of the models that depends on
	// routing. Absent for a single engine.
	RoutedHitTokens *int64 `json:"routed_hit_tokens,omitempty"`
}

// promptBlocks returns the chained sim.BlockSize-token block hashes of an
// item's prompt, or nil when the item has no token identity. It is computed
// on demand (one trace block of tokens at a time) so that no run keeps
// whole prompts' tokens alive.
func promptBlocks(it workload.Item) []kvblock.Hash {
	if it.Segments == nil {
		return nil
	}
	b, _ := trace.PromptBlocks(nil, nil, it.Segments, sim.BlockSize, sim.VocabSize)
	return b
}

// prefixBounds replays items, in order, through the model caches; the
// pooled one holds capacityBlocks blocks.
func prefixBounds(items []workload.Item, capacityBlocks int) *PrefixCache {
	r := newPrefixReplay(capacityBlocks)
	for _, it := range items {
		r.observe(it)
	}
	return r.bounds()
}

// prefixReplay is prefixBounds one item at a time.
type prefixReplay struct {
	r      *prefixlru.Replay
	blocks []kvblock.Hash
	buf    []uint32
}

func newPrefixReplay(capacityBlocks int) *prefixReplay {
	return &prefixReplay{r: prefixlru.NewReplay(sim.BlockSize, capacityBlocks)}
}

func (p *prefixReplay) observe(it workload.Item) {
	p.blocks = p.blocks[:0]
	if it.Segments != nil {
		p.blocks, p.buf = trace.PromptBlocks(p.blocks, p.buf, it.Segments, sim.BlockSize, sim.VocabSize)
	}
	p.r.Observe(it.PromptTokens, p.blocks)
}

func (p *prefixReplay) bounds() *PrefixCache {
	t := p.r.Totals()
	return &PrefixCache{PromptTokens: t.PromptTokens, PooledHitTokens: t.PooledHitTokens, UnboundedHitTokens: t.UnboundedHitTokens}
}

// engineHits sums the engines' prefix-cache hit counters (tokens). It reads
// them through an interface because they arrive with the engine's prefix
// cache (sim.Engine.PrefixHits and PrefixQueries); until then it reports
// false and the report omits hit_tokens rather than claim zero.
func engineHits(engs []*sim.Engine) (int64, bool) {
	var hits int64
	for _, e := range engs {
		pc, ok := any(e).(interface {
			PrefixHits() int64
			PrefixQueries() int64
		})
		if !ok {
			return 0, false
		}
		hits += pc.PrefixHits()
	}
	return hits, len(engs) > 0
}

// prefixLine is the text report's prefix-cache line, or "" when nothing
// could hit (no prompt has an identity and the engines report no hits).
func prefixLine(p *PrefixCache) string {
	if p == nil || p.PromptTokens == 0 || (p.UnboundedHitTokens == 0 && (p.HitTokens == nil || *p.HitTokens == 0)) {
		return ""
	}
	pct := func(n int64) string { return fmt.Sprintf("%.1f%%", 100*float64(n)/float64(p.PromptTokens)) }
	hits := "not counted by the engines"
	if p.HitTokens != nil {
		hits = pct(*p.HitTokens)
	}
	return fmt.Sprintf("prefix cache hits of %d prompt tokens: engines %s; pooled LRU %s, unbounded %s\n", p.PromptTokens, hits, pct(p.PooledHitTokens), pct(p.UnboundedHitTokens))
}
