// Package prefixlru replays request arrivals through a model prefix cache
// over block hashes (kvblock.Hash) to say how many prompt tokens an ideal
// cache would serve: one LRU holding a given number of blocks, or one that
// never evicts. It looks at arrivals only (no engine, no timing), so a run's
// report can set the engines' measured hits beside these two bounds.
//
// A Cache is not safe for concurrent use.
package prefixlru

import (
	"container/list"

	"github.com/llmesh/llmesh/kvblock"
)

// Cache is a prefix cache of full blocks with least-recently-used eviction.
type Cache struct {
	capacity int
	order    *list.List // front = most recently used; values are kvblock.Hash
	index    map[kvblock.Hash]*list.Element
}

// New returns a cache holding at most capacity blocks; capacity <= 0 means
// it never evicts.
func New(capacity int) *Cache {
	return &Cache{capacity: capacity, order: list.New(), index: make(map[kvblock.Hash]*list.Element)}
}

// Len is the number of blocks held.
func (c *Cache) Len() int { return len(c.index) }

// Admit serves one request whose prompt's full blocks are blocks (chained
// hashes, first block first) and returns how many leading blocks were
// cached, at most cacheable (kvblock.Cacheable: never the block holding the
// last prompt token). All blocks are then cached, the first one most
// recently used, so that eviction takes a sequence's tail before its
// prefix, as an engine freeing a finished sequence's blocks in reverse does.
func (c *Cache) Admit(blocks []kvblock.Hash, cacheable int) int {
	if cacheable > len(blocks) {
		cacheable = len(blocks)
	}
	hits := 0
	for hits < cacheable {
		if _, ok := c.index[blocks[hits]]; !ok {
			break
		}
		hits++
	}
	for i := len(blocks) - 1; i >= 0; i-- {
		h := blocks[i]
		if e, ok := c.index[h]; ok {
			c.order.MoveToFront(e)
			continue
		}
		c.index[h] = c.order.PushFront(h)
		if c.capacity > 0 && c.order.Len() > c.capacity {
			old := c.order.Back()
			c.order.Remove(old)
			delete(c.index, old.Value.(kvblock.Hash))
		}
	}
	return hits
}

// Totals are prompt tokens and the tokens each model cache would serve.
type Totals struct {
	PromptTokens       int64 `json:"prompt_tokens"`
	PooledHitTokens    int64 `json:"pooled_hit_tokens"`
	UnboundedHitTokens int64 `json:"unbounded_hit_tokens"`
}

// Replay feeds arrivals, in arrival order, to a pooled LRU of a given
// capacity and to a cache that never evicts.
type Replay struct {
	blockSize int
	pooled    *Cache
	unbounded *Cache
	totals    Totals
}

// NewReplay returns a replay of blocks of blockSize tokens (< 1 means
// kvblock.DefaultBlockSize) whose pooled cache holds capacityBlocks blocks
// (the whole fleet's KV capacity; <= 0 means it never evicts either).
func NewReplay(blockSize, capacityBlocks int) *Replay {
	if blockSize < 1 {
		blockSize = kvblock.DefaultBlockSize
	}
	return &Replay{blockSize: blockSize, pooled: New(capacityBlocks), unbounded: New(0)}
}

// Observe records one arrival: its prompt length and its prompt's full
// blocks (more blocks than the prompt holds, e.g. output ones, are ignored).
func (r *Replay) Observe(promptTokens int, blocks []kvblock.Hash) {
	if full := promptTokens / r.blockSize; len(blocks) > full {
		blocks = blocks[:full]
	}
	cacheable := kvblock.Cacheable(promptTokens, r.blockSize)
	r.totals.PromptTokens += int64(promptTokens)
	r.totals.PooledHitTokens += int64(r.pooled.Admit(blocks, cacheable) * r.blockSize)
	r.totals.UnboundedHitTokens += int64(r.unbounded.Admit(blocks, cacheable) * r.blockSize)
}

// Totals returns what has been observed so far.
func (r *Replay) Totals() Totals { return r.totals }
