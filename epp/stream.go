package epp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/scheduler"
)

// streamChunk bounds one streamed body message the picker sends back in
// full duplex mode, well below gRPC's usual 4 MiB message limit.
const streamChunk = 256 << 10

// errNoReadyEndpoint: no endpoint of the pool (or of the subset the data
// plane gave) is ready.
var errNoReadyEndpoint = errors.New("no ready endpoint")

// stream is one ext_proc stream: one HTTP request and its response. The
// stream's own goroutine handles Envoy's messages; a preemption of its
// lease is handled on another goroutine (preempted), so mu guards
// everything below it, and sends (doc.go).
type stream struct {
	s   *Server
	srv extprocv3.ExternalProcessor_ProcessServer
	ctx context.Context
	// done is closed when run returns: a watcher of the lease's preempt
	// channel (for a lease that cannot notify) stops.
	done chan struct{}

	mu sync.Mutex

	reqMode, respMode filterv3.ProcessingMode_BodySendMode

	received time.Time
	headers  exchange.MapHeaders
	// rawHeaders are the request headers as Envoy sent them, every value
	// of a repeated header (the relocation's view, relocation.go).
	rawHeaders *corev3.HeaderMap
	subset     []string
	hasSubset  bool
	body       []byte
	// bodyChanged: the relocation or the engine-priority guard rewrote
	// body.
	bodyChanged bool
	// removeHeaders are request headers the pick's answer removes: a
	// relocated prompt's (relocation.go).
	removeHeaders []string
	// headersEOS: the request ended with its headers (no body).
	headersEOS bool
	decided    bool

	pool  *poolInfo
	class exchange.Classification
	model string
	// x is the request's lifecycle (exchange.Exchange, as in the other
	// hosts): started once the picker classified the request, it holds
	// the lease, observes the response, releases the lease exactly once
	// and makes the record.
	x exchange.Exchange
	// lease is the admission the request got (nil: refused, or picked
	// fail-open), for the record; x releases it.
	lease    scheduler.Lease
	endpoint string
	served   string
	status   int
	// sse: the response is an event stream (its content type), so a
	// preemption after its first byte ends it with an error event.
	sse bool
	// atBoundary: the response body streamed back so far ends between
	// two SSE events (or is empty).
	atBoundary bool
	// chunkOut is the response body answer reused for every chunk in full
	// duplex mode (gRPC's Send marshals it before it returns), so
	// streaming a chunk back allocates no message.
	chunkOut  *extprocv3.ProcessingResponse
	chunkBody *extprocv3.StreamedBodyResponse
	// closed: the picker ended the exchange itself (an immediate
	// response, or the response body ended with an error event after a
	// preemption); Envoy's further messages get no answer.
	closed bool
}

func newStream(s *Server, srv extprocv3.ExternalProcessor_ProcessServer) *stream {
	return &stream{s: s, srv: srv, ctx: srv.Context(), done: make(chan struct{}), reqMode: s.cfg.BodyMode,
		respMode: s.cfg.BodyMode, atBoundary: true}
}

// run reads the stream's messages in Envoy's order until it ends; every
// exit ends the lifecycle (which releases the lease once).
func (st *stream) run() (err error) {
	defer func() {
		// The stream ended before the response did: the client (or the
		// data plane) went away. A finished request keeps its ending.
		st.mu.Lock()
		st.finish(exchange.EndClientGone, errors.New("ext_proc stream ended"))
		st.closed = true
		st.mu.Unlock()
		close(st.done)
	}()
	for {
		req, err := st.srv.Recv()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if pc := req.GetProtocolConfig(); pc != nil {
			if m := pc.GetRequestBodyMode(); m != filterv3.ProcessingMode_NONE {
				st.reqMode = m
			}
			if m := pc.GetResponseBodyMode(); m != filterv3.ProcessingMode_NONE {
				st.respMode = m
			}
		}
		st.mu.Lock()
		if st.closed {
			// The picker ended the exchange; Envoy ignores further
			// answers and closes the stream.
			st.mu.Unlock()
			continue
		}
		err = st.handle(req)
		st.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

func (st *stream) handle(req *extprocv3.ProcessingRequest) error {
	switch v := req.GetRequest().(type) {
	case *extprocv3.ProcessingRequest_RequestHeaders:
		return st.requestHeaders(req, v.RequestHeaders)
	case *extprocv3.ProcessingRequest_RequestBody:
		return st.requestBody(v.RequestBody)
	case *extprocv3.ProcessingRequest_RequestTrailers:
		if st.headers == nil {
			return status.Error(codes.FailedPrecondition, "epp: request_trailers before request_headers")
		}
		if !st.decided {
			if err := st.decide(); err != nil {
				return err
			}
		}
		return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestTrailers{
			RequestTrailers: &extprocv3.TrailersResponse{}}})
	case *extprocv3.ProcessingRequest_ResponseHeaders:
		return st.responseHeaders(req, v.ResponseHeaders)
	case *extprocv3.ProcessingRequest_ResponseBody:
		return st.responseBody(v.ResponseBody)
	case *extprocv3.ProcessingRequest_ResponseTrailers:
		if st.x.State() == exchange.StateStreaming {
			st.x.Trailers(st.s.now(), headerMap(v.ResponseTrailers.GetTrailers()))
		}
		st.finish(exchange.EndCompleted, nil)
		return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseTrailers{
			ResponseTrailers: &extprocv3.TrailersResponse{}}})
	}
	return status.Errorf(codes.InvalidArgument, "epp: unexpected ext_proc message %T", req.GetRequest())
}

