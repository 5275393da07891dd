package fakesdk

import (
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"
)

// Options configure a Stream. The zero value is usable.
type Options struct {
	// Properties answer GetProperty; "request.time" defaults to the time
	// the Stream was created, in the SDK's format.
	Properties map[string]string
	// Protocol is what StreamInfo().Protocol() reports; "" means "HTTP/1.1".
	Protocol string
	// RouteName and Cluster are reported by StreamInfo.
	RouteName, Cluster string
	// Secrets answer SecretManager().GetGenericSecret.
	Secrets map[string]string
	// Timeout bounds how long a drive call waits for an asynchronous
	// Continue or SendLocalReply; zero means 10 seconds.
	Timeout time.Duration
	// Now is the clock for "request.time"; nil means time.Now.
	Now func() time.Time
}

// LocalReply is a reply the filter sent instead of the upstream's.
type LocalReply struct {
	Code       int
	Body       string
	Headers    map[string][]string
	GRPCStatus int64
	Details    string
	// Phase is the callback in which the reply was sent.
	Phase string
	// Panic is true for the SDK's own 500 after an unrecovered panic.
	Panic bool
	// Reset is true when response headers had already gone downstream:
	// Envoy then resets the stream (RST_STREAM on HTTP/2) instead of
	// sending the reply.
	Reset bool
}

// Result is how one callback ended from Envoy's point of view.
type Result struct {
	// Status is the final status: the one returned, or for api.Running the
	// one passed to Continue (api.LocalReply after SendLocalReply).
	Status api.StatusType
	// Async is true when the filter returned api.Running.
	Async bool
	// Skipped is true when the stream had already ended (local reply or
	// destroy) and the filter was not called.
	Skipped bool
	// Destroyed is true when OnDestroy ran while the phase was held.
	Destroyed bool
	// TimedOut is true when no Continue or SendLocalReply came in time.
	TimedOut bool
}

type outcome struct {
	status api.StatusType
}

// Stream is one fake request through one filter instance. It implements
// api.FilterCallbackHandler; the filter is created by the factory given to
// NewStream.
type Stream struct {
	opts  Options
	start time.Time

	mu          sync.Mutex
	filter      api.StreamFilter
	dec, enc    process
	meta        map[string]map[string]interface{}
	state       map[string]string
	violations  []string
	panics      []string
	reply       *LocalReply
	destroyed   bool
	destroyCh   chan struct{}
	respStarted bool // response headers went downstream
	upstream    []byte
	downstream  []byte
	reqHeaders  *HeaderMap
	respHeaders *HeaderMap
	respTrailer *HeaderMap
	addData     [][]byte
	routeClears routeCounter
	lateCalls   int
	override    *Override
	// replyEncoded: a local reply sent while decoding ran through the
	// filter's encode callbacks (encodeReply); replyEncoding while it runs.
	replyEncoded, replyEncoding bool
}

var _ api.FilterCallbackHandler = (*Stream)(nil)

// NewStream creates a stream and the filter under test with
// factory(config, stream).
func NewStream(factory api.StreamFilterFactory, config interface{}, opts Options) *Stream {
	if opts.Timeout == 0 {
		opts.Timeout = 10 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	s := &Stream{
		opts:      opts,
		start:     opts.Now(),
		meta:      map[string]map[string]interface{}{},
		state:     map[string]string{},
		destroyCh: make(chan struct{}),
	}
	s.dec = process{s: s, dir: "Decode", done: make(chan outcome, 1)}
	s.enc = process{s: s, dir: "Encode", done: make(chan outcome, 1)}
	s.filter = factory(config, s)
	return s
}

// Filter returns the filter under test.
func (s *Stream) Filter() api.StreamFilter { return s.filter }

func (s *Stream) violate(msg string) {
	s.mu.Lock()
	s.violations = append(s.violations, msg)
	s.mu.Unlock()
}

// Violations lists breaches of the SDK's rules seen so far.
func (s *Stream) Violations() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.violations...)
}

// Panics lists panics that reached the SDK's own recovery.
func (s *Stream) Panics() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.panics...)
}

// LateCalls counts Continue/SendLocalReply calls after OnDestroy (the SDK
// panics on them; a careful filter makes none).
func (s *Stream) LateCalls() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lateCalls
}

// Reply returns the local reply, or nil.
func (s *Stream) Reply() *LocalReply {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.reply == nil {
		return nil
	}
	r := *s.reply
	return &r
}

// Upstream returns the request body forwarded upstream so far.
func (s *Stream) Upstream() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.upstream...)
}

// Downstream returns the response body forwarded to the client so far.
func (s *Stream) Downstream() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.downstream...)
}

// AddedData lists the data passed to AddData or InjectData.
func (s *Stream) AddedData() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]byte(nil), s.addData...)
}

// Metadata returns a copy of the dynamic metadata of namespace ns.
func (s *Stream) Metadata(ns string) map[string]interface{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]interface{}{}
	for k, v := range s.meta[ns] {
		out[k] = v
	}
	return out
}

