// Package preemptive is priority scheduling (the priority package's order,
// with aging) plus SLO-driven preemption: when a waiting request's
// predicted TTFT would pass its class objective and the pool is full, just
// enough strictly-lower-priority, preemptible in-flight requests are
// preempted, cheapest recompute first, within the pool's guard rails
// (min_lower_inflight, min_run_time, max_per_request). Its preemption
// rules (gates, victims, their order and number) are one file,
// scheduler/preemptive.go, which the Machine runs for every policy whose
// Preempts is true.
package preemptive

import (
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy/priority"
)

// Name is the registry name.
const Name = "preemptive"

// Preemptive admits by priority and preempts for at-risk requests.
type Preemptive struct{}

var _ scheduler.Policy = (*Preemptive)(nil)

// New returns the policy.
func New() *Preemptive { return &Preemptive{} }

// Name implements scheduler.Policy.
func (*Preemptive) Name() string { return Name }

// Less is the priority policy's order.
func (*Preemptive) Less(a, b *scheduler.Entry) bool { return priority.Less(a, b) }

// Preempts implements scheduler.Policy: yes.
func (*Preemptive) Preempts() bool { return true }
