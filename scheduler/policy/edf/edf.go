// Package edf is earliest-deadline-first: the waiting request whose deadline
// (arrival + its class's TTFT objective) comes first goes first. Requests of
// classes without a TTFT objective come after all that have one, in priority
// then arrival order. No preemption.
package edf

import "github.com/llmesh/llmesh/scheduler"

// Name is the registry name.
const Name = "edf"

// EDF admits in deadline order.
type EDF struct{}

var _ scheduler.Policy = (*EDF)(nil)

// New returns the policy.
func New() *EDF { return &EDF{} }

// Name implements scheduler.Policy.
func (*EDF) Name() string { return Name }

// Less orders by deadline (none last), then priority, arrival, sequence.
func (*EDF) Less(a, b *scheduler.Entry) bool {
	ad, bd := !a.Deadline.IsZero(), !b.Deadline.IsZero()
	switch {
	case ad != bd:
		return ad
	case ad && !a.Deadline.Equal(b.Deadline):
		return a.Deadline.Before(b.Deadline)
	case a.Priority != b.Priority:
		return a.Priority < b.Priority
	case !a.Arrival.Equal(b.Arrival):
		return a.Arrival.Before(b.Arrival)
	}
	return a.Seq < b.Seq
}
