// Package scheduler admits LLM requests into bounded upstream capacity in
// policy order, with batching windows and SLO-driven preemption.
//
// # Layers
//
// admit.go is the host contract (Request, Lease, Admitter, error classes).
// Machine is the pure state machine behind it; Scheduler runs a Machine for
// hosts in one process; scheduler/server and scheduler/client share one
// Scheduler between processes over gRPC; scheduler/capacity adapts a pool's
// limit from the engine's /metrics; scheduler/policy holds the policies and
// their one registry. A pool with PrefixRouting owns a prefixindex.Index
// (endpoint.go), or with PrefixRouting.Precise a prefixindex.Exact, which
// only the Machine's own methods touch: engine reports reach the exact
// index through BlockSink (blocks.go), whose callers serialize with the
// Machine's other calls; Scheduler.EndpointBlocks hands a subscriber
// goroutine a sink that takes the Scheduler's mutex.
//
// # Driving the Machine (real or virtual time)
//
// The Machine has no goroutines, timers or clock. Every method takes now:
//
//	m, _ := scheduler.NewMachine(cfg)
//	t, err := m.Arrive(now, req)      // enqueue (err: ErrQueueFull, ErrRejected)
//	d := m.Step(now)                  // decide
//	// d.Admitted: start these; d.Rejected: answer with their Err;
//	// d.Preempted: ask these to stop (they hold capacity until Finish);
//	// d.Wake: call Step again at this time if nothing else happens first.
//	m.Progress(now, t, scheduler.Progress{FirstToken: true, Tokens: n})
//	m.Finish(now, t, scheduler.Done) // or Failed, Cancelled, Preempted
//	m.Cancel(now, t)                  // waiting or running
//
// A discrete-event simulator calls Step after every event it feeds in and
// schedules a wake-up event at d.Wake. A preempted request that should run
// again arrives anew with Request.Requeue set and its original Arrival and
// ID; it goes to the front of its class and its preemption count (by ID)
// carries over. Time must not go backwards between calls.
//
// # Concurrency
//
// A Machine is not safe for concurrent use. A Scheduler owns one Machine and
// guards it, its waiters map (ticket → channel of the blocked Admit call)
// and its leases map (ticket → lease, including each lease's released flag)
// with a single mutex. Admit blocks on its own buffered channel outside the
// mutex. The only goroutines are the clock's timer callbacks (tick), which
// take the mutex, step the machine and re-arm the timer; Close stops the
// timer. Lease methods take the same mutex, so Release is idempotent and a
// lease is released exactly once; Progress steps the machine under it when
// a first token frees max_prefill_tokens budget, so held requests are
// admitted at once.
package scheduler
