package envoy

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/filter"
	"github.com/llmesh/llmesh/filter/relocate"
	"github.com/llmesh/llmesh/scheduler"
)

// streamFilter is the filter of one request. Envoy calls its callbacks on
// one worker thread; the only other goroutine is the admission goroutine of
// a held request (see doc.go).
type streamFilter struct {
	cb   api.FilterCallbackHandler
	cfg  *FilterConfig
	pool *config.Pool
	// routeClass is the class fixed by per-route config or the listener's
	// route, "" when none.
	routeClass string
	clk        clock.Clock
	m          *metrics

	// Set in DecodeHeaders, then read-only (the admission goroutine reads
	// them after it was started).
	grpc     bool
	path     string
	reqID    string
	class    filter.Class
	received time.Time
	affinity string // the pool's affinity header value, "" when none

	// passthrough: not a generation call on its route (filter.IsGeneration):
	// proxied without admission and recorded apart. Set in DecodeHeaders.
	passthrough bool

	// Worker-thread state.
	obs        *filter.Observer
	httpPlan   *relocate.HTTPPlan
	grpcPlan   *relocate.GRPCPlan
	grpcRW     *relocate.GRPCRewriter
	relocOut   []byte
	decoding   bool      // the request is being buffered for relocation
	guard      guardKind // the body is held for the engine priority guard
	guardMode  filter.EnginePriority
	guardBuf   []byte // the body collected so far (not buffered by Envoy)
	grpcEnc    string
	sizing     bool // the JSON body is being buffered to read model and sizes
	reqHV      headers
	peer       netip.Addr
	model      string
	modelRead  bool // noteModel ran
	promptToks int
	maxToks    int
	observed   bool                    // obs received response headers
	finished   bool                    // obs.Finish was called
	completed  bool                    // OnStreamComplete ran
	progress   filter.ProgressReporter // reports to the lease
	preemptCh  <-chan struct{}

	// sizeBuf holds a JSON body read before admission (for its size, or
	// to relocate a prompt into it) that Envoy handed over before its end
	// (it does so when request trailers follow): the bytes stay in the
	// filter (StopNoBuffer), because Envoy would otherwise inject them,
	// and continue the held headers, at once.
	sizeBuf []byte

	// lease is set by the admission goroutine before it continues the
	// request; encode callbacks read it.
	lease atomic.Pointer[leaseBox]

	mu        sync.Mutex // guards the fields below
	holding   bool       // the admission goroutine owns the decode phase
	destroyed bool
	cancel    context.CancelFunc
	admitted  time.Time
	released  bool
	outcome   scheduler.Outcome
	preempted bool
}

// leaseBox lets an interface value live behind an atomic.Pointer.
type leaseBox struct{ scheduler.Lease }

var _ api.StreamFilter = (*streamFilter)(nil)

func newStreamFilter(m *merged, cb api.FilterCallbackHandler, clk clock.Clock) *streamFilter {
	f := &streamFilter{cb: cb, cfg: m.FilterConfig, pool: m.pool, clk: clk, m: m.metrics}
	if m.class != nil {
		f.routeClass = m.class.Name
	}
	return f
}

// headers adapts an SDK header map to the core's lookups; valid only
// during the callback that received the map. The trusted marker is removed
// from the map before the request goes upstream, so its values live here
// for classifying again once the body was read.
type headers struct {
	h      api.HeaderMap
	marker string   // lower-cased marker header name, "" when none
	mvals  []string // its values as the client sent them
}

func (h headers) Get(name string) string {
	if h.marker != "" && strings.EqualFold(name, h.marker) {
		if len(h.mvals) == 0 {
			return ""
		}
		return h.mvals[0]
	}
	v, _ := h.h.Get(name)
	return v
}

func (h headers) Values(name string) []string {
	if h.marker != "" && strings.EqualFold(name, h.marker) {
		return h.mvals
	}
	return h.h.Values(name)
}

// stripMarker removes the trusted marker header from the request before
// Envoy forwards it: the marker is a shared secret between trusted hops,
// and neither the engine nor anything behind it may learn it. The returned
// view still answers with the marker's values for classification.
func (f *streamFilter) stripMarker(h api.RequestHeaderMap) headers {
	hv := headers{h: h}
	if f.cfg.Mesh == nil {
		return hv
	}
	name := f.cfg.Mesh.Classification.TrustedMarkerHeader
	if name == "" {
		return hv
	}
	hv.marker = name
	if vs := h.Values(name); len(vs) > 0 {
		hv.mvals = append([]string(nil), vs...)
		h.Del(name)
	}
	return hv
}