func (st *stream) requestHeaders(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) error {
	if st.headers != nil {
		return status.Error(codes.FailedPrecondition, "epp: request_headers sent twice on one stream")
	}
	st.received = st.s.now()
	st.headers = headerMap(h.GetHeaders())
	st.rawHeaders = h.GetHeaders()
	sub, present, err := Subset(req.GetMetadataContext())
	if err != nil {
		return st.immediate(fmt.Errorf("%w: %w", exchange.ErrBadRequest, err))
	}
	st.subset, st.hasSubset = sub, present
	if h.GetEndOfStream() {
		// No body (a GET): the pick goes in the headers response.
		st.headersEOS = true
		return st.decide()
	}
	if refused, err := st.refuseStreamedRelocation(); refused {
		return err
	}
	if st.reqMode == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
		// The headers response waits for the pick, made once the body is
		// complete; Envoy sends the body meanwhile.
		return nil
	}
	return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
		RequestHeaders: &extprocv3.HeadersResponse{}}})
}

func (st *stream) requestBody(b *extprocv3.HttpBody) error {
	if st.headers == nil {
		return status.Error(codes.FailedPrecondition, "epp: request_body before request_headers")
	}
	if st.decided {
		return status.Error(codes.FailedPrecondition, "epp: request_body after the request ended")
	}
	if int64(len(st.body))+int64(len(b.GetBody())) > st.s.cfg.MaxBodyBytes {
		st.decided = true
		return st.immediate(fmt.Errorf("%w: body over %d bytes", exchange.ErrRequestTooLarge, st.s.cfg.MaxBodyBytes))
	}
	st.body = append(st.body, b.GetBody()...)
	if b.GetEndOfStream() || b.GetEndOfStreamWithoutMessage() {
		return st.decide()
	}
	if st.reqMode == filterv3.ProcessingMode_STREAMED {
		// Every streamed chunk gets its answer; the pick rides on the last.
		return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
			RequestBody: &extprocv3.BodyResponse{}}})
	}
	return nil
}

