// Package preemptive is priority scheduling (the priority package's order,
// with aging) plus SLO-driven preemption: when a waiting request's
// predicted TTFT would pass its class objective and the pool is full, just
// enough strictly-lower-priority, preemptible in-flight requests are
// preempted, cheapest recompute first, within the pool's guard rails
// (min_lower_inflight, min_run_time, max_per_request).
//
// The policy's preemption choices are all in this file; the Machine
// (scheduler/preempt.go, scheduler/preemptwalk.go) supplies the mechanism
// and carries them out: the predictions (TTFT, each victim's remaining
// time, recompute and sunk work; scheduler/cost.go), the walk over waiting
// requests in policy order that finds the ones short of a slot and at risk
// of missing their TTFT objective (the trigger), the pool's guard rails
// (max_per_request, min_run_time and min_lower_inflight, the drained pool
// and the abort check), the endpoint a waiting request will use, and the
// release of each chosen victim. The choices, in the order the walk asks
// for them:
//
//   - Victims (Victim): running requests of a preemptible class strictly
//     less urgent than the at-risk request and than every request short
//     ahead of it. Preempting one as urgent swaps equals: pure waste.
//   - Worth (worth): not finishing within an engine step (it frees its
//     slot as soon by itself), recompute less than the request's gain,
//     nothing sunk when the pool is overloaded (the engine has no idle
//     time to make a recompute up).
//   - Order (costOrder, Order): cheapest recompute, farthest from
//     finishing, then no first token → fewest tokens → least urgent →
//     most recently admitted.
//   - Choice (Choose): just enough victims, in that order, to cover the
//     request, together costing less than its gain; one while probing.
package preemptive

import (
	"time"

	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy/priority"
)

// Name is the registry name.
const Name = "preemptive"

// Preemptive admits by priority and preempts for at-risk requests.
type Preemptive struct{}

var (
	_ scheduler.Policy    = (*Preemptive)(nil)
	_ scheduler.Preemptor = (*Preemptive)(nil)
)

// New returns the policy.
func New() *Preemptive { return &Preemptive{} }

// Name implements scheduler.Policy.
func (*Preemptive) Name() string { return Name }

// Less is the priority policy's order.
func (*Preemptive) Less(a, b *scheduler.Entry) bool { return priority.Less(a, b) }

// Victim implements scheduler.Preemptor: a preemptible class strictly less
// urgent than above.
func (*Preemptive) Victim(c *scheduler.ClassConfig, above int) bool {
	return c.Preemptible && c.Priority > above
}

// Order implements scheduler.Preemptor: no first token → fewest tokens →
// least urgent → most recently admitted (then the later ticket).
func (*Preemptive) Order(a, b *scheduler.Candidate) int {
	switch {
	case a.FirstToken() != b.FirstToken():
		if !a.FirstToken() {
			return -1
		}
		return 1
	case a.Tokens() != b.Tokens():
		return a.Tokens() - b.Tokens()
	case a.Priority() != b.Priority():
		return b.Priority() - a.Priority()
	case !a.Admitted().Equal(b.Admitted()):
		return b.Admitted().Compare(a.Admitted())
	}
	return int(int64(b.Ticket()) - int64(a.Ticket()))
}

// Choose implements scheduler.Preemptor. It keeps the candidates worth
// preempting, orders the first of them by costOrder (a selection, not a
// full sort: usually one victim is enough) and stops once the balance
// covers the request, at the permitted number, or before the victims
// together would cost more than the gain. refused: the cost rules (not the
// number permitted) turned some down.
func (p *Preemptive) Choose(r *scheduler.Rescue, cands []scheduler.Candidate) (n int, refused bool) {
	kept := cands[:0]
	for _, c := range cands {
		if worth(r, &c) {
			kept = append(kept, c)
		}
	}
	s, t := r.Slots, r.Tokens
	most := min(r.Allowed, len(kept))
	if r.Probe {
		most = min(most, 1) // a probe is one victim
	}
	if !feasible(r, r.Slots+most-r.Need, kept) {
		most = 0 // even every permitted victim would not do: skip the selection
	}
	var spent time.Duration
	for n < most && !r.Covered(s, t) {
		best := n
		for i := n + 1; i < len(kept); i++ {
			if p.costOrder(&kept[i], &kept[best]) < 0 {
				best = i
			}
		}
		kept[n], kept[best] = kept[best], kept[n]
		if spent += kept[n].Recompute; spent >= r.Gain {
			break // the victims would cost more than waiting
		}
		s++
		t += kept[n].Cost()
		n++
	}
	return n, len(kept) < len(cands) || n < min(r.Allowed, len(kept))
}

// worth reports whether preempting c is worth it for r: c would not free
// its slot within an engine step by itself, its recompute is less than
// the gain, and nothing of it is sunk in an overloaded pool.
func worth(r *scheduler.Rescue, c *scheduler.Candidate) bool {
	return c.Remaining > c.Step && c.Recompute < r.Gain && (!r.Overloaded || c.Sunk == 0)
}

// feasible reports whether preempting candidates could cover r when the
// slot balance with every permitted victim gone would be slots.
func feasible(r *scheduler.Rescue, slots int, cs []scheduler.Candidate) bool {
	if slots < 0 {
		return false
	}
	if !r.TokenBound {
		return true
	}
	toks := r.Tokens
	for i := range cs {
		toks += cs[i].Cost()
	}
	return toks >= 0
}

// costOrder ranks candidates: cheapest recompute, then farthest from
// finishing, then Order.
func (p *Preemptive) costOrder(a, b *scheduler.Candidate) int {
	switch {
	case a.Recompute != b.Recompute:
		if a.Recompute < b.Recompute {
			return -1
		}
		return 1
	case a.Remaining != b.Remaining:
		if a.Remaining > b.Remaining {
			return -1
		}
		return 1
	}
	return p.Order(a, b)
}