// startTime is when Envoy received the request, falling back to now.
func (f *streamFilter) startTime() time.Time {
	if v, err := f.cb.GetProperty("request.time"); err == nil {
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			return t
		}
	}
	return f.clk.Now()
}

func (f *streamFilter) DecodeHeaders(h api.RequestHeaderMap, endStream bool) (status api.StatusType) {
	defer f.recoverCallback(f.cb.DecoderFilterCallbacks(), &status)
	f.m.requests.Increment(1)
	f.received = f.startTime()
	f.path = h.Path()
	ct, _ := h.Get("content-type")
	f.grpc = strings.HasPrefix(ct, "application/grpc")
	if id, ok := h.Get("x-request-id"); ok && id != "" {
		f.reqID = id
	} else {
		f.reqID = f.path + "@" + strconv.FormatInt(f.received.UnixNano(), 10)
	}
	hv := f.stripMarker(h)
	var genPaths []string // the route's generation paths; nil: the defaults
	if f.cfg.Listener != nil {
		if r := f.cfg.Listener.Route(f.path, hv.Get, f.grpc); r != nil {
			genPaths = r.Generation
		}
	}
	f.passthrough = !filter.IsGeneration(genPaths, h.Method(), f.path)
	if f.routeClass == "" && f.cfg.Listener != nil {
		if r := f.cfg.Listener.Route(f.path, hv.Get, f.grpc); r != nil {
			if r.Pool != nil && f.pool == f.cfg.Pool {
				f.pool = r.Pool
			}
			if r.Class != nil {
				f.routeClass = r.Class.Name
			}
		}
	}
	peer, _ := netip.ParseAddrPort(f.cb.StreamInfo().DownstreamRemoteAddress())
	f.peer = peer.Addr()
	f.classify(hv)
	if f.pool != nil && f.pool.AffinityHeader != "" {
		f.affinity = hv.Get(f.pool.AffinityHeader)
	}

	// ITL samples feed only the OpenTelemetry histogram; without a recorder
	// the summary is enough. Pooled observers reuse the sample buffer.
	opts := filter.Options{MaxITLSamples: -1}
	if rec := f.cfg.rt.recorder(f.cfg.Mesh); rec != nil {
		opts.MaxITLSamples = 0
		// Every gap reaches the histogram, however long the stream.
		if gb, ok := rec.(interface{ GapBuckets() *filter.GapBuckets }); ok {
			opts.GapBuckets = gb.GapBuckets()
		}
	}
	if f.grpc {
		opts.GRPCMethod = f.path
	}
	f.obs = filter.GetObserver(opts)
	f.obs.MarkReceived(f.received)

	// The body is read before admission when the config needs the model
	// (classification rules) or the request's size (token capacity): an
	// OpenAI JSON body, or the message of a gRPC generation the core sizes
	// (llm.v1, vLLM), as the gateway sizes it.
	sizable := strings.HasPrefix(ct, "application/json") && !f.grpc ||
		f.grpc && (f.path == filter.MethodLLMV1 || f.path == filter.MethodVLLM)
	wantBody := f.cfg.needBody && !endStream && sizable
	if done, st := f.planPriorityGuard(h, hv, ct, endStream); done {
		return st
	}
	if rel := f.cfg.rt.reloc; rel != nil {
		if done, st := f.planRelocation(h, hv, endStream); done {
			if st == api.StopAndBuffer {
				f.sizing, f.reqHV = wantBody, hv
			}
			return st
		}
	}
	if wantBody && f.grpcRW == nil {
		// The header map stays valid until the buffered DecodeData. (A
		// relocated gRPC message streams through the rewriter instead.)
		f.sizing, f.reqHV = true, hv
		return api.StopAndBuffer
	}
	return f.admit()
}

// noteModel reads the model for the Record from the first request chunk
// when it holds the whole JSON body or the first gRPC message, as the
// gateway records it; a body read before admission (readBody) sets it
// too. It runs once per request, on the request path only.
func (f *streamFilter) noteModel(b []byte, endStream bool) {
	f.modelRead = true
	if f.model != "" || f.obs == nil || (!f.grpc && !endStream) {
		return
	}
	f.model = filter.RequestModel(f.path, b, f.grpc)
}