// decide classifies, admits and picks, then answers: the pick, or an
// immediate response.
func (st *stream) decide() error {
	st.decided = true
	h := st.headers
	path := st.path()
	grpcReq := strings.HasPrefix(h.Get("content-type"), "application/grpc")
	pi, routeClass, ok := st.s.route(path, h.Get, grpcReq)
	if !ok {
		return st.immediate(fmt.Errorf("%w: %s", exchange.ErrNoRoute, truncate(path, 128)))
	}
	st.pool = pi
	if err := st.relocate(path); err != nil {
		// Recorded with the class its head gives, as the other hosts
		// record a request their relocation refused.
		st.class = st.s.cls.Classify(exchange.RequestInfo{Path: path, RouteClass: routeClass, Headers: h})
		return st.immediate(err)
	}
	var oreq exchange.OpenAIRequest
	var grpcSizes *exchange.RequestMeta
	if len(st.body) > 0 && !grpcReq {
		r, err := exchange.ParseOpenAIRequest(st.body)
		if err != nil {
			// Recorded with the class its head gives, as the other hosts
			// record a refused body.
			st.class = st.s.cls.Classify(exchange.RequestInfo{Path: path, RouteClass: routeClass, Headers: h})
			return st.immediate(fmt.Errorf("%w: %w", exchange.ErrBadRequest, err))
		}
		oreq = r
		st.model = r.Model
	}
	st.class = st.s.cls.Classify(exchange.RequestInfo{Path: path, Model: oreq.Model, RouteClass: routeClass, Headers: h})
	if obj := h.Get(ObjectiveHeader); obj != "" && (st.class.Source == exchange.SourceRule || st.class.Source == exchange.SourceDefault) {
		if cl, ok := st.s.cls.Class(obj); ok {
			st.class = exchange.Classification{Class: cl, Source: exchange.SourceHeader, Reason: ObjectiveHeader + " " + strconv.Quote(obj)}
		}
	}
	id := h.Get("x-request-id")
	if id == "" {
		id = st.s.nextID()
	}
	st.start(exchange.RequestHead{Path: path, ContentType: h.Get("content-type"), ID: id, AffinityHeader: pi.pool.AffinityHeader,
		ContentEncoding: h.Get("content-encoding"), GRPCEncoding: h.Get("grpc-encoding"), Headers: h,
		HasBody: len(st.body) > 0, ClassPriority: pi.pool.ClassEnginePriority()})
	if grpcReq && len(st.body) > 0 {
		// The model and sizes of a gRPC generation (llm.v1, vLLM) from its
		// message, as the other hosts read them (the core's Size). A
		// message no engine can serve is left to the engine to refuse, as
		// the gateway does.
		_ = st.x.Size(st.body, nil)
		meta := st.x.View().Meta
		st.model = meta.Model
		oreq.Model = meta.Model
		grpcSizes = &meta
	}
	if err := st.guard(); err != nil {
		return st.immediate(err)
	}
	var want []string
	if st.hasSubset {
		want = st.subset
		if want == nil {
			want = []string{}
		}
		if eps, _ := st.s.ready(pi, want); len(eps) == 0 {
			return st.immediate(fmt.Errorf("%w: %w in the subset %q of pool %q", scheduler.ErrRejected, errNoReadyEndpoint,
				truncate(strings.Join(st.subset, ","), 256), pi.pool.Name))
		}
	}
	sreq := scheduler.Request{ID: id, Pool: pi.pool.Name, Class: st.class.Name, PromptTokens: oreq.PromptTokens(),
		MaxTokens: max(0, oreq.OutputLimit()), Arrival: st.received, Affinity: st.x.View().Request.Affinity}
	if grpcSizes != nil {
		sreq.PromptTokens, sreq.MaxTokens = grpcSizes.PromptTokens, grpcSizes.MaxTokens
	}
	for {
		lease, err := st.s.cfg.Admitter.Admit(st.ctx, sreq)
		switch {
		case err == nil:
			st.lease = lease
			st.endpoint = scheduler.EndpointOf(lease)
		case errors.Is(err, scheduler.ErrCancelled):
			// The stream's context ended while queued: nobody to answer.
			return status.FromContextError(st.ctx.Err()).Err()
		case st.s.cfg.FailOpen && (errors.Is(err, scheduler.ErrUnavailable) || errors.Is(err, scheduler.ErrClosed)):
			// Fail open: pick without admission.
		default:
			return st.immediate(err)
		}
		st.x.Admitted(st.s.now(), st.lease)
		if lease == nil || !preempted(lease) {
			break
		}
		// Preempted before the pick went out: nothing reached the
		// engine, so the request goes back to the front of its class
		// queue with its arrival, as the gateway requeues one that sent
		// nothing (docs/epp.md, Preemption).
		st.x.Requeued(exchange.EndPreempted)
		st.lease, st.endpoint = nil, ""
		sreq.Requeue = true
	}
	if st.endpoint == "" || (want != nil && !contains(want, st.endpoint)) || (st.lease == nil) {
		ep, ok := st.fallbackPick(pi, want, st.lease == nil)
		if !ok {
			// Refused after the admission: the lease goes back as failed.
			return st.immediate(fmt.Errorf("%w: %w in pool %q", scheduler.ErrRejected, errNoReadyEndpoint, pi.pool.Name))
		}
		st.endpoint = ep
	}
	st.x.UpstreamSent(st.s.now(), st.endpoint)
	if err := st.sendPick(); err != nil {
		return err
	}
	if st.lease != nil {
		st.watch(st.lease)
	}
	return nil
}

