// Package exchange is the host-independent core of llmesh's data plane: it
// classifies requests into priority classes from trusted configuration and
// measures streamed LLM responses (queue time, TTFT, decode steps,
// inter-chunk latency, TPOT, tokens, status, errors).
//
// It sees only bytes, header lookups and timestamps that its host passes in;
// it imports no net/http and no Envoy types, so the embedded gateway and the
// Envoy adapter share exactly the same logic.
//
// Concurrency and ownership: a Classifier is immutable after NewClassifier
// and safe for concurrent use; hosts swap a new one in (for example behind an
// atomic.Pointer) when the configuration changes. An Observer belongs to one
// request and is driven by one goroutine at a time (the host's request or
// response path); it starts no goroutines and keeps no reference to the byte
// slices it is fed once a call returns. Extractors must be safe for
// concurrent use because one instance serves every request.
//
// An Exchange is one request's lifecycle, a state machine (State: idle →
// received → admitted ⇄ requeued → streaming → finished → ended) written
// once and driven by every host; its transition table is allowedIn
// (lifecycle.go) and docs/architecture.md shows it with the endings and
// which host calls what. A call the state does not allow does nothing and
// is reported (ExchangeConfig.Misuse). It starts no goroutines and is not
// safe for concurrent use: every method is called by the goroutine that
// owns the request's current phase — the gateway's handler goroutine
// (ReverseProxy's copy loop runs there too), the Envoy worker thread, or
// the picker's stream goroutine. The one exception is the admission
// itself: a host that waits for the scheduler on another goroutine
// (Envoy's admission goroutine) reads View().Request before it starts it,
// and hands the lease to the owning goroutine, which calls Admitted. The
// lease's Preempt channel is closed by the scheduler from elsewhere; hosts
// watch it themselves and then call Requeued, or Finish with EndPreempted,
// from the owning goroutine. The admission is released exactly once by
// construction: only on the transition out of the states that hold it.
//
// Definitions (see docs/metrics.md): queue time is received → admitted; TTFT
// is received → first chunk carrying at least one output token (so it
// includes queue time), upstream TTFT is upstream request sent → that chunk;
// decode steps are token-bearing chunks after the first; ITL samples are the
// gaps between consecutive token-bearing chunks; TPOT is
// (E2E − TTFT) / (output tokens − 1); output tokens come from the final usage
// when the stream reports it and are counted from the stream otherwise.
package exchange
