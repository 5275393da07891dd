package simulate

import (
	"fmt"

	"github.com/llmesh/llmesh/kvblock"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/sim"
)

// RoutingPrefixPrecise is RoutingPrefixAware with the picker's exact index
// (scheduler.PrefixRouting.Precise): each endpoint's blocks are what its
// engine's block pool stores and evicts, reported at the moment it does
// (sim.BlockEvents), as the engine's KV-cache events would report them
// (package kvevents) without their publishing delay.
const RoutingPrefixPrecise = "prefix-precise"

// engineBlocks forwards one engine's block events to its endpoint in
// every scheduler machine of the fleet.
type engineBlocks struct {
	sinks []scheduler.BlockSink
	one   [1]kvblock.Hash
}

var _ sim.BlockEvents = (*engineBlocks)(nil)

func (b *engineBlocks) BlockStored(_ kvblock.Hash, blocks []kvblock.Hash, _ []uint32) {
	for _, s := range b.sinks {
		s.Stored(blocks)
	}
}

func (b *engineBlocks) BlockRemoved(h kvblock.Hash) {
	b.one[0] = h
	for _, s := range b.sinks {
		s.Removed(b.one[:])
	}
}

// feedExact connects every engine's block pool to the precise index of
// each machine. The fleet's single loop owns engines and machines alike,
// so the calls need no lock.
func (f *fleet) feedExact() error {
	for _, e := range f.engines {
		b := &engineBlocks{}
		for _, s := range f.ss {
			sink, err := s.m.EndpointBlocks(poolName, e.name)
			if err != nil {
				return fmt.Errorf("scheduler: %w", err)
			}
			b.sinks = append(b.sinks, sink)
		}
		e.eng.SetBlockEvents(b)
	}
	return nil
}
