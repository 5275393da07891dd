package envoyfilter

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
	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/exchange/relocate"
	"github.com/llmesh/llmesh/scheduler"
)

// streamFilter is the filter of one request: the SDK's callbacks mapped
// onto the core's per-request sequence (exchange.Exchange), plus what only
// the Envoy host has: buffering, relocation as the body streams, the
// admission goroutine, and OnDestroy. Envoy calls its callbacks on one
// worker thread; the only other goroutine is the admission goroutine of a
// held request (see doc.go).
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
	received time.Time
	// pin is the endpoint picked upstream of Envoy (upstreamPick), "" when
	// none.
	pin string

	// Worker-thread state. x is the core's lifecycle, which holds the
	// request's state (x.State()); the relocation plans and rewriter are
	// set while the body is relocated (relocating).
	x         exchange.Exchange
	xcfg      exchange.ExchangeConfig
	httpPlan  *relocate.HTTPPlan
	grpcPlan  *relocate.GRPCPlan
	grpcRW    *relocate.GRPCRewriter
	relocOut  []byte
	guarding  bool   // the body is held for the engine priority guard
	guardBuf  []byte // the body collected so far (not buffered by Envoy)
	sizing    bool   // the JSON body is being buffered to read model and sizes
	reqHV     headers
	preemptCh <-chan struct{}

	// sizeBuf holds a JSON body read before admission (for its size, or
	// to relocate a prompt into it) that Envoy handed over before its end
	// (it does so when request trailers follow): the bytes stay in the
	// filter (StopNoBuffer), because Envoy would otherwise inject them,
	// and continue the held headers, at once.
	sizeBuf []byte

	// lease is set by the admission goroutine before it continues the
	// request; the worker thread takes it (Swap) and hands it to x
	// (noteAdmitted), or gives it back when x can no longer use it.
	lease atomic.Pointer[leaseBox]
	// replied: the filter sent a local reply (from a callback or the
	// admission goroutine). Envoy runs a reply sent while decoding
	// through the encoder filters, this filter's encode half included;
	// those callbacks carry the filter's own answer, not the engine's
	// response, and pass through unobserved.
	replied atomic.Bool

	mu        sync.Mutex // guards the fields below
	holding   bool       // the admission goroutine owns the decode phase
	destroyed bool
	cancel    context.CancelFunc
	admitted  time.Time
	// admitErr is the admission's error, set by the admission goroutine
	// before it replies; the worker thread records it in x
	// (noteAdmitError).
	admitErr error
}

// leaseBox lets an interface value live behind an atomic.Pointer. It
// counts the request out of the in-flight gauge at its first release (the
// core releases it exactly once, on the worker thread) and keeps the
// lease's endpoint visible (scheduler.Routed).
type leaseBox struct {
	scheduler.Lease
	m        *metrics
	released bool
}

// Release gives the lease back and updates the in-flight gauge once.
func (b *leaseBox) Release(o scheduler.Outcome) {
	if !b.released {
		b.released = true
		b.m.inflight.Increment(-1)
	}
	b.Lease.Release(o)
}

// Endpoint is the wrapped lease's endpoint.
func (b *leaseBox) Endpoint() string { return scheduler.EndpointOf(b.Lease) }

