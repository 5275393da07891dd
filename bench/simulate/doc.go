// Package simulate evaluates scheduling policies in virtual time: a
// discrete-event loop feeds a workload's requests (or a replayed trace)
// through the scheduler's pure state machine (scheduler.Machine, with the
// policy under test) into the simulated engine model (sim.Engine,
// continuous batching with H200 step timings), acting on preemptions the
// way the gateway host does, and summarizes the per-request records with
// bench/stats into the report format of `llmesh bench run`. One event
// loop (fleet.go) runs a fleet of engines behind proxies and the single
// host in front of one engine alike, the latter as a fleet of one that
// acts on every message at once. A run hands each record to the summary
// (stats.Stream, and Options.Records when set) as soon as it is final, in
// item order, and keeps only the requests from the oldest one not yet
// handed over to the latest arrival (window.go), so its memory follows the
// requests in flight, not the run's length.
//
// Loads are relative to the workload's saturation rate on that engine and
// pool (Saturation): load 1.0 arrives as fast as the pool can complete
// requests. docs/simulate.md describes the model and the method.
//
// # Concurrency
//
// A run is single-threaded: one loop owns its machines, its engines, the
// messages in flight between them and the proxies (fleet.go) and its
// records. Evaluate runs independent (policy, load) pairs on
// min(runs, GOMAXPROCS) goroutines that it starts and waits for before it
// returns; they share only the read-only workload and engine profile, and
// each writes its own slot of the result. Results do not depend on the
// number of goroutines.
package simulate
