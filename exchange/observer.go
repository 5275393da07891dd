package exchange

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/llmesh/llmesh/scheduler"
)

// Limits and defaults of an Observer.
const (
	// defaultMaxEventBytes bounds one SSE event (all its data lines) and a
	// non-streaming JSON body.
	defaultMaxEventBytes = 1 << 20
	// defaultMaxFrameBytes bounds one gRPC message; gRPC's own default
	// receive limit is 4 MiB.
	defaultMaxFrameBytes = 4 << 20
	// DefaultMaxITLSamples is how many inter-chunk gaps are kept per request.
	DefaultMaxITLSamples = 512
)

// Parse errors Observe returns (wrapped with the specific limit or cause).
// They are also recorded in the Observation.
var (
	ErrEventTooLarge = errors.New("filter: event too large")
	ErrFrameTooLarge = errors.New("filter: grpc frame too large")
	ErrMalformed     = errors.New("filter: malformed response")
)

// Options configure an Observer for one request. The zero value observes a
// response whose protocol is picked from its content-type, with default
// limits and without keeping output.
type Options struct {
	// Protocol forces the framing; ProtocolAuto (zero) picks it from the
	// response's content-type in ResponseHeaders.
	Protocol Protocol
	// GRPCMethod is the request's :path (e.g. "/llm.v1.Generation/Generate");
	// it selects the built-in extractor when Extractor is nil.
	GRPCMethod string
	// Extractor decodes gRPC messages; nil means extractorFor(GRPCMethod).
	Extractor Extractor
	// MaxEventBytes bounds one SSE event and a JSON body; 0 means
	// defaultMaxEventBytes.
	MaxEventBytes int
	// MaxFrameBytes bounds one gRPC message; 0 means defaultMaxFrameBytes.
	MaxFrameBytes int
	// MaxITLSamples is how many gaps ITL.Samples keeps; 0 means
	// DefaultMaxITLSamples, negative keeps none (the summary is always kept).
	MaxITLSamples int
	// GapBuckets, when set, makes the Observer count every inter-chunk gap
	// into ITLSummary.Buckets by this layout (nil: no per-bucket counts;
	// the summary's count, sum, min and max still cover every gap).
	GapBuckets *GapBuckets
	// KeepOutput keeps the generated text and token ids (Output,
	// Observation.Text/TokenIDs), for continuing a preempted stream.
	KeepOutput bool
	// GeneralScan turns off the SSE fast path that recognises events of
	// the stream's repeating chunk shape without a JSON scan, so every
	// event takes the general scanner. The observation is the same either
	// way (tests check it); this exists for A/B measurement and diagnosis.
	GeneralScan bool
}

// Observer measures one request's response stream. Feed it the host's
// events in order: MarkReceived, MarkAdmitted, MarkUpstreamSent,
// ResponseHeaders, Observe for every body chunk, Trailers, and Finish once.
// Any of them may be skipped when the host has no such event. Reuse an
// Observer with Reset (or GetObserver/PutObserver); it is not safe for
// concurrent use.
type Observer struct {
	opts      Options
	proto     Protocol
	extractor Extractor
	obs       Observation
	finished  bool
	// stopped is set after a fatal parse error: the rest is only counted.
	stopped bool

	samples  []time.Duration
	buckets  []uint64 // per Options.GapBuckets; nil without
	text     []byte
	tokenIDs []uint32

	sse   sseState
	tmpl  chunkTemplate
	grpc  grpcState
	chunk Chunk
	body  []byte
	// bodyStart is when the first JSON body byte arrived: a non-streaming
	// response's "first token" is its first byte.
	bodyStart time.Time
}

var observerPool = sync.Pool{New: func() any { return new(Observer) }}

// GetObserver returns a reset Observer from a pool.
func GetObserver(opts Options) *Observer {
	o := observerPool.Get().(*Observer)
	o.Reset(opts)
	return o
}

// PutObserver returns o to the pool; o must not be used afterwards.
func PutObserver(o *Observer) {
	if o == nil {
		return
	}
	// Very large buffers (a long event, a big frame) are dropped rather
	// than pinned in the pool.
	if cap(o.body) > 4*defaultMaxEventBytes || cap(o.grpc.buf) > 4*defaultMaxEventBytes ||
		cap(o.sse.data) > 4*defaultMaxEventBytes || cap(o.tmpl.prefix)+cap(o.tmpl.suffix) > 4*defaultMaxEventBytes {
		return
	}
	observerPool.Put(o)
}

// NewObserver returns an Observer for one request.
func NewObserver(opts Options) *Observer {
	o := new(Observer)
	o.Reset(opts)
	return o
}

