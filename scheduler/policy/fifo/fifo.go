// Package fifo is the first-come, first-served policy: arrival order across
// all classes, no preemption. It is the baseline the other policies are
// compared against.
package fifo

import "github.com/llmesh/llmesh/scheduler"

// Name is the registry name.
const Name = "fifo"

// FIFO admits in arrival order.
type FIFO struct{}

var _ scheduler.Policy = (*FIFO)(nil)

// New returns the policy.
func New() *FIFO { return &FIFO{} }

// Name implements scheduler.Policy.
func (*FIFO) Name() string { return Name }

// Less orders by arrival time, then by arrival sequence.
func (*FIFO) Less(a, b *scheduler.Entry) bool {
	if !a.Arrival.Equal(b.Arrival) {
		return a.Arrival.Before(b.Arrival)
	}
	return a.Seq < b.Seq
}
