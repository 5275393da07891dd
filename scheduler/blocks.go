package scheduler

import (
	"fmt"

	"github.com/llmesh/llmesh/kvblock"
	"github.com/llmesh/llmesh/prefixindex"
)

// prefixIndex is what the picker needs of a pool's prefix index: the
// approximate prefixindex.Index learns from Record, the exact
// prefixindex.Exact ignores it and is fed by EndpointBlocks.
type prefixIndex interface {
	Match(dst []int, blocks []kvblock.Hash) []int
	Record(ep int, blocks []kvblock.Hash)
}

var (
	_ prefixIndex = (*prefixindex.Index)(nil)
	_ prefixIndex = (*prefixindex.Exact)(nil)
)

// BlockSink feeds one endpoint's side of a precise prefix index: what its
// engine reports storing and evicting (kvevents.Sink's methods). It does
// no locking: Machine's caller serializes it with the machine's other
// calls (Scheduler.EndpointBlocks returns one that locks).
type BlockSink struct {
	p  *pool
	ep int
}

// EndpointBlocks returns the sink of endpoint name of pool poolName, whose
// PrefixRouting must be Precise.
func (m *Machine) EndpointBlocks(poolName, name string) (BlockSink, error) {
	p, ep, err := m.endpoint(poolName, name)
	if err != nil {
		return BlockSink{}, err
	}
	if p.exact == nil {
		return BlockSink{}, fmt.Errorf("scheduler: pool %q: prefix routing is not precise", poolName)
	}
	return BlockSink{p: p, ep: ep.index}, nil
}

// Stored notes blocks the engine now holds.
func (b BlockSink) Stored(blocks []kvblock.Hash) {
	b.p.exact.Store(b.ep, blocks)
	b.p.matchFor = 0
}

// Removed notes blocks the engine evicted.
func (b BlockSink) Removed(blocks []kvblock.Hash) {
	b.p.exact.Remove(b.ep, blocks)
	b.p.matchFor = 0
}

// Cleared forgets what the engine holds.
func (b BlockSink) Cleared() {
	b.p.exact.Clear(b.ep)
	b.p.matchFor = 0
}

// LockedBlockSink is a BlockSink that takes its Scheduler's lock, for a
// subscriber goroutine.
type LockedBlockSink struct {
	s *Scheduler
	b BlockSink
}

// EndpointBlocks is Machine.EndpointBlocks behind the scheduler's lock.
func (s *Scheduler) EndpointBlocks(pool, endpoint string) (*LockedBlockSink, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b, err := s.m.EndpointBlocks(pool, endpoint)
	if err != nil {
		return nil, err
	}
	return &LockedBlockSink{s: s, b: b}, nil
}

// Stored calls BlockSink.Stored under the lock.
func (l *LockedBlockSink) Stored(blocks []kvblock.Hash) {
	l.s.mu.Lock()
	l.b.Stored(blocks)
	l.s.mu.Unlock()
}

// Removed calls BlockSink.Removed under the lock.
func (l *LockedBlockSink) Removed(blocks []kvblock.Hash) {
	l.s.mu.Lock()
	l.b.Removed(blocks)
	l.s.mu.Unlock()
}

// Cleared calls BlockSink.Cleared under the lock.
func (l *LockedBlockSink) Cleared() {
	l.s.mu.Lock()
	l.b.Cleared()
	l.s.mu.Unlock()
}