var _ scheduler.Routed = (*leaseBox)(nil)

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
	f.grpc = exchange.GRPCKindOf(ct) != exchange.GRPCNone
	reqID, ok := h.Get("x-request-id")
	if !ok || reqID == "" {
		reqID = f.path + "@" + strconv.FormatInt(f.received.UnixNano(), 10)
	}
	hv := f.stripMarker(h)
	var gen *exchange.Generations // the route's generation paths; nil: the defaults
	if f.cfg.routes != nil {
		if r, ok := f.cfg.routes.Select(f.path, hv.Get, f.grpc); ok {
			gen = r.Generations
			// Envoy's per-route config wins: with a class of its own the
			// listener's route sets neither pool nor class, and a pool of
			// its own stays.
			if f.routeClass == "" {
				if f.pool == f.cfg.Pool {
					f.pool = r.Pool
				}
				f.routeClass = r.Class
			}
		}
	}
	peer, _ := netip.ParseAddrPort(f.cb.StreamInfo().DownstreamRemoteAddress())

	// ITL samples feed only the OpenTelemetry histogram; without a recorder
	// the summary is enough. Pooled observers reuse the sample buffer.
	opts := exchange.Options{MaxITLSamples: -1}
	rec := f.cfg.rt.recorder(f.cfg.Mesh)
	if rec != nil {
		opts.MaxITLSamples = 0
		// Every gap reaches the histogram, however long the stream.
		if gb, ok := rec.(interface{ GapBuckets() *exchange.GapBuckets }); ok {
			opts.GapBuckets = gb.GapBuckets()
		}
	}
	f.xcfg = exchange.ExchangeConfig{Classifier: f.cfg.classifier, SizeBody: f.cfg.needBody,
		GuardMaxMessage: f.relocation().MaxMessage, Observer: opts, Recorder: rec, Misuse: noteMisuse}
	ce, _ := h.Get("content-encoding")
	genc, _ := h.Get("grpc-encoding")
	head := exchange.RequestHead{Path: f.path, ContentType: ct, ContentEncoding: ce, GRPCEncoding: genc, Headers: hv,
		Peer: peer.Addr(), Received: f.received, ID: reqID, RouteClass: f.routeClass,
		HashPrefix:  f.pool != nil && f.pool.PrefixWeight > 0,
		Passthrough: !gen.Match(h.Method(), f.path), HasBody: !endStream}
	if f.pool != nil {
		head.Pool, head.ClassPriority, head.AffinityHeader = f.pool.Name, f.pool.ClassEnginePriority(), f.pool.AffinityHeader
	}
	var pickErr error
	f.pin, pickErr = f.upstreamPick(hv)
	head.Pin = f.pin
	f.x.Start(&f.xcfg, head)
	if pickErr != nil {
		return f.refuse(f.cb.DecoderFilterCallbacks(), pickErr)
	}

	// The body is read before admission when the config needs the model
	// (classification rules) or the request's size (token capacity), and
	// held for the engine priority guard (bodypriority.go).
	plan := f.x.View().Plan
	if plan.Refuse != nil {
		return f.priorityRefused(f.cb.DecoderFilterCallbacks(), plan.Refuse)
	}
	if plan.Guard != exchange.GuardNone {
		f.guarding = true
		if plan.DropContentLength {
			h.Del("content-length")
		}
	}
	if rel := f.cfg.rt.reloc; rel != nil {
		if done, st := f.planRelocation(h, hv, endStream); done {
			if st == api.StopAndBuffer {
				f.sizing, f.reqHV = plan.Size, hv
			}
			return st
		}
	}
	if plan.Size && f.grpcRW == nil {
		// The header map stays valid until the buffered DecodeData. (A
		// relocated gRPC message streams through the rewriter instead.)
		f.sizing, f.reqHV = true, hv
		return api.StopAndBuffer
	}
	return f.admit()
}

// readBody reads the model and sizes of a buffered request, then
// classifies again with the model (the core's Size). A body it cannot
// read leaves them unknown; the error is a request no engine can serve
// (refuseBody answers it).
func (f *streamFilter) readBody(body []byte) error {
	f.sizing = false
	hv := f.reqHV
	f.reqHV = headers{}
	if hv.h != nil {
		return f.x.Size(body, hv)
	}
	return f.x.Size(body, nil)
}

// noteModel reads the model of a whole body that is refused before
// readBody sized it (DecodeData left the model to readBody): the refusal is
// recorded with it, as for a body that arrived in several chunks.
func (f *streamFilter) noteModel(body []byte) {
	if f.sizing {
		f.x.NoteModel(body, true)
	}
}

// refuseBody answers a request whose body names what no engine can serve
// (readBody's error), before admission.
func (f *streamFilter) refuseBody(cb api.FilterProcessCallbacks, err error) api.StatusType {
	return f.refuse(cb, err)
}

// refuse answers the request itself with err's reply (exchange.ReplyFor) and
// ends its response as refused, as the gateway records its refusals; an
// admission made from the headers is released (as failed).
func (f *streamFilter) refuse(cb api.FilterProcessCallbacks, err error) api.StatusType {
	if f.responding() {
		f.noteAdmitted()
		f.x.Finish(f.clk.Now(), exchange.EndRefused, err)
	}
	return f.reply(cb, exchange.ReplyFor(err))
}

