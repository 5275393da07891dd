// Package gateway is llmesh's embedded data plane: a net/http server
// (HTTP/1.1 and h2c, so gRPC passes) on httputil.ReverseProxy that measures
// every streamed LLM response with the filter core, schedules requests
// through a scheduler.Admitter, and handles preemption the way only a proxy
// that owns the upstream request can: a request preempted before anything
// reached its client is requeued at the front of its class, and an OpenAI
// SSE stream preempted mid-way is continued by a new upstream request whose
// events are spliced into the same client stream.
//
// # Use
//
//	g, err := gateway.New(gateway.Config{Pools: []gateway.Pool{{Name: "engine", Upstream: url}}},
//		gateway.WithAdmitter(sched), gateway.WithRecorder(rec))
//	go g.Serve(ctx, ln, 10*time.Second) // drains for up to 10s when ctx ends
//
// # Ownership and concurrency
//
//   - Gateway: immutable after New except the configuration and the
//     classifier, which are atomic.Pointers swapped by Update and
//     SetClassifier; a request loads both once when it starts and keeps
//     them to its end. The proxies map (one ReverseProxy per upstream) is
//     guarded by a mutex.
//   - exchange (with the core's exchange.Exchange in it), stream, splicer:
//     per request, owned by the request's handler goroutine (ReverseProxy
//     calls the transport and reads the body on that goroutine).
//   - attempt: each upstream request of an exchange owns at most one
//     goroutine, which turns the lease's Preempt channel into cancellation of
//     the attempt's context and ends with that context; attempt.stop cancels
//     and waits for it. The idle timer is a clock AfterFunc that only
//     cancels the same context.
//   - Serve owns one goroutine running http.Server.Serve; it ends after the
//     graceful shutdown that ctx's end starts.
//
// # Exactly-once release
//
// The core's lifecycle (exchange.Exchange) releases a lease on the one
// transition that leaves the states holding it, so it is released once
// whatever the order: the handler ends the request on every exit
// (exchange.finish, and its panic recovery, which covers the panic
// ReverseProxy raises when the client goes away mid-copy), and a
// preemption gives the old lease back (Requeued) before a new one is taken
// for the requeue or the continuation. The gateway never sets an outcome:
// it tells the core how the request ended (exchange.Ending).
package gateway