// guard applies the engine-priority guard (pools[].engine_priority:
// class, exchange.Exchange.Guard) to the whole request body before the pick:
// the body streamed back in full duplex mode, or the buffered body's
// mutation, is the rewritten one. An error is the refusal (a body the
// guard cannot read reliably, or a compressed one). In STREAMED mode the
// earlier chunks already went on unchanged: a body the guard would change
// is refused there (ErrPriorityBody), never forwarded as the client sent
// it.
func (st *stream) guard() error {
	plan := st.x.View().Plan
	if plan.Refuse != nil {
		return plan.Refuse
	}
	if plan.Guard == exchange.GuardNone {
		return nil
	}
	out, changed, err := st.x.Guard(st.body)
	if err != nil || !changed {
		return err
	}
	if st.reqMode == filterv3.ProcessingMode_STREAMED && !st.headersEOS {
		return fmt.Errorf("%w: the body's engine priority must be rewritten, which the picker cannot do in STREAMED request mode (use FULL_DUPLEX_STREAMED or BUFFERED)", exchange.ErrPriorityBody)
	}
	st.body, st.bodyChanged = out, true
	return nil
}

// preempted reports whether l's preempt channel is closed.
func preempted(l scheduler.Lease) bool {
	select {
	case <-l.Preempt():
		return true
	default:
		return false
	}
}

// watch has st.preempted called when l is preempted: from the scheduler's
// notification where the lease gives one (no goroutine per request), else
// from a goroutine that waits for the preempt channel or the stream's end.
func (st *stream) watch(l scheduler.Lease) {
	if n, ok := l.(scheduler.PreemptNotifier); ok {
		// f runs under the scheduler's lock: it must not block.
		n.OnPreempt(func() { go st.preempted(l) })
		return
	}
	ch := l.Preempt()
	if ch == nil {
		return
	}
	go func() {
		select {
		case <-ch:
			st.preempted(l)
		case <-st.done:
		}
	}()
}

// preempted stops the request whose lease l the scheduler preempted after
// the pick went out, as the Envoy filter host stops one (docs/envoy.md,
// preemption), but at once rather than at the next message: the engine's
// slot is freed when Envoy resets the upstream.
//
//   - No response byte yet: an immediate response with the retryable reply
//     (503 llmesh_preempted, gRPC UNAVAILABLE). Envoy sends it to the
//     client and resets the upstream. The request cannot go back to the
//     queue: Envoy's router has already sent it to the picked endpoint, and
//     ext_proc has no way to send it again.
//   - The response is under way, an event stream, the response body in
//     full duplex mode: the picker ends the body itself with an OpenAI
//     error event (as the gateway ends a stream it cannot continue) and
//     end_of_stream; Envoy ends the client's response cleanly and resets
//     the upstream.
//   - Any other response under way (gRPC, whose status needs trailers the
//     picker cannot add before Envoy sends them; JSON; a body mode where
//     the picker does not own the body): an immediate response, which
//     Envoy turns into a stream reset once response headers went out, as
//     the Envoy filter host's local reply does.
func (st *stream) preempted(l scheduler.Lease) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.closed || st.lease != l || !st.live() {
		return // the request ended, or moved on, first
	}
	st.s.preempted.Add(1)
	if st.x.State() == exchange.StateStreaming && st.sse && st.respMode == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
		st.finish(exchange.EndPreempted, nil)
		st.closed = true
		r := exchange.ReplyFor(scheduler.ErrPreempted)
		var b []byte
		if !st.atBoundary {
			b = append(b, '\n', '\n')
		}
		b = append(b, "event: error\ndata: "...)
		b = exchange.AppendOpenAIError(b, r.HTTPStatus, "preempted", r.Message)
		b = append(b, '\n', '\n')
		_ = st.send(streamedBody(b, true))
		return
	}
	_ = st.reply(scheduler.ErrPreempted, exchange.EndPreempted)
}

// start begins the request's lifecycle with what the picker knows of it
// (the pool and the class it decided, when it got that far).
func (st *stream) start(h exchange.RequestHead) {
	h.Received = st.received
	h.RouteClass = st.class.Name
	if st.pool != nil {
		h.Pool = st.pool.pool.Name
	}
	st.x.Start(&st.s.xcfg, h)
}

// live: the lifecycle began and has not ended.
func (st *stream) live() bool {
	s := st.x.State()
	return s != exchange.StateIdle && s != exchange.StateEnded
}

