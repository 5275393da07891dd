// Package priority is strict, non-preemptive priority scheduling with an
// aging bound: the waiting request with the lowest effective priority value
// (vLLM semantics) goes first, arrival order among equals. Aging (the pool's
// aging parameter) lowers a waiting request's effective value by one level
// per period waited, so a request of priority p is ahead of every fresh
// arrival of priority q ≤ p after waiting (p−q+1)·aging.
package priority

import "github.com/llmesh/llmesh/scheduler"

// Name is the registry name.
const Name = "priority"

// Priority admits by effective priority, never preempting.
type Priority struct{}

var _ scheduler.Policy = (*Priority)(nil)

// New returns the policy.
func New() *Priority { return &Priority{} }

// Name implements scheduler.Policy.
func (*Priority) Name() string { return Name }

// Less orders by effective priority, then arrival, then sequence.
func (*Priority) Less(a, b *scheduler.Entry) bool { return Less(a, b) }

// Less is the priority order, shared with the preemptive policy.
func Less(a, b *scheduler.Entry) bool {
	if a.EffectivePriority != b.EffectivePriority {
		return a.EffectivePriority < b.EffectivePriority
	}
	if !a.Arrival.Equal(b.Arrival) {
		return a.Arrival.Before(b.Arrival)
	}
	return a.Seq < b.Seq
}