// started: the request's lifecycle began and has not ended.
func (f *streamFilter) started() bool {
	s := f.x.State()
	return s != exchange.StateIdle && s != exchange.StateEnded
}

// responding: started and the response not over.
func (f *streamFilter) responding() bool {
	return f.started() && f.x.State() != exchange.StateFinished
}

// relocating: the request body is being rewritten for relocation.
func (f *streamFilter) relocating() bool { return f.httpPlan != nil || f.grpcRW != nil }

// admit starts admission: pass through without a scheduler, otherwise hold
// the request (api.Running) until the admission goroutine continues it.
func (f *streamFilter) admit() api.StatusType {
	adm, err := f.cfg.rt.admitter(f.cfg.Mesh)
	if err != nil {
		f.m.unavailable.Increment(1)
		api.LogErrorf("llmesh: scheduler unavailable: %v", err)
		return f.refuse(f.cb.DecoderFilterCallbacks(), fmtErr(scheduler.ErrUnavailable, err))
	}
	v := f.x.View()
	if adm == nil || v.Passthrough {
		// Not a generation call (model list, health…): never queued. An
		// upstream pick still says where it goes.
		f.x.Admitted(f.received, nil)
		if f.pin != "" {
			f.routeToLease(f.cb.DecoderFilterCallbacks(), nil)
		}
		return api.Continue
	}
	req := v.Request
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
		f.lease.Store(&leaseBox{Lease: lease, m: f.m})
	}
	if err != nil && !destroyed {
		f.admitErr = err
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
		f.reply(dcb, exchange.ReplyFor(err))
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
	if f.responding() && !(endStream && f.sizing) {
		// The first chunk only. A body that is sized and arrives whole is
		// left to readBody, which reads the model with the sizes, so that
		// it is parsed once (or to noteModel when refused before that).
		f.x.NoteModel(b.Bytes(), endStream)
	}
	switch {
	case f.guarding:
		return f.guardBody(b, endStream)
	case f.relocating():
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
		if err := f.readBody(body); err != nil {
			return f.refuseBody(f.cb.DecoderFilterCallbacks(), err)
		}
		return f.admit()
	}
	// A request still sending its body is stopped here when preempted:
	// the upstream has not answered, so the client gets the retryable
	// reply, not a reset, and the slot is free without waiting for the
	// upstream's first byte (the gateway cancels at once too).
	if f.responding() {
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
	if f.guarding {
		return f.guardTrailers()
	}
	if f.httpPlan != nil {
		f.httpPlan = nil
		return f.relocationFailed(f.cb.DecoderFilterCallbacks(), errTrailers)
	}
	if f.sizing {
		// Envoy handed the body over before the trailers and the filter
		// kept it: read it, give it back to Envoy to send before the
		// trailers once the request continues, and admit.
		body := f.sizeBuf
		f.sizeBuf = nil
		if err := f.readBody(body); err != nil {
			return f.refuseBody(f.cb.DecoderFilterCallbacks(), err)
		}
		if len(body) > 0 {
			f.cb.DecoderFilterCallbacks().AddData(body, false)
		}
		return f.admit()
	}
	return api.Continue
}

func (f *streamFilter) EncodeHeaders(h api.ResponseHeaderMap, endStream bool) (status api.StatusType) {
	defer f.recoverCallback(f.cb.EncoderFilterCallbacks(), &status)
	if !f.responding() || f.replied.Load() {
		// Not ours to observe, or the filter's own local reply on its way
		// through the encoder filters: the Record keeps the refusal, as
		// the gateway records it (no response from the engine).
		return api.Continue
	}
	if st, stop := f.checkPreempt(f.cb.EncoderFilterCallbacks()); stop {
		return st
	}
	now := f.clk.Now()
	f.noteAdmitted()
	f.noteUpstreamSent()
	code, _ := h.Status()
	f.x.ResponseHead(now, code, headers{h: h})
	if f.cfg.Mesh.Telemetry.ServerTiming {
		// Only the queue time is known now; gRPC gets the rest in trailers.
		if v := f.x.ServerTiming(now, false); v != "" {
			h.Add("server-timing", v)
		}
	}
	if endStream {
		f.x.Trailers(now, headers{h: h})
		f.x.Finish(now, exchange.EndCompleted, nil)
	}
	return api.Continue
}

// noteAdmitError records in x, on the worker thread, the admission error
// the admission goroutine replied with, as the gateway records it: a
// refusal (queue full, max wait, rejected), or the client gone.
func (f *streamFilter) noteAdmitError() {
	f.mu.Lock()
	err := f.admitErr
	f.admitErr = nil
	f.mu.Unlock()
	if err == nil || !f.responding() {
		return
	}
	f.x.Finish(f.clk.Now(), exchange.EndRefused, err) // a cancellation is the client gone
}

// noteAdmitted hands the admission goroutine's lease to the core on the
// worker thread (the core is not shared with that goroutine), once.
func (f *streamFilter) noteAdmitted() {
	if !f.started() {
		return // OnDestroy gives back what the goroutine stored
	}
	lb := f.lease.Swap(nil)
	if lb == nil {
		return
	}
	if f.x.State() != exchange.StateReceived {
		// The response began or ended before the admission came back
		// (Envoy answered the held request itself, the buffer limit's
		// 413 for one): the lease was never used.
		lb.Release(scheduler.Cancelled)
		return
	}
	f.mu.Lock()
	t := f.admitted
	f.mu.Unlock()
	f.x.Admitted(t, lb)
	f.preemptCh = lb.Preempt()
}

// noteUpstreamSent marks when the request went upstream, once a response
// shows it did: when the filter let it go (its admission, or its arrival
// when it was not held); the router's own send is not seen from the
// filter. Upstream TTFT is measured from there, as the gateway measures it
// from its send.
func (f *streamFilter) noteUpstreamSent() {
	if f.x.State() != exchange.StateAdmitted {
		return // Envoy's own reply: nothing went upstream
	}
	f.mu.Lock()
	t := f.admitted
	f.mu.Unlock()
	if t.IsZero() {
		t = f.received // let through without waiting
	}
	f.x.UpstreamSent(t, "")
}

// EncodeData is the hot path: one call per response chunk. It allocates
// nothing (see BenchmarkEncodeData).
func (f *streamFilter) EncodeData(b api.BufferInstance, endStream bool) (status api.StatusType) {
	defer f.recoverCallback(f.cb.EncoderFilterCallbacks(), &status)
	if f.x.State() != exchange.StateStreaming || f.replied.Load() {
		return api.Continue
	}
	if st, stop := f.checkPreempt(f.cb.EncoderFilterCallbacks()); stop {
		return st
	}
	now := f.clk.Now()
	if err := f.x.Chunk(now, b.Bytes()); err != nil {
		// Returned once; the response is proxied regardless.
		f.m.observeErrors.Increment(1)
	}
	if endStream {
		f.x.Finish(now, exchange.EndCompleted, nil)
	}
	return api.Continue
}

func (f *streamFilter) EncodeTrailers(h api.ResponseTrailerMap) (status api.StatusType) {
	defer f.recoverCallback(f.cb.EncoderFilterCallbacks(), &status)
	if f.x.State() != exchange.StateStreaming || f.replied.Load() {
		return api.Continue
	}
	now := f.clk.Now()
	f.x.Trailers(now, headers{h: h})
	f.x.Finish(now, exchange.EndCompleted, nil)
	if f.cfg.Mesh.Telemetry.ServerTiming {
		if v := f.x.ServerTiming(now, true); v != "" {
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
	if !f.responding() {
		return api.Continue, false
	}
	if f.preemptCh == nil {
		f.noteAdmitted()
		if f.preemptCh == nil {
			return api.Continue, false
		}
	}
	select {
	case <-f.preemptCh:
	default:
		return api.Continue, false
	}
	f.m.preempted.Increment(1)
	f.x.Finish(f.clk.Now(), exchange.EndPreempted, nil)
	return f.reply(cb, exchange.ReplyFor(scheduler.ErrPreempted)), true
}
