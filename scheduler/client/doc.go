// Package client implements scheduler.Admitter over the shared scheduler
// service (scheduler/server), for hosts that share one pool capacity.
//
// Concurrency: Admit runs in the caller's goroutine until the service
// answers. Each admitted lease then owns two goroutines, tracked by the
// Client's WaitGroup: a receiver (the only caller of Recv; closes the
// lease's Preempt channel when told to) and a sender (the only caller of
// Send after Admit; sends coalesced progress, then Done, and cancels the
// stream). Both end when the lease is released or the stream breaks;
// Client.Close cuts every stream and waits for them.
package client