// classify picks the request's class from trusted configuration and the
// request (model only once the body was read).
func (f *streamFilter) classify(hv headers) {
	f.class = f.cfg.classifier.Classify(filter.RequestInfo{
		Path: f.path, Model: f.model, RouteClass: f.routeClass, Peer: f.peer, Headers: hv,
	}).Class
}

// readBody reads the model and sizes of a buffered request
// (filter.ReadRequestMeta), then classifies again with the model. A body
// it cannot read leaves them unknown.
func (f *streamFilter) readBody(body []byte) {
	f.sizing = false
	hv := f.reqHV
	f.reqHV = headers{}
	// The core reads it as the gateway does (sizes are estimates: the
	// model's tokenizer is not at hand).
	m := filter.ReadRequestMeta(f.path, body, f.grpc)
	if m.Model != "" {
		f.model = m.Model
	}
	f.maxToks, f.promptToks = m.MaxTokens, m.PromptTokens
	if f.model != "" && hv.h != nil {
		f.classify(hv)
	}
}

// admit starts admission: pass through without a scheduler, otherwise hold
// the request (api.Running) until the admission goroutine continues it.
func (f *streamFilter) admit() api.StatusType {
	adm, err := f.cfg.rt.admitter(f.cfg.Mesh)
	if err != nil {
		f.m.unavailable.Increment(1)
		api.LogErrorf("llmesh: scheduler unavailable: %v", err)
		return f.reply(f.cb.DecoderFilterCallbacks(), filter.ReplyFor(fmtErr(scheduler.ErrUnavailable, err)))
	}
	if adm == nil || f.passthrough {
		// Not a generation call (model list, health…): never queued.
		f.obs.MarkAdmitted(f.received)
		return api.Continue
	}
	req := scheduler.Request{ID: f.reqID, Pool: f.pool.Name, Class: f.class.Name, Arrival: f.received,
		PromptTokens: f.promptToks, MaxTokens: f.maxToks, Affinity: f.affinity}
	ctx, cancel := context.WithCancel(context.Background())
	f.mu.Lock()
	f.holding = true
	f.cancel = cancel
	f.mu.Unlock()
	f.m.queued.Increment(1)
	go f.hold(ctx, cancel, adm, req, f.cb.DecoderFilterCallbacks())
	return api.Running
}

// hold runs on the admission goroutine. Its last call is exactly one
// Continue or SendLocalReply, or none when the stream was destroyed.
func (f *streamFilter) hold(ctx context.Context, cancel context.CancelFunc, adm scheduler.Admitter, req scheduler.Request, dcb api.DecoderFilterCallbacks) {
	defer dcb.RecoverPanic() // last resort: only a panic of Continue itself reaches it
	defer cancel()
	ended := false // Continue or SendLocalReply was called
	defer func() {
		e := recover()
		if e == nil {
			return
		}
		if ended {
			// Continue or SendLocalReply panicked (the stream went away
			// meanwhile): the SDK's recovery knows these panics.
			panic(e)
		}
		f.m.panics.Increment(1)
		api.LogErrorf("llmesh: panic while admitting: %v\n%s", e, debug.Stack())
		ended = true
		f.reply(dcb, panicReply())
	}()
	lease, err := safeAdmit(ctx, adm, req)
	now := f.clk.Now()
	f.mu.Lock()
	f.holding = false
	destroyed := f.destroyed
	f.cancel = nil
	if err == nil && !destroyed {
		f.admitted = now
		f.lease.Store(&leaseBox{lease})
	}
	f.mu.Unlock()
	f.m.queued.Increment(-1)
	switch {
	case destroyed:
		// OnDestroy already ran: the stream is gone and Continue would
		// panic. An admission that raced with it is given back.
		if err == nil {
			lease.Release(scheduler.Cancelled)
		}
		f.m.cancelledQueued.Increment(1)
		return
	case err != nil:
		f.countAdmitError(err)
		ended = true
		f.reply(dcb, filter.ReplyFor(err))
		return
	}
	f.m.admitted.Increment(1)
	f.m.inflight.Increment(1)
	f.routeToLease(dcb, lease)
	ended = true
	dcb.Continue(api.Continue)
}

