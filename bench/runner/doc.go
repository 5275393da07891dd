// Package runner drives a workload against a target: it sends each item at
// its intended time (open loop) or keeps a fixed number in flight (closed
// loop), records every request and hands the records to a sink as they
// complete.
//
// Goroutines and what they own, for one Run:
//   - the caller's goroutine is the dispatcher of an open loop: it owns the
//     workload Source, the wait timer and the work channel, which it closes
//     when it stops;
//   - an open loop's worker goroutines each send one request at a time,
//     taking the next item from the work channel; the dispatcher starts a
//     new one only when none is waiting, and they end when the channel is
//     closed;
//   - in a closed loop, Concurrency worker goroutines share the Source
//     under a mutex;
//   - the goroutine sending a request owns its Record until it sends the
//     pointer on the done channel;
//   - one collector goroutine owns the records slice and is the only
//     caller of Options.Sink; Run reads the slice only after the collector
//     has exited.
//
// Run returns only after every goroutine it started has ended. Live is
// updated with atomics (counters) and a mutex (histograms).
package runner
