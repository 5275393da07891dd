// Package result holds the harness's data: the per-request Record (one JSONL
// line each) and the run Report (the JSON document every renderer, A/B
// comparison and sweep reads). The live runner and the virtual-time simulator
// both produce Records and summarize them into a Report with bench/stats, so
// both speak one format.
//
// Report's JSON is a superset of the result file of vLLM's `vllm bench serve`
// (same field names and units: seconds for duration, milliseconds for
// latencies, per-request arrays only in detailed reports) plus llmesh's own
// fields: achieved_rps, schedule_lag_ms, validity, and per-class blocks under
// classes.<name>.
package result

import "time"

// Status is how a request ended, from the client's point of view.
type Status string

// Statuses. Everything but StatusOK and StatusCancelled counts as an SLO
// miss.
const (
	StatusOK Status = "ok"
	// StatusError: the target answered with an error or broke the protocol.
	StatusError Status = "error"
	// StatusRejected: HTTP 429 or gRPC RESOURCE_EXHAUSTED from the engine
	// (or an admission refused without saying why).
	StatusRejected Status = "rejected"
	// StatusQueueFull: llmesh's own queue was full (HTTP 429 or gRPC
	// RESOURCE_EXHAUSTED from a gateway or filter that says "queue full"):
	// the mesh refused the request, not the engine.
	StatusQueueFull Status = "queue_full"
	// StatusPreempted: HTTP 503 with Retry-After, gRPC UNAVAILABLE with
	// grpc-retry-pushback-ms, or an error event saying it was preempted.
	StatusPreempted Status = "preempted"
	// StatusDropped: the stream ended before its end marker.
	StatusDropped Status = "dropped"
	// StatusUnreachable: no connection to the target could be made
	// (connection refused, no route, an unknown host): the request never
	// reached it.
	StatusUnreachable Status = "unreachable"
	// StatusTimeout: the request ran past the workload's timeout.
	StatusTimeout Status = "timeout"
	// StatusCancelled: the run was interrupted while the request was in
	// flight. Cancelled requests are kept in the records but left out of the
	// statistics.
	StatusCancelled Status = "cancelled"
)

// Where a Record's OutputTokens came from.
const (
	SourceUsage  = "usage"
	SourceStream = "stream"
)

// Record is one request. Times are nanoseconds relative to the run's start
// (the intended send time of the first item is 0).
type Record struct {
	// Run names the run of a multi-run command the record belongs to
	// (bench ab: "A/1", "B/1", … for arm and pair; bench sweep: "rate=R");
	// empty for a single run.
	Run    string `json:"run,omitempty"`
	Index  int    `json:"index"`
	Class  string `json:"class"`
	Warmup bool   `json:"warmup,omitempty"`
	// PromptTokens is what was asked for; MaxTokens the requested output.
	PromptTokens int `json:"prompt_tokens"`
	MaxTokens    int `json:"max_tokens"`
	// OutputTokens comes from the final usage when present, else counted
	// from the stream; the counted tokens also win over a usage of 0 when
	// the stream carried tokens (an engine that never set the field).
	// OutputTokensSource says which: SourceUsage or SourceStream.
	OutputTokens       int    `json:"output_tokens"`
	OutputTokensSource string `json:"output_tokens_source,omitempty"`
	// IntendedNS is when the arrival process wanted it sent, SentNS when it
	// was (schedule lag is their difference; zero intended time for closed
	// loops means "as soon as a slot frees").
	IntendedNS int64 `json:"intended_ns"`
	SentNS     int64 `json:"sent_ns"`
	// FirstTokenNS is the first chunk carrying at least one output token; 0
	// when none came.
	FirstTokenNS int64 `json:"first_token_ns,omitempty"`
	// DoneNS is when the response ended (or failed).
	DoneNS int64 `json:"done_ns"`
	// ChunkNS are the times of all token-bearing chunks (the first equals
	// FirstTokenNS); ITL samples are their gaps.
	ChunkNS []int64 `json:"chunk_ns,omitempty"`
	Status  Status  `json:"status"`
	// Code is the HTTP status or gRPC code number of a failure.
	Code  int    `json:"code,omitempty"`
	Error string `json:"error,omitempty"`
	// Preemptions and RecomputedTokens are filled where known: llmesh's
	// Server-Timing preemptions entry (a gateway in front of the engine),
	// the virtual-time simulator.
	Preemptions      int `json:"preemptions,omitempty"`
	RecomputedTokens int `json:"recomputed_tokens,omitempty"`
	// Engine holds the engine's own timestamps when the target reports them
	// (llmesh sim: llmesh_engine in the last chunk, or trailing metadata).
	Engine *EngineTimes `json:"engine,omitempty"`
	// LLMesh holds what a gateway or filter in front of the engine said
	// in its Server-Timing header and trailer; nil when none did.
	LLMesh *ServerTimes `json:"llmesh,omitempty"`
}

// ServerTimes are llmesh's Server-Timing figures for one request.
type ServerTimes struct {
	// QueueNS is how long the request waited for admission (HasQueue:
	// the entry was present).
	QueueNS  int64 `json:"queue_ns"`
	HasQueue bool  `json:"has_queue,omitempty"`
	// Preemptions is how often the request was preempted.
	Preemptions int `json:"preemptions,omitempty"`
}

// EngineTimes are an engine's ground-truth timestamps in Unix nanoseconds of
// the engine's clock.
type EngineTimes struct {
	ArrivalNS        int64 `json:"arrival_ns"`
	FirstScheduledNS int64 `json:"first_scheduled_ns"`
	FirstTokenNS     int64 `json:"first_token_ns"`
	FinishNS         int64 `json:"finish_ns"`
	Preemptions      int   `json:"preemptions"`
}

// TTFT is the client-side time to first token, measured from the actual
// send; false when no token came.
func (r *Record) TTFT() (time.Duration, bool) {
	if r.FirstTokenNS == 0 || r.FirstTokenNS < r.SentNS {
		return 0, false
	}
	return time.Duration(r.FirstTokenNS - r.SentNS), true
}

// E2E is send to end of response.
func (r *Record) E2E() time.Duration { return time.Duration(r.DoneNS - r.SentNS) }

// TPOT is (E2E − TTFT)/(output tokens − 1); false for fewer than two tokens
// or no first token.
func (r *Record) TPOT() (time.Duration, bool) {
	ttft, ok := r.TTFT()
	if !ok || r.OutputTokens < 2 {
		return 0, false
	}
	return (r.E2E() - ttft) / time.Duration(r.OutputTokens-1), true
}

// ScheduleLag is actual minus intended send time (negative never happens in
// practice; it is clamped to zero).
func (r *Record) ScheduleLag() time.Duration {
	return max(0, time.Duration(r.SentNS-r.IntendedNS))
}
