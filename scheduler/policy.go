package scheduler

import "time"

// Policy decides the order in which waiting requests of one pool are
// admitted and whether in-flight work may be preempted for waiting work.
// Implementations live in scheduler/policy/<name> and are listed in the one
// registry in scheduler/policy. A Policy holds no per-request state, so one
// value can serve many pools and machines.
type Policy interface {
	// Name is the policy's registry name.
	Name() string
	// Less reports whether a should be admitted before b. The machine calls
	// it only on the heads of class queues; within a class, order is
	// arrival order with requeued requests in front.
	Less(a, b *Entry) bool
	// Preempts reports whether the policy preempts: in-flight requests
	// make room for waiting ones whose TTFT objective is at risk, by the
	// rules of scheduler/preemptive.go (gates, victims, their order and
	// number), which the Machine carries out (preempt.go). See
	// docs/architecture.md, Scheduling semantics.
	Preempts() bool
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
