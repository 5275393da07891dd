// Package envoyfilter is llmesh's Envoy host: an adapter from the Envoy golang
// filter SDK (contrib/golang, Envoy v1.36) onto llmesh's filter core and
// scheduler. cmd/llmesh-filter registers it and builds the .so; this
// package imports only the SDK's api package, so it is tested in plain Go
// through testkit/fakesdk.
//
// Per request the filter drives the core's lifecycle, exchange.Exchange (the
// same the gateway and the endpoint picker drive), and keeps what only
// Envoy has: SDK callbacks,
// buffering, relocation as the body streams, the admission goroutine and
// OnDestroy. DecodeHeaders classifies the request (route, API key,
// tenant, trusted priority header, rules), removes the trusted marker
// header (a secret between trusted hops) before the request goes upstream,
// and asks the scheduler for admission, holding the request in Envoy (api.Running) while it is queued.
// Oversized prompts in gRPC metadata or HTTP headers are moved into the
// body first (relocation). Unless the source is trusted for priority, an
// OpenAI JSON body or llm.v1 request is buffered and its client-set engine
// priority removed before admission (bodypriority.go), after relocation. EncodeHeaders/EncodeData/EncodeTrailers feed the
// stream observer and report progress to the lease; a preemption takes
// effect at the next callback with a retryable local reply, which Envoy
// turns into a stream reset once response headers went out. Envoy runs a
// local reply sent while decoding (or from the admission goroutine)
// through the encoder filters, this filter's encode half included; the
// filter passes its own reply through unobserved, so the Record of a
// refused request is the refusal, as the gateway records it.
// OnStreamComplete finishes the measurement, releases the admission and
// writes dynamic metadata (namespace "llmesh") for access logs.
//
// Goroutines and ownership:
//   - Envoy calls every callback of one request on one worker thread. That
//     thread owns the core's Exchange (the request's state, observer,
//     lease, outcome, Record), the relocation and body state (httpPlan,
//     grpcRW, guarding, sizing) and preemptCh. Whether the request is
//     started, responding or over is the Exchange's State, not a flag of
//     the filter.
//   - A held request has one admission goroutine, started by admit() and
//     owned by the request: it blocks in Admitter.Admit on a context that
//     OnDestroy cancels, and its last action is exactly one Continue or
//     SendLocalReply, or none when the stream was destroyed meanwhile (an
//     admission that raced with OnDestroy is released at once). It defers
//     RecoverPanic and turns a scheduler panic into an INTERNAL reply.
//   - streamFilter.mu guards what both sides touch: holding, destroyed,
//     cancel, admitted, and the admission's error, which the worker thread
//     records in the Exchange at its next callback (noteAdmitError);
//     replied is an atomic flag set before any local reply. The lease is
//     published through an atomic pointer before Continue; the worker
//     thread takes it (Swap) and hands it to the Exchange (noteAdmitted)
//     at its next callback, or gives it back itself when the Exchange can
//     no longer use it, so the Exchange is never touched by the admission
//     goroutine. OnDestroy takes a lease stored after the request ended.
//   - Header maps and buffers are used only inside the callback that
//     received them (the JSON relocation and the priority guard keep the
//     request header map from DecodeHeaders to the buffered DecodeData,
//     which the SDK allows after StopAndBuffer).
//   - FilterConfig is immutable after Parse and shared by all requests; its
//     scheduler is created once, lazily, on the first request (Parse does
//     no IO). Schedulers shares one scheduler per distinct pool/class
//     setting across the configs Envoy parses.
package envoyfilter
