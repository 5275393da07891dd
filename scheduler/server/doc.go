// Package server serves a scheduler.Admitter (normally one in-process
// scheduler.Scheduler) over gRPC as llmesh.scheduler.v1.Scheduler, so that
// several proxies share one pool capacity.
//
// Each admission is one bidirectional stream. Concurrency: gRPC runs each
// stream's handler in its own goroutine; that goroutine alone sends on the
// stream. It starts one receiving goroutine per admitted stream, which
// alone receives, forwards progress to the lease, and ends with one message
// on a buffered channel when the client says Done or the stream breaks. The
// handler then releases the lease (Cancelled when the stream broke) and
// returns, which ends the stream; so every admission is released exactly
// once, and a proxy that dies frees its slots.
//
// The pools it serves are a scheduler/pools set (MeshScheduler).
// Run owns the config watcher's goroutine and the admin server's.
package server
