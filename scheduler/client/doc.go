// Package client implements scheduler.Admitter over the shared scheduler
// service (scheduler/server), for hosts that share one pool capacity.
//
// The client keeps one Session stream to the service and multiplexes every
// admission over it (lease ids counted up by the client). Concurrency of a
// session: Admit queues its Start and waits in the caller's goroutine for
// the answer or its context's end (then it queues a Done, which withdraws
// the request). Admit sends its Start itself; Progress and Release wake
// the session's sender goroutine instead, so a request's own goroutine
// never waits on the stream, and the sender sends them after
// Options.ReportDelay unless an Admit's send has taken them by then (so
// they ride with the next Start); Close sends what still waits. Whoever finds the send lock free sends
// everything queued in one message (for every lease with something new:
// its Start, latest Progress, coalesced, and Done); the others only queue.
// One receiver goroutine alone receives: it hands
// each lease its answer and closes its Preempt channel; when the stream
// ends it fails the requests still waiting (the failure mode applies) and
// the next Admit opens a new session. Client.mu guards the sessions' lease
// tables and send queues.
//
// With Options.StreamPerAdmission, or when the service has no Session
// method (tried again a minute after each fallback), each admission is an
// Admit stream of its own. Concurrency: Admit
// runs in the caller's goroutine until the service answers. Each admitted
// lease then owns two goroutines, tracked by the
// Client's WaitGroup: a receiver (the only caller of Recv; closes the
// lease's Preempt channel when told to) and a sender (the only caller of
// Send after Admit; sends coalesced progress, then Done, and cancels the
// stream). Both end when the lease is released or the stream breaks;
// Client.Close cuts every stream and waits for them.
package client
