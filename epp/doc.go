// Package epp is llmesh as an endpoint picker (EPP) of the Gateway API
// Inference Extension: an Envoy ext_proc server that admits each request
// through llmesh's scheduler (queueing by class) and answers with the picked
// endpoint, in the x-gateway-destination-endpoint request header and in the
// envoy.lb dynamic metadata, as the extension's endpoint picker protocol
// asks. It then follows the response through the same ext_proc stream,
// feeding its body to the per-request core's stream observer
// (filter.Observer) for tokens and TTFT, and releases the scheduler lease
// exactly once, when the response ends or when the stream ends early.
//
// docs/epp.md is the user's page: what is done, what is not.
//
// Goroutines and state: gRPC runs one goroutine per ext_proc stream
// (Server.Process); everything about one request (its headers, body, lease,
// observer) lives in that goroutine's stream value and is touched by no
// other goroutine. The Server itself is read-only after New, except its
// request counter (atomic) and the health server (grpc's, safe for
// concurrent use). The scheduler (Config.Admitter) has its own lock.
package epp