// Reset prepares o for a new request, keeping its buffers.
func (o *Observer) Reset(opts Options) {
	if opts.MaxEventBytes <= 0 {
		opts.MaxEventBytes = defaultMaxEventBytes
	}
	if opts.MaxFrameBytes <= 0 {
		opts.MaxFrameBytes = defaultMaxFrameBytes
	}
	if opts.MaxITLSamples == 0 {
		opts.MaxITLSamples = DefaultMaxITLSamples
	}
	o.opts = opts
	o.proto = opts.Protocol
	o.extractor = opts.Extractor
	if o.extractor == nil {
		o.extractor = extractorFor(opts.GRPCMethod)
	}
	o.obs = Observation{Protocol: opts.Protocol}
	o.finished = false
	o.stopped = false
	o.samples = o.samples[:0]
	o.buckets = o.buckets[:0]
	if opts.GapBuckets != nil {
		o.buckets = append(o.buckets, make([]uint64, opts.GapBuckets.Len())...)
	}
	o.text = o.text[:0]
	o.tokenIDs = o.tokenIDs[:0]
	o.sse.reset()
	o.tmpl.reset()
	o.grpc.reset()
	o.chunk.reset()
	o.body = o.body[:0]
	o.bodyStart = time.Time{}
}

// MarkReceived records when the host received the request.
func (o *Observer) MarkReceived(t time.Time) { o.obs.Received = t }

// MarkAdmitted records when the scheduler admitted the request.
func (o *Observer) MarkAdmitted(t time.Time) { o.obs.Admitted = t }

// MarkUpstreamSent records when the request went to the upstream.
func (o *Observer) MarkUpstreamSent(t time.Time) { o.obs.UpstreamSent = t }

// ResponseHeaders records the response status and headers. It picks the
// protocol when Options.Protocol is ProtocolAuto, records an HTTP error
// status, and reads grpc-status from a trailers-only gRPC response.
func (o *Observer) ResponseHeaders(t time.Time, status int, h Headers) {
	if h == nil {
		h = noHeaders
	}
	o.obs.ResponseHeaders = t
	o.obs.HTTPStatus = status
	ct := h.Get("content-type")
	if o.proto == ProtocolAuto {
		o.proto = protocolOf(ct)
		o.obs.Protocol = o.proto
	}
	if o.proto == ProtocolGRPC && GRPCKindOf(ct) == GRPCWeb {
		o.grpc.web = true
	}
	if enc := strings.TrimSpace(h.Get("content-encoding")); enc != "" && !strings.EqualFold(enc, "identity") && o.proto != ProtocolGRPC {
		// A compressed HTTP body cannot be parsed without decompressing it;
		// hosts should ask upstreams for identity encoding. The bytes are
		// still counted.
		o.proto = ProtocolRaw
		o.obs.Protocol = ProtocolRaw
		o.obs.ContentEncoding = enc
	}
	if status >= 400 {
		o.SetError(ErrorHTTPStatus, "upstream HTTP status "+strconv.Itoa(status))
	}
	if o.proto == ProtocolGRPC && h.Get("grpc-status") != "" {
		o.readTrailers(h)
	}
}

func protocolOf(contentType string) Protocol {
	ct := strings.ToLower(strings.TrimSpace(contentType))
	switch {
	case strings.HasPrefix(ct, "text/event-stream"):
		return ProtocolSSE
	case GRPCKindOf(ct).Framed():
		// gRPC and binary gRPC-Web; gRPC-Web-text (base64) is not
		// decoded: its bytes are only counted (ProtocolRaw).
		return ProtocolGRPC
	case strings.HasPrefix(ct, "application/json"):
		return ProtocolJSON
	}
	return ProtocolRaw
}

// Observe feeds one response body chunk that arrived at t. Chunk
// boundaries may fall anywhere. It returns the first parse error met in
// this chunk (the Observation keeps the first of the whole request); the
// host keeps proxying regardless. After ErrEventTooLarge or
// ErrFrameTooLarge only bytes are counted. Observe does not retain chunk.
func (o *Observer) Observe(t time.Time, chunk []byte) error {
	o.obs.ResponseBytes += int64(len(chunk))
	if o.stopped || len(chunk) == 0 {
		return nil
	}
	if o.proto == ProtocolAuto {
		// No headers were reported: guess from the first byte.
		o.proto = guessProtocol(chunk)
		o.obs.Protocol = o.proto
	}
	switch o.proto {
	case ProtocolSSE:
		return o.observeSSE(t, chunk)
	case ProtocolGRPC:
		return o.observeGRPC(t, chunk)
	case ProtocolJSON:
		return o.observeJSON(t, chunk)
	}
	return nil
}

