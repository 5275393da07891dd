package exchange

import "github.com/llmesh/llmesh/scheduler"

// Record is what a host reports per finished request, the same from the
// gateway and the Envoy host: the observation plus what the host decided.
type Record struct {
	Observation
	Class string
	// Model is the model the request named ("" when the host never read
	// it: vLLM's engine API, or a body that never reached the host).
	Model string
	Pool  string
	// Outcome is how the admission was released (scheduler.Done when the
	// request was never admitted).
	Outcome scheduler.Outcome
	// Preemptions counts how often the request was preempted (the gateway
	// requeues or continues; the Envoy host ends it at the first).
	Preemptions int
	// Err is the host-side error that ended the request (admission,
	// upstream, preemption), nil when it completed.
	Err error
	// Passthrough marks a request that was not a generation call (the
	// route's generation paths): it was proxied without admission, and
	// recorders keep it out of generation metrics.
	Passthrough bool
	// Endpoint is the pool endpoint (host:port) its last upstream attempt
	// went to; "" when it went to the pool's upstream.
	Endpoint string
}

// Recorder receives each finished request's Record from either host. It
// is called once per request, after the admission was released, on the
// host's request goroutine (the gateway) or an Envoy worker thread, so it
// must not block. r's ITL samples are the host's buffer: valid only during
// the call.
type Recorder interface {
	Record(r Record)
}

// RecorderFunc adapts a function to Recorder.
type RecorderFunc func(Record)

// Record calls f.
func (f RecorderFunc) Record(r Record) { f(r) }

var _ Recorder = RecorderFunc(nil)