// Ended reports whether the stream ended by local reply or destroy.
func (s *Stream) Ended() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ended()
}

func (s *Stream) ended() bool { return s.destroyed || s.reply != nil }

// process is one direction's FilterProcessCallbacks.
type process struct {
	s    *Stream
	dir  string
	cur  *phase // the phase in Go, nil when none
	done chan outcome
	// keep is a header phase kept open by StopAndBuffer until the
	// buffered data phase continues.
	keep      *phase
	buffering bool
	buffered  []byte
	// kept is data the filter answered StopAndBuffer for: sent on when
	// it continues, never handed to it again.
	kept []byte
}

var (
	_ api.DecoderFilterCallbacks = (*decoder)(nil)
	_ api.EncoderFilterCallbacks = (*process)(nil)
)

type decoder struct{ *process }

// SetUpstreamOverrideHost records the override; like Envoy it refuses a
// host that is not an IP address with a port.
func (d decoder) SetUpstreamOverrideHost(host string, strict bool) error {
	if _, err := netip.ParseAddrPort(host); err != nil {
		return fmt.Errorf("fakesdk: upstream override %q is not an IP address with a port", host)
	}
	s := d.s
	s.mu.Lock()
	defer s.mu.Unlock()
	s.override = &Override{Host: host, Strict: strict}
	return nil
}

// Override is an upstream host override the filter set.
type Override struct {
	Host   string
	Strict bool
}

// UpstreamOverride returns the last upstream host override, nil when none.
func (s *Stream) UpstreamOverride() *Override {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.override
}

// DecoderFilterCallbacks returns the request-direction callbacks.
func (s *Stream) DecoderFilterCallbacks() api.DecoderFilterCallbacks { return decoder{&s.dec} }

// EncoderFilterCallbacks returns the response-direction callbacks.
func (s *Stream) EncoderFilterCallbacks() api.EncoderFilterCallbacks { return &s.enc }

// finish ends the phase in Go with o; it panics like the SDK when there is
// none.
func (p *process) finish(what string, o outcome) {
	s := p.s
	s.mu.Lock()
	if s.destroyed {
		s.lateCalls++
		s.mu.Unlock()
		panic(errFilterDestroyed)
	}
	if p.cur == nil {
		s.violations = append(s.violations, what+" called with no "+p.dir+" phase in Go")
		s.mu.Unlock()
		panic("fakesdk: " + what + " with no phase in Go")
	}
	p.cur.closed.Store(true)
	p.cur = nil
	s.mu.Unlock()
	p.done <- o
}

// errFilterDestroyed is the SDK's panic value after OnDestroy.
const errFilterDestroyed = "golang filter has been destroyed"

// Continue ends a held phase.
func (p *process) Continue(status api.StatusType) {
	p.finish("Continue", outcome{status: status})
}

// SendLocalReply ends the phase and the stream with a reply.
func (p *process) SendLocalReply(code int, body string, headers map[string][]string, grpcStatus int64, details string) {
	p.sendReply(&LocalReply{Code: code, Body: body, Headers: headers, GRPCStatus: grpcStatus, Details: details})
}

func (p *process) sendReply(r *LocalReply) {
	s := p.s
	s.mu.Lock()
	if p.cur != nil {
		r.Phase = p.cur.name
	}
	r.Reset = s.respStarted
	if s.reply == nil && !s.destroyed && p.cur != nil {
		s.reply = r
	}
	s.mu.Unlock()
	p.finish("SendLocalReply", outcome{status: api.LocalReply})
}

// RecoverPanic recovers a panic like the SDK: destroy panics are logged,
// others end the stream with the SDK's 500 reply.
func (p *process) RecoverPanic() {
	e := recover()
	if e == nil {
		return
	}
	p.s.sdkRecover(p, e)
}

func (s *Stream) sdkRecover(p *process, e interface{}) {
	msg := fmt.Sprint(e)
	if msg == errFilterDestroyed {
		api.LogInfof("http: panic serving: %v (Client may cancel the request prematurely)", e)
		return
	}
	s.mu.Lock()
	s.panics = append(s.panics, msg)
	inGo := p != nil && p.cur != nil && !s.destroyed
	s.mu.Unlock()
	api.LogErrorf("http: panic serving: %v", e)
	if inGo {
		// Like Envoy's Filter::sendPanicReply: a 500 whose gRPC status is
		// OK (0), which is why filters must recover their own panics on
		// gRPC streams.
		p.sendReply(&LocalReply{Code: 500, Body: "error happened in filter\r\n", GRPCStatus: 0, Panic: true})
	}
}

// AddData records data added while processing headers or trailers.
func (p *process) AddData(data []byte, isStreaming bool) {
	p.s.mu.Lock()
	p.s.addData = append(p.s.addData, append([]byte(nil), data...))
	p.s.mu.Unlock()
}

// InjectData records injected data.
func (p *process) InjectData(data []byte) { p.AddData(data, true) }