// fallbackPick chooses among the ready endpoints of want (all when nil):
// the least loaded for a lease bound to no endpoint or to one outside the
// subset, round robin when picking fail-open (rr).
func (st *stream) fallbackPick(pi *poolInfo, want []string, rr bool) (string, bool) {
	eps, load := st.s.ready(pi, want)
	if len(eps) == 0 {
		return "", false
	}
	if rr {
		return eps[int(st.s.rr.Add(1)-1)%len(eps)], true
	}
	best := 0
	for i := range eps {
		if load[i] < load[best] {
			best = i
		}
	}
	return eps[best], true
}

// sendPick answers the request with its endpoint: the header and the
// dynamic metadata, on the message the mode expects.
func (st *stream) sendPick() error {
	mut := &extprocv3.HeaderMutation{SetHeaders: []*corev3.HeaderValueOption{{
		Header:       &corev3.HeaderValue{Key: DestinationHeader, RawValue: []byte(st.endpoint)},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}}}
	mut.RemoveHeaders = append(mut.RemoveHeaders, st.removeHeaders...)
	if st.bodyChanged {
		// The relocation or the guard changed the body's length. Envoy
		// removes content-length itself after a body mutation in full
		// duplex mode (unless allow_content_length_header); removing it
		// here covers BUFFERED and never leaves a stale length.
		mut.RemoveHeaders = append(mut.RemoveHeaders, "content-length")
	}
	common := &extprocv3.CommonResponse{HeaderMutation: mut, ClearRouteCache: true}
	if st.bodyChanged && st.reqMode == filterv3.ProcessingMode_BUFFERED {
		common.BodyMutation = &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: st.body}}
	}
	md := destinationMetadata(st.endpoint)
	switch {
	case st.headersEOS || st.reqMode == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED:
		if err := st.send(&extprocv3.ProcessingResponse{DynamicMetadata: md, Response: &extprocv3.ProcessingResponse_RequestHeaders{
			RequestHeaders: &extprocv3.HeadersResponse{Response: common}}}); err != nil {
			return err
		}
		if st.headersEOS {
			return nil
		}
		// Full duplex: the body goes on only as the processor sends it, in
		// pieces of at most streamChunk bytes.
		body := st.body
		for {
			n := min(len(body), streamChunk)
			if err := st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
				RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
					Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{
						Body: body[:n], EndOfStream: n == len(body)}}}}}}}); err != nil {
				return err
			}
			body = body[n:]
			if len(body) == 0 {
				return nil
			}
		}
	default:
		// BUFFERED and STREAMED: Envoy still holds the headers while it
		// waits for this (last) body answer, which carries the mutation.
		return st.send(&extprocv3.ProcessingResponse{DynamicMetadata: md, Response: &extprocv3.ProcessingResponse_RequestBody{
			RequestBody: &extprocv3.BodyResponse{Response: common}}})
	}
}

func (st *stream) responseHeaders(req *extprocv3.ProcessingRequest, h *extprocv3.HttpHeaders) error {
	hm := headerMap(h.GetHeaders())
	st.status, _ = strconv.Atoi(hm.Get(":status"))
	st.sse = strings.HasPrefix(hm.Get("content-type"), "text/event-stream")
	if s := Served(req.GetMetadataContext()); s != "" {
		st.served = s
	}
	if s := st.x.State(); s == exchange.StateAdmitted {
		st.x.ResponseHead(st.s.now(), st.status, hm)
	}
	if err := st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extprocv3.HeadersResponse{}}}); err != nil {
		return err
	}
	if h.GetEndOfStream() {
		st.finish(exchange.EndCompleted, nil)
	}
	return nil
}

func (st *stream) responseBody(b *extprocv3.HttpBody) error {
	if st.x.State() == exchange.StateStreaming {
		// A parse error is recorded in the observation; the lease hears
		// of the stream's progress.
		_ = st.x.Chunk(st.s.now(), b.GetBody())
	}
	eos := b.GetEndOfStream() || b.GetEndOfStreamWithoutMessage()
	var err error
	if st.respMode == filterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
		if body := b.GetBody(); len(body) > 0 && st.sse {
			st.atBoundary = bytes.HasSuffix(body, []byte("\n\n")) || bytes.HasSuffix(body, []byte("\r\n\r\n"))
		}
		if st.chunkOut == nil {
			st.chunkOut = streamedBody(nil, false)
			st.chunkBody = st.chunkOut.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse()
		}
		st.chunkBody.Body, st.chunkBody.EndOfStream = b.GetBody(), eos
		err = st.send(st.chunkOut)
		st.chunkBody.Body = nil
	} else {
		err = st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
			ResponseBody: &extprocv3.BodyResponse{}}})
	}
	if eos {
		st.finish(exchange.EndCompleted, nil)
	}
	return err
}

