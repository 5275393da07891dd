package scheduler

import "time"

// Policy is a scheduling policy: the order in which waiting requests of
// one pool are admitted and, when it is also a Preemptor, its preemption
// choices. Implementations live in scheduler/policy/<name> and are listed
// in the one registry in scheduler/policy. A Policy holds no per-request
// state, so one value can serve many pools and machines.
type Policy interface {
	// Name is the policy's registry name.
	Name() string
	// Less reports whether a should be admitted before b. The machine calls
	// it only on the heads of class queues; within a class, order is
	// arrival order with requeued requests in front.
	Less(a, b *Entry) bool
}

// Preemptor is the preemption half of a Policy: a pool whose Policy is
// also a Preemptor preempts; one whose Policy is not never does. The
// Machine supplies the mechanism (preemptwalk.go, preempt.go): it walks
// the waiting requests in policy order, finds each one that the pool's
// free capacity does not cover and that is predicted to miss its TTFT
// objective, keeps the pool's guard rails (PreemptionConfig, a drained
// pool, the abort check), asks the Preemptor which running requests may
// make room and which of them to stop, and carries the choice out. See
// docs/scheduling.md, Preemption.
type Preemptor interface {
	// Victim reports whether running requests of class c may be preempted
	// to make room for a waiting request when it, and every request short
	// of a slot ahead of it, is of priority above or more urgent. The
	// Machine asks only about classes strictly less urgent than above (a
	// slot freed goes to the most urgent request short of one: preempting
	// one as urgent swaps equals). Victim depends on c and above only and,
	// once false, stays false for every larger above: the Machine keeps
	// its index of possible victims by class on that promise.
	Victim(c *ClassConfig, above int) bool
	// Order ranks two possible victims, negative when a is the better
	// victim; it is a total order (0 only for the same request). The
	// Machine uses it, without costs, to pick the endpoint a preemption
	// makes room on.
	Order(a, b *Candidate) int
	// Choose picks the victims for r among cands (requests Victim allowed,
	// past the guard rails, with their costs): it moves the ones to
	// preempt, in order, to the front and returns their number, at most
	// r.Allowed (one while r.Probe; the Machine takes no more). The
	// Machine preempts them only if they cover r (Rescue.Covered). refused
	// reports that the policy's rules, not the number permitted, turned
	// some down; the walk then deems the requests of r's class behind it,
	// which waited less and so gain less, no more worth preempting for.
	Choose(r *Rescue, cands []Candidate) (n int, refused bool)
}

// Preempts reports whether p preempts, that is whether it is a Preemptor.
func Preempts(p Policy) bool {
	_, ok := p.(Preemptor)
	return ok
}

// Entry is what a policy sees of a waiting request.
type Entry struct {
	// Class and Priority are the request's class and its priority (LOWER is
	// more urgent).
	Class    string
	Priority int
	// EffectivePriority is Priority lowered by one level per pool Aging
	// waited; the machine refreshes it before every ordering decision.
	EffectivePriority int
	// Arrival is when the host received the request (kept across requeues).
	Arrival time.Time
	// Deadline is Arrival plus the class's TTFT objective, or the zero time
	// when the class has none.
	Deadline time.Time
	// Requeued is true for a request preempted before it sent anything.
	Requeued bool
	// Seq is a unique, increasing arrival sequence number used to break ties
	// so that every policy defines a total order.
	Seq uint64
}

// Rescue is what a Preemptor sees of a waiting request that is short of a
// slot and at risk: the balance it must be covered by and what preempting
// for it is worth.
type Rescue struct {
	// Request is the waiting request.
	Request *Entry
	// Gain is the lateness it avoids when a slot is freed for it now
	// rather than at the soonest natural finish (cost.go).
	Gain time.Duration
	// Overloaded: a less urgent request waited past the pool's overload
	// release (tune.go); the engine has no idle time in which a recompute
	// is made up.
	Overloaded bool
	// Allowed is how many victims the guard rails permit
	// (min_lower_inflight); Probe, that the abort check allows one only
	// (abort.go).
	Allowed int
	Probe   bool
	// Slots is the slot balance once Request and every request ahead of
	// it are admitted, and Need what it must reach; each victim adds one.
	Slots, Need int
	// Tokens is the same balance in tokens when the pool has a token bound
	// (TokenBound); each victim adds its Cost.
	Tokens     int
	TokenBound bool
}

// Covered reports whether the balances slots and tokens cover r.
func (r *Rescue) Covered(slots, tokens int) bool {
	return slots >= r.Need && (!r.TokenBound || tokens >= 0)
}

// Candidate is a running request that may be a victim, with what the
// Machine predicts preempting it costs (computed once per rescue; zero
// where Order alone is asked).
type Candidate struct {
	e *entry
	// Recompute is the engine time preempting it throws away (cost.go).
	Recompute time.Duration
	// Remaining is how long it still needs (preempt.go), and Step one
	// engine step: a request that finishes within the step a preemption
	// itself takes frees its slot as soon.
	Remaining, Step time.Duration
	// Sunk is the tokens the engine holds for it (cost.go).
	Sunk int
}

// Priority is its class priority.
func (c *Candidate) Priority() int { return c.e.Priority }

// Class is its class.
func (c *Candidate) Class() *ClassConfig { return &c.e.class.ClassConfig }

// FirstToken reports whether it produced its first token.
func (c *Candidate) FirstToken() bool { return c.e.firstToken }

// Tokens is the output tokens it produced so far.
func (c *Candidate) Tokens() int { return c.e.tokens }

// Admitted is when it was admitted.
func (c *Candidate) Admitted() time.Time { return c.e.admitted }

// Ticket is its ticket (later arrivals have larger ones).
func (c *Candidate) Ticket() Ticket { return c.e.ticket }

// Cost is the tokens it holds against the pool's token bound.
func (c *Candidate) Cost() int { return c.e.cost }