// safeAdmit turns a panic in the scheduler into an error, so that the
// reply is ours (with a real gRPC status) rather than the SDK's panic 500.
func safeAdmit(ctx context.Context, adm scheduler.Admitter, req scheduler.Request) (l scheduler.Lease, err error) {
	defer func() {
		if e := recover(); e != nil {
			api.LogErrorf("llmesh: panic in scheduler Admit: %v", e)
			l, err = nil, fmt.Errorf("%w: %v", errAdmitPanic, e)
		}
	}()
	return adm.Admit(ctx, req)
}

var errAdmitPanic = errors.New("scheduler panicked")

func (f *streamFilter) countAdmitError(err error) {
	if errors.Is(err, errAdmitPanic) {
		f.m.panics.Increment(1)
		return
	}
	switch {
	case errors.Is(err, scheduler.ErrQueueFull):
		f.m.queueFull.Increment(1)
	case errors.Is(err, scheduler.ErrUnavailable):
		f.m.unavailable.Increment(1)
	case errors.Is(err, scheduler.ErrCancelled):
		f.m.cancelledQueued.Increment(1)
	default:
		f.m.rejected.Increment(1)
	}
}

func (f *streamFilter) DecodeData(b api.BufferInstance, endStream bool) (status api.StatusType) {
	defer f.recoverCallback(f.cb.DecoderFilterCallbacks(), &status)
	if !f.modelRead {
		f.noteModel(b.Bytes(), endStream)
	}
	switch {
	case f.guard != guardNone:
		return f.guardBody(b, endStream)
	case f.decoding:
		return f.relocateBody(b, endStream)
	case f.sizing:
		if !endStream {
			f.sizeBuf = append(f.sizeBuf, b.Bytes()...)
			return api.StopNoBuffer
		}
		body := b.Bytes()
		if f.sizeBuf != nil {
			body = append(f.sizeBuf, body...)
			f.sizeBuf = nil
			if err := b.Set(body); err != nil {
				return f.relocationFailed(f.cb.DecoderFilterCallbacks(), err)
			}
		}
		f.readBody(body)
		return f.admit()
	}
	// A request still sending its body is stopped here when preempted:
	// the upstream has not answered, so the client gets the retryable
	// reply, not a reset, and the slot is free without waiting for the
	// upstream's first byte (the gateway cancels at once too).
	if f.obs != nil && !f.finished {
		if st, stop := f.checkPreempt(f.cb.DecoderFilterCallbacks()); stop {
			return st
		}
	}
	return api.Continue
}

// DecodeTrailers refuses request trailers on a JSON body being relocated:
// Envoy would hand the buffered body on before the rewrite (OpenAI clients
// never send request trailers).
func (f *streamFilter) DecodeTrailers(api.RequestTrailerMap) (status api.StatusType) {
	defer f.recoverCallback(f.cb.DecoderFilterCallbacks(), &status)
	if f.guard != guardNone {
		return f.guardTrailers()
	}
	if f.httpPlan != nil {
		f.httpPlan, f.decoding = nil, false
		return f.relocationFailed(f.cb.DecoderFilterCallbacks(), errTrailers)
	}
	if f.sizing {
		// Envoy handed the body over before the trailers and the filter
		// kept it: read it, give it back to Envoy to send before the
		// trailers once the request continues, and admit.
		body := f.sizeBuf
		f.sizeBuf = nil
		f.readBody(body)
		if len(body) > 0 {
			f.cb.DecoderFilterCallbacks().AddData(body, false)
		}
		return f.admit()
	}
	return api.Continue
}

func (f *streamFilter) EncodeHeaders(h api.ResponseHeaderMap, endStream bool) (status api.StatusType) {
	defer f.recoverCallback(f.cb.EncoderFilterCallbacks(), &status)
	if f.obs == nil {
		return api.Continue
	}
	if st, stop := f.checkPreempt(f.cb.EncoderFilterCallbacks()); stop {
		return st
	}
	now := f.clk.Now()
	f.noteAdmitted()
	f.noteUpstreamSent()
	code, _ := h.Status()
	f.obs.ResponseHeaders(now, code, headers{h: h})
	f.observed = true
	if f.cfg.Mesh.Telemetry.ServerTiming {
		// Only the queue time is known now; gRPC gets the rest in trailers.
		obs := f.obs.Observation()
		if v := filter.ServerTiming(&obs); v != "" {
			h.Add("server-timing", v)
		}
	}
	if endStream {
		f.obs.Trailers(now, headers{h: h})
		f.finish(now, nil)
	}
	return api.Continue
}