// finish ends the request's lifecycle, if it is live, as how says, and
// reports the record: the core releases the lease, once, with the
// outcome that ending implies (as in the other hosts, the observation
// decides a completed response's: an error status or a truncated stream
// fails it).
func (st *stream) finish(how exchange.Ending, cause error) {
	if !st.live() {
		return
	}
	rec := st.x.End(st.s.now(), how, cause)
	if st.s.cfg.OnDone != nil {
		st.s.cfg.OnDone(Record{Endpoint: st.endpoint, Served: st.served, Status: st.status, Outcome: rec.Outcome,
			Admitted: st.lease != nil, Class: rec.Class, Model: st.model, Pool: rec.Pool, Preemptions: rec.Preemptions,
			Observation: rec.Observation})
	}
}

// immediate ends the request with the reply the other hosts give for err
// (exchange.ReplyFor: status, OpenAI error body, retry hint).
func (st *stream) immediate(err error) error { return st.reply(err, exchange.EndRefused) }

// reply ends the request with the reply for err, recording how it ended.
func (st *stream) reply(err error, how exchange.Ending) error {
	r := exchange.ReplyFor(err)
	st.status = r.HTTPStatus
	st.decided = true
	// As the Envoy filter host replies (envoyfilter/reply.go): the OpenAI
	// error object and retry-after for HTTP; for gRPC the message (Envoy
	// makes it grpc-message of a trailers-only response), the status and
	// grpc-retry-pushback-ms.
	grpcReq := st.headers != nil && exchange.GRPCKindOf(st.headers.Get("content-type")).Framed()
	hdrs := []*corev3.HeaderValueOption{
		{Header: &corev3.HeaderValue{Key: "x-llmesh-reply", RawValue: []byte(r.Details)}},
	}
	body := []byte(r.Message)
	if !grpcReq {
		body = r.OpenAIBody()
		hdrs = append(hdrs, &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: "content-type", RawValue: []byte("application/json")}})
	}
	if r.Retryable {
		if grpcReq {
			hdrs = append(hdrs, &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: "grpc-retry-pushback-ms", RawValue: []byte(exchange.Pushback(time.Second))}})
		} else {
			hdrs = append(hdrs, &corev3.HeaderValueOption{Header: &corev3.HeaderValue{Key: "retry-after", RawValue: []byte(exchange.RetryAfter(time.Second))}})
		}
	}
	st.s.log.Debug("epp: request answered by the picker", "status", r.HTTPStatus, "err", err)
	if !st.live() && st.x.State() != exchange.StateEnded {
		// Answered before the picker got to classify it.
		st.start(exchange.RequestHead{Path: st.headers.Get(":path"), ContentType: st.headers.Get("content-type")})
	}
	if how == exchange.EndPreempted {
		st.finish(how, nil)
	} else {
		st.finish(how, err)
	}
	st.closed = true
	im := &extprocv3.ImmediateResponse{
		Status:  &typev3.HttpStatus{Code: typev3.StatusCode(r.HTTPStatus)},
		Headers: &extprocv3.HeaderMutation{SetHeaders: hdrs},
		Body:    body,
		Details: r.Details,
	}
	if grpcReq {
		im.GrpcStatus = &extprocv3.GrpcStatus{Status: uint32(r.GRPCCode)}
	}
	return st.send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: im}})
}

// streamedBody is a full duplex body answer carrying b.
func streamedBody(b []byte, eos bool) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseBody{
		ResponseBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: &extprocv3.BodyMutation{
			Mutation: &extprocv3.BodyMutation_StreamedResponse{StreamedResponse: &extprocv3.StreamedBodyResponse{
				Body: b, EndOfStream: eos}}}}}}}
}

func (st *stream) send(r *extprocv3.ProcessingResponse) error { return st.srv.Send(r) }

// headerMap reads Envoy's header map (value or raw_value) with lower-case
// names; the first value of a repeated header wins.
func headerMap(m *corev3.HeaderMap) exchange.MapHeaders {
	out := exchange.MapHeaders{}
	for _, h := range m.GetHeaders() {
		k := strings.ToLower(h.GetKey())
		if _, dup := out[k]; dup {
			continue
		}
		v := h.GetValue()
		if len(h.GetRawValue()) > 0 {
			v = string(h.GetRawValue())
		}
		out[k] = v
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
