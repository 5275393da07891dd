package exchange

import "time"

// Protocol is the response framing an Observer parses.
type Protocol uint8

const (
	// ProtocolAuto picks the protocol from the response content-type:
	// text/event-stream → SSE, application/grpc and binary
	// application/grpc-web (GRPCKindOf) → gRPC, application/json → JSON,
	// anything else (gRPC-Web-text included) → Raw.
	ProtocolAuto Protocol = iota
	// ProtocolSSE is an OpenAI-style server-sent event stream.
	ProtocolSSE
	// ProtocolJSON is a non-streaming OpenAI JSON body.
	ProtocolJSON
	// ProtocolGRPC is a gRPC (HTTP/2, length-prefixed) response stream.
	ProtocolGRPC
	// ProtocolRaw is anything else: bytes are counted, nothing is parsed.
	ProtocolRaw
)

var protocolNames = [...]string{"auto", "sse", "json", "grpc", "raw"}

func (p Protocol) String() string {
	if int(p) < len(protocolNames) {
		return protocolNames[p]
	}
	return "unknown"
}

// TokenSource says where a token count came from.
type TokenSource uint8

const (
	// TokensFromStream: counted from the stream (token ids, or one per
	// non-empty text piece).
	TokensFromStream TokenSource = iota
	// TokensFromUsage: the engine's own usage report.
	TokensFromUsage
)

// String is "stream" or "usage", usable as a label or a report field.
func (s TokenSource) String() string {
	if s == TokensFromUsage {
		return "usage"
	}
	return "stream"
}

// ErrorKind classifies how a request went wrong, for metrics labels and for
// hosts that branch on it. The zero value means no error.
type ErrorKind uint8

const (
	// ErrorNone: the response completed normally.
	ErrorNone ErrorKind = iota
	// ErrorHTTPStatus: the upstream answered with an HTTP status >= 400.
	ErrorHTTPStatus
	// ErrorGRPCStatus: the gRPC trailers carried a non-zero grpc-status.
	ErrorGRPCStatus
	// ErrorStreamEvent: the stream carried an error event or error object.
	ErrorStreamEvent
	// ErrorTruncated: the stream ended cleanly at the transport level but
	// without its protocol end ([DONE], gRPC trailers, a complete JSON body).
	ErrorTruncated
	// ErrorUpstreamReset: the upstream connection failed mid-response.
	ErrorUpstreamReset
	// ErrorCancelled: the client went away.
	ErrorCancelled
	// ErrorPreempted: the host stopped the request for higher-priority work.
	ErrorPreempted
	// ErrorEventTooLarge: one SSE event exceeded Options.MaxEventBytes (or a
	// JSON body exceeded it); the rest of the stream is not parsed.
	ErrorEventTooLarge
	// ErrorFrameTooLarge: a gRPC frame's declared length exceeded
	// Options.MaxFrameBytes; the rest of the stream is not parsed.
	ErrorFrameTooLarge
	// ErrorMalformed: the response could not be parsed (bad JSON in an event,
	// a gRPC message that is not valid protobuf).
	ErrorMalformed
	// ErrorTimeout: the upstream went silent past the host's idle timeout
	// (the host ended the stream with an error whose Timeout() is true).
	ErrorTimeout
)

var errorKindNames = [...]string{
	"", "http_status", "grpc_status", "stream_error", "truncated", "upstream_reset",
	"cancelled", "preempted", "event_too_large", "frame_too_large", "malformed",
	"upstream_timeout",
}

// String returns a stable snake_case name usable as a metric label; "" for
// ErrorNone.
func (k ErrorKind) String() string {
	if int(k) < len(errorKindNames) {
		return errorKindNames[k]
	}
	return "unknown"
}

// EngineTimes is the engine's own account of a request, when the upstream
// reports it (the llmesh sim does: the llmesh_engine object in its last SSE
// event or JSON body, llmesh-engine-* gRPC trailers). Times are on the
// engine's clock.
type EngineTimes struct {
	// Seen is true when any ground-truth field was reported.
	Seen           bool
	Arrival        time.Time
	FirstScheduled time.Time
	FirstToken     time.Time
	Finish         time.Time
	Preemptions    int
}

// TTFT is the engine's arrival → first token, or 0 when not reported.
func (e EngineTimes) TTFT() time.Duration {
	if e.Arrival.IsZero() || e.FirstToken.IsZero() {
		return 0
	}
	return e.FirstToken.Sub(e.Arrival)
}