// noteAdmitted copies the admission time into the observer on the worker
// thread (the observer is not shared with the admission goroutine).
func (f *streamFilter) noteAdmitted() {
	if f.lease.Load() == nil {
		return
	}
	f.mu.Lock()
	t := f.admitted
	f.mu.Unlock()
	f.obs.MarkAdmitted(t)
	if f.preemptCh == nil {
		f.preemptCh = f.lease.Load().Preempt()
	}
}

// noteUpstreamSent marks when the request went upstream, once a response
// shows it did: when the filter let it go (its admission, or its arrival
// when it was not held); the router's own send is not seen from the
// filter. Upstream TTFT is measured from there, as the gateway measures it
// from its send.
func (f *streamFilter) noteUpstreamSent() {
	t := f.received
	if f.lease.Load() != nil {
		f.mu.Lock()
		t = f.admitted
		f.mu.Unlock()
	}
	f.obs.MarkUpstreamSent(t)
}

// EncodeData is the hot path: one call per response chunk. It allocates
// nothing (see BenchmarkEncodeData).
func (f *streamFilter) EncodeData(b api.BufferInstance, endStream bool) (status api.StatusType) {
	defer f.recoverCallback(f.cb.EncoderFilterCallbacks(), &status)
	if f.obs == nil || f.finished {
		return api.Continue
	}
	if st, stop := f.checkPreempt(f.cb.EncoderFilterCallbacks()); stop {
		return st
	}
	now := f.clk.Now()
	if err := f.obs.Observe(now, b.Bytes()); err != nil {
		// Returned once; the response is proxied regardless.
		f.m.observeErrors.Increment(1)
	}
	if lb := f.lease.Load(); lb != nil {
		f.progress.Report(lb.Lease, f.obs)
	}
	if endStream {
		f.finish(now, nil)
	}
	return api.Continue
}

func (f *streamFilter) EncodeTrailers(h api.ResponseTrailerMap) (status api.StatusType) {
	defer f.recoverCallback(f.cb.EncoderFilterCallbacks(), &status)
	if f.obs == nil || f.finished {
		return api.Continue
	}
	now := f.clk.Now()
	f.obs.Trailers(now, headers{h: h})
	f.finish(now, nil)
	if f.cfg.Mesh.Telemetry.ServerTiming {
		obs := f.obs.Observation()
		if v := filter.ServerTiming(&obs); v != "" {
			h.Add("server-timing", v)
		}
	}
	return api.Continue
}

// checkPreempt stops a preempted request at this callback with a
// retryable local reply sent through cb (the decoder's or the encoder's).
// After response headers went out, Envoy turns the reply into a stream
// reset (RST_STREAM on HTTP/2): the SDK has no other way to end a response
// early. A finished request is not stopped again: Envoy runs the local
// reply sent from DecodeData back through this filter's EncodeHeaders.
func (f *streamFilter) checkPreempt(cb api.FilterProcessCallbacks) (api.StatusType, bool) {
	if f.finished {
		return api.Continue, false
	}
	if f.preemptCh == nil {
		lb := f.lease.Load()
		if lb == nil {
			return api.Continue, false
		}
		f.preemptCh = lb.Preempt()
	}
	select {
	case <-f.preemptCh:
	default:
		return api.Continue, false
	}
	f.mu.Lock()
	f.preempted = true
	f.mu.Unlock()
	f.m.preempted.Increment(1)
	now := f.clk.Now()
	f.obs.SetError(filter.ErrorPreempted, "preempted by the scheduler")
	f.finish(now, scheduler.ErrPreempted)
	return f.reply(cb, filter.ReplyFor(scheduler.ErrPreempted)), true
}

// finish ends the observation once and releases the lease.
func (f *streamFilter) finish(now time.Time, cause error) {
	if f.finished {
		return
	}
	f.finished = true
	f.obs.Finish(now, cause)
	f.mu.Lock()
	preempted := f.preempted
	f.mu.Unlock()
	obs := f.obs.Observation()
	f.release(filter.OutcomeOf(&obs, preempted))
}

// release ends the admission exactly once.
func (f *streamFilter) release(o scheduler.Outcome) {
	lb := f.lease.Load()
	f.mu.Lock()
	if f.released || lb == nil {
		f.mu.Unlock()
		return
	}
	f.released = true
	f.outcome = o
	f.mu.Unlock()
	lb.Release(o)
	f.m.inflight.Increment(-1)
}