// guessProtocol is the fallback for hosts that feed a body without headers.
func guessProtocol(b []byte) Protocol {
	switch b[0] {
	case 0, 1:
		return ProtocolGRPC
	case '{', '[', ' ', '\n':
		return ProtocolJSON
	case 'd', 'e', ':', 'i', 'r':
		return ProtocolSSE
	}
	return ProtocolRaw
}

// Trailers records response trailers: grpc-status, grpc-message and the
// engine's llmesh-engine-* ground truth.
func (o *Observer) Trailers(t time.Time, h Headers) {
	if h == nil {
		return
	}
	_ = t
	o.readTrailers(h)
}

func (o *Observer) readTrailers(h Headers) {
	if s := h.Get("grpc-status"); s != "" {
		code, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil {
			code = 2 // Unknown, as grpc-go treats an unparsable status.
		}
		o.obs.GRPCStatus = code
		o.obs.HasGRPCStatus = true
		o.obs.GRPCMessage = percentDecode(h.Get("grpc-message"))
		if o.proto == ProtocolGRPC {
			o.obs.Complete = true
		}
		if code != 0 {
			msg := "grpc-status " + strconv.Itoa(code)
			if o.obs.GRPCMessage != "" {
				msg += ": " + o.obs.GRPCMessage
			}
			o.SetError(ErrorGRPCStatus, msg)
		}
	}
	e := &o.obs.Engine
	setNS := func(dst *time.Time, key string) {
		if v := h.Get(key); v != "" {
			if ns, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil && ns > 0 {
				*dst = time.Unix(0, ns)
				e.Seen = true
			}
		}
	}
	setNS(&e.Arrival, "llmesh-engine-arrival-ns")
	setNS(&e.FirstScheduled, "llmesh-engine-first-scheduled-ns")
	setNS(&e.FirstToken, "llmesh-engine-first-token-ns")
	setNS(&e.Finish, "llmesh-engine-finish-ns")
	if v := h.Get("llmesh-engine-preemptions"); v != "" {
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
			e.Preemptions = n
			e.Seen = true
		}
	}
}

// percentDecode decodes grpc-message's percent-encoding; invalid escapes
// are kept verbatim.
func percentDecode(s string) string {
	if strings.IndexByte(s, '%') < 0 {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			hi, ok1 := unhex(s[i+1])
			lo, ok2 := unhex(s[i+2])
			if ok1 && ok2 {
				b = append(b, hi<<4|lo)
				i += 2
				continue
			}
		}
		b = append(b, s[i])
	}
	return string(b)
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// SetError records a failure unless one is already recorded (the first
// failure is the cause; later ones are consequences).
func (o *Observer) SetError(kind ErrorKind, msg string) {
	if kind == ErrorNone {
		return
	}
	if o.obs.ErrorKind == ErrorNone {
		o.obs.ErrorKind = kind
		o.obs.Error = msg
	}
}

// errorKindOf maps a host's stream-ending error to an ErrorKind: nil →
// ErrorNone, context cancellation → ErrorCancelled, scheduler.ErrPreempted →
// ErrorPreempted, an error whose Timeout() is true (a stalled upstream, a
// deadline) → ErrorTimeout, anything else → ErrorUpstreamReset.
func errorKindOf(err error) ErrorKind {
	var to interface{ Timeout() bool }
	switch {
	case err == nil:
		return ErrorNone
	case errors.Is(err, scheduler.ErrPreempted):
		return ErrorPreempted
	case errors.Is(err, context.Canceled), errors.Is(err, scheduler.ErrCancelled):
		return ErrorCancelled
	case errors.As(err, &to) && to.Timeout():
		return ErrorTimeout
	}
	return ErrorUpstreamReset
}

// Finish ends the observation at t. cause is nil for a clean end of the
// response body; otherwise it is classified with errorKindOf. A clean end
// without the protocol's end marker is recorded as ErrorTruncated. Later
// calls are ignored.
func (o *Observer) Finish(t time.Time, cause error) {
	if o.finished {
		return
	}
	o.finished = true
	o.obs.End = t
	if cause != nil {
		o.SetError(errorKindOf(cause), cause.Error())
	}
	if o.proto == ProtocolJSON && !o.stopped && len(o.body) > 0 {
		o.finishJSON()
	}
	if cause == nil && !o.obs.Complete && o.obs.ErrorKind == ErrorNone {
		switch o.proto {
		case ProtocolSSE:
			o.SetError(ErrorTruncated, "event stream ended without [DONE]")
		case ProtocolGRPC:
			o.SetError(ErrorTruncated, "gRPC stream ended without trailers")
		case ProtocolJSON:
			o.SetError(ErrorTruncated, "JSON body ended early")
		}
	}
	if o.proto == ProtocolRaw {
		o.obs.Complete = cause == nil
	}
}

