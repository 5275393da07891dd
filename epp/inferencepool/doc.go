// Package inferencepool discovers the endpoints of a Gateway API Inference
// Extension InferencePool (inference.networking.k8s.io/v1) with client-go
// informers: the ready pods its selector selects, one ip:port per target
// port. `llmesh epp --inference-pool` feeds the set to the picker's pool
// (docs/epp.md, "Kubernetes").
//
// Goroutines and state: Run owns the informers (their goroutines end when
// Run returns) and the last reported set; the informers' handlers only
// signal a buffered channel, and Run recomputes the set from the caches and
// calls OnChange on its own goroutine.
package inferencepool
