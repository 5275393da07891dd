// Package server serves a simulated engine (package sim) over
// OpenAI-compatible HTTP (/v1/completions, /v1/chat/completions, /v1/models,
// /health, /metrics) and gRPC (llm.v1.Generation and
// vllm.grpc.engine.VllmEngine). docs/sim.md describes the wire behaviour,
// the ground-truth fields, the synthetic tokens and the fault injection.
//
// # Who owns what
//
//   - The engine loop goroutine (Server.Run, started by Serve) owns the
//     sim.Engine and the map of live streams. It alone calls Engine methods.
//     Each iteration it drains the inbox (new sequences, aborts), runs one
//     step on the injected clock, sleeps the step's duration on that clock,
//     then publishes the step's events to the streams. It stops when the
//     context ends and then fails every live stream with errStopped.
//   - Request handlers (one goroutine per HTTP request or gRPC stream,
//     owned by net/http and grpc-go) own their response writer and token
//     generator. They reach the loop only through loop.submit and
//     loop.abort, which append to the inbox under loop.mu and kick the loop.
//   - A stream's progress fields are written by the loop and read by its
//     handler under stream.mu; stream.notify (capacity 1) wakes the handler.
//     A slow handler never blocks the loop: it finds several steps' tokens
//     and sends them in one chunk.
//   - With Config.KVEvents set, the engine loop goroutine also owns the
//     step's pending KV-cache events (kvevents.go), collected while the
//     engine steps and handed to the publisher after each step; the
//     publisher's own goroutine sends them.
//   - Metrics are Prometheus collectors, safe for concurrent use; gauges
//     are set by the loop.
//   - Serve owns the HTTP and gRPC servers and shuts them down after the
//     loop has stopped.
package server
