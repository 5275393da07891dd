// Package epp is llmesh as an endpoint picker (EPP) of the Gateway API
// Inference Extension: an Envoy ext_proc server that admits each request
// through llmesh's scheduler (queueing by class) and answers with the picked
// endpoint, in the x-gateway-destination-endpoint request header and in the
// envoy.lb dynamic metadata, as the extension's endpoint picker protocol
// asks. It then follows the response through the same ext_proc stream,
// driving the per-request lifecycle the other hosts drive
// (exchange.Exchange): its observer counts tokens and measures TTFT, and it
// releases the scheduler lease exactly once, with the outcome the other
// hosts give, when the response ends or when the stream ends early.
//
// docs/epp.md is the user's page: what is done, what is not.
//
// Goroutines and state: gRPC runs one goroutine per ext_proc stream
// (Server.Process); everything about one request (its headers, body, and
// its lifecycle with the lease and observer) lives in that goroutine's
// stream value. The one other goroutine that touches it is the one that
// handles a preemption of the request's lease after its pick
// (stream.preempted): started by the scheduler's preempt notification, or
// a watcher of the lease's preempt channel that ends with the stream
// (stream.done). The stream's mutex guards its state and every send on
// the gRPC stream (gRPC allows one sender at a time, beside the receiver);
// the receiving goroutine holds it while it handles a message. The Server
// itself is read-only after New, except its counters (atomic), each pool's
// endpoint set (SetEndpoints swaps it atomically) and the health server
// (grpc's, safe for concurrent use). The scheduler (Config.Admitter) has
// its own lock.
package epp