// QueueTime is the engine's arrival → first scheduled, or 0 when not
// reported.
func (e EngineTimes) QueueTime() time.Duration {
	if e.Arrival.IsZero() || e.FirstScheduled.IsZero() {
		return 0
	}
	return e.FirstScheduled.Sub(e.Arrival)
}

// ITLSummary is a bounded summary of the gaps between consecutive
// token-bearing chunks.
type ITLSummary struct {
	// Count is the number of gaps (token-bearing chunks − 1).
	Count int
	Min   time.Duration
	Max   time.Duration
	Sum   time.Duration
	// Samples holds the first Options.MaxITLSamples gaps in stream order; it
	// is nil when samples are disabled. Observation returns a copy.
	Samples []time.Duration
	// Buckets counts every gap by Layout (Options.GapBuckets): they sum to
	// Count. Both are nil without a layout. Observation returns a copy.
	Buckets []uint64
	Layout  *GapBuckets
}

// Mean is Sum/Count, or 0 without gaps.
func (s ITLSummary) Mean() time.Duration {
	if s.Count == 0 {
		return 0
	}
	return s.Sum / time.Duration(s.Count)
}

// Observation is the measurement of one request. Durations are zero when
// the events that bound them did not happen (for example TTFT when no token
// arrived); the Has* fields tell zero from absent where that matters.
type Observation struct {
	Protocol Protocol

	// Timestamps as the host reported them (host clock). Received falls back
	// to UpstreamSent, Admitted to Received when the host did not set them.
	Received        time.Time
	Admitted        time.Time
	UpstreamSent    time.Time
	ResponseHeaders time.Time
	FirstToken      time.Time
	LastToken       time.Time
	End             time.Time

	// QueueTime is Received → Admitted.
	QueueTime time.Duration
	// TTFT is Received → FirstToken (proxy-side: includes queue time).
	TTFT time.Duration
	// UpstreamTTFT is UpstreamSent → FirstToken.
	UpstreamTTFT time.Duration
	// E2E is Received → End.
	E2E time.Duration
	// TPOT is (E2E − TTFT) / (OutputTokens − 1); zero unless HasTPOT.
	TPOT    time.Duration
	HasTTFT bool
	HasTPOT bool

	// TokenChunks is the number of chunks that carried at least one output
	// token; DecodeSteps is TokenChunks − 1 (0 when none).
	TokenChunks int
	DecodeSteps int
	// Chunks counts every parsed unit (SSE events, gRPC messages, the JSON
	// body) including those without tokens.
	Chunks int
	// ITL summarises the gaps between token-bearing chunks.
	ITL ITLSummary

	// OutputTokens is the final usage's completion tokens when the engine
	// reported usage, else CountedTokens; counted tokens also win when the
	// usage says 0 while the stream carried tokens. OutputTokensSource
	// says which it is.
	OutputTokens       int
	OutputTokensSource TokenSource
	// CountedTokens is what the stream itself showed: token ids where the
	// protocol carries them, otherwise one per non-empty text piece.
	CountedTokens int
	// PromptTokens comes from usage (0 when not reported).
	PromptTokens  int
	UsageReported bool
	// CompressedFrames counts gRPC messages that were compressed and so
	// counted as one token-bearing chunk each without being decoded.
	CompressedFrames int
	// FinishReason is the last finish reason the stream reported.
	FinishReason string
	// Complete is true when the protocol's end was seen ([DONE], gRPC
	// trailers, a whole JSON body).
	Complete bool
	// ResponseBytes counts body bytes fed to the observer.
	ResponseBytes int64
	// ContentEncoding is set when the HTTP body was compressed (gzip, br…):
	// it is then only counted (Protocol is ProtocolRaw), not parsed. Hosts
	// avoid this by asking upstreams for identity encoding.
	ContentEncoding string

	// HTTPStatus is the response status (0 when no response arrived).
	HTTPStatus int
	// GRPCStatus and GRPCMessage come from trailers (or trailers-only
	// headers); HasGRPCStatus tells a reported 0 from none.
	GRPCStatus    int
	GRPCMessage   string
	HasGRPCStatus bool

	// ErrorKind and Error describe the first failure; ErrorNone/"" when the
	// request succeeded.
	ErrorKind ErrorKind
	Error     string

	// Engine is the upstream's ground truth, when reported.
	Engine EngineTimes

	// Text and TokenIDs are the generated output so far, only when
	// Options.KeepOutput is set (the gateway uses them to continue a
	// preempted stream). Observation returns copies.
	Text     string
	TokenIDs []uint32
}

// OK reports whether the request completed without error.
func (o *Observation) OK() bool { return o.ErrorKind == ErrorNone }