// Progress is the request's progress in the scheduler's terms; cheap enough
// to call per chunk.
func (o *Observer) Progress() scheduler.Progress {
	return scheduler.Progress{FirstToken: o.obs.TokenChunks > 0, Tokens: o.obs.CountedTokens}
}

// Protocol is the framing in use (ProtocolAuto until response headers or a
// first chunk decided it).
func (o *Observer) Protocol() Protocol { return o.proto }

// Output returns the generated text and token ids so far (only with
// Options.KeepOutput). The slices are o's buffers: valid until the next
// call on o.
func (o *Observer) Output() (text []byte, tokenIDs []uint32) { return o.text, o.tokenIDs }

// Observation computes the measurement so far. It may be called before
// Finish (then End and E2E are zero and the observation is partial).
func (o *Observer) Observation() Observation {
	ob := o.obs
	if ob.Received.IsZero() {
		ob.Received = ob.UpstreamSent
	}
	if ob.Admitted.IsZero() {
		ob.Admitted = ob.Received
	}
	ob.QueueTime = nonNeg(ob.Admitted.Sub(ob.Received))
	if ob.TokenChunks > 0 {
		ob.HasTTFT = !ob.Received.IsZero()
		if ob.HasTTFT {
			ob.TTFT = nonNeg(ob.FirstToken.Sub(ob.Received))
		}
		if !ob.UpstreamSent.IsZero() {
			ob.UpstreamTTFT = nonNeg(ob.FirstToken.Sub(ob.UpstreamSent))
		}
		ob.DecodeSteps = ob.TokenChunks - 1
	}
	if !ob.End.IsZero() && !ob.Received.IsZero() {
		ob.E2E = nonNeg(ob.End.Sub(ob.Received))
	}
	ob.OutputTokensSource = outputSource(&ob)
	if ob.OutputTokensSource == TokensFromStream {
		ob.OutputTokens = ob.CountedTokens
	}
	if ob.HasTTFT && ob.E2E > 0 && ob.OutputTokens > 1 && ob.Protocol != ProtocolJSON {
		ob.TPOT = (ob.E2E - ob.TTFT) / time.Duration(ob.OutputTokens-1)
		ob.HasTPOT = true
	}
	if o.opts.MaxITLSamples > 0 {
		ob.ITL.Samples = append([]time.Duration(nil), o.samples...)
	}
	if o.opts.GapBuckets != nil {
		ob.ITL.Layout = o.opts.GapBuckets
		ob.ITL.Buckets = append([]uint64(nil), o.buckets...)
	}
	if o.opts.KeepOutput {
		ob.Text = string(o.text)
		ob.TokenIDs = append([]uint32(nil), o.tokenIDs...)
	}
	return ob
}

// outputSource decides where OutputTokens comes from: the engine's usage
// when it reported one, unless it reported 0 while the stream carried
// tokens (a proto3 field the engine never set reads as 0: trusting it
// would turn a streamed answer into no output and no TPOT).
func outputSource(ob *Observation) TokenSource {
	if ob.UsageReported && (ob.OutputTokens > 0 || ob.CountedTokens == 0) {
		return TokensFromUsage
	}
	return TokensFromStream
}

func nonNeg(d time.Duration) time.Duration {
	if d < 0 {
		return 0
	}
	return d
}

// tokenChunk records one chunk that carried n ≥ 1 output tokens at t.
func (o *Observer) tokenChunk(t time.Time, n int) {
	ob := &o.obs
	if ob.TokenChunks == 0 {
		ob.FirstToken = t
	} else {
		gap := nonNeg(t.Sub(ob.LastToken))
		s := &ob.ITL
		if s.Count == 0 || gap < s.Min {
			s.Min = gap
		}
		if gap > s.Max {
			s.Max = gap
		}
		s.Count++
		s.Sum += gap
		if len(o.samples) < o.opts.MaxITLSamples {
			o.samples = append(o.samples, gap)
		}
		if o.opts.GapBuckets != nil {
			o.buckets[o.opts.GapBuckets.Index(gap)]++
		}
	}
	ob.LastToken = t
	ob.TokenChunks++
	ob.CountedTokens += n
}

// fail records a fatal parse error, stops parsing and returns it.
func (o *Observer) fail(kind ErrorKind, err error) error {
	o.stopped = true
	o.SetError(kind, err.Error())
	return err
}

// malformed records a non-fatal parse error (one bad event) and returns it.
func (o *Observer) malformed(format string, args ...any) error {
	err := fmt.Errorf("%w: "+format, append([]any{ErrMalformed}, args...)...)
	o.SetError(ErrorMalformed, err.Error())
	return err
}

func errBodyTooLarge(limit int) error {
	return fmt.Errorf("%w: JSON body exceeds max_event_bytes %d", ErrEventTooLarge, limit)
}
