package filter

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/llmesh/llmesh/scheduler"
)

// ExchangeConfig is what an Exchange needs from its host's configuration.
// One value serves every request of a host configuration; it must not
// change while requests use it.
type ExchangeConfig struct {
	// Classifier picks classes and decides whether a client may set its
	// engine priority. Nil: the route's class (else DefaultClass), and no
	// client is trusted with the priority.
	Classifier *Classifier
	// DefaultClass is the class when neither the classifier nor the route
	// names one.
	DefaultClass string
	// SizeBody: the host reads a generation's body before admission for
	// its model and sizes (BodyPlan.Size); false leaves that to the body
	// the host reads anyway.
	SizeBody bool
	// GuardMaxMessage bounds one gRPC message the priority guard checks
	// (before and after decompression); 0 means DefaultMaxFrameBytes.
	GuardMaxMessage int
	// KeepOutput keeps the generated text of a spliceable request
	// (RequestMeta.Spliceable), for a continuation after preemption.
	KeepOutput bool
	// Observer are the observer options every request starts from; the
	// Exchange sets GRPCMethod and KeepOutput per request.
	Observer Options
	// Recorder receives the Record of every request at End; nil records
	// nothing (End still returns it).
	Recorder Recorder
}

// RequestHead is the request's head as its host saw it. Headers are
// valid only during the call that receives them.
type RequestHead struct {
	// Path is the request's :path (the gRPC method for gRPC).
	Path string
	// ContentType, ContentEncoding and GRPCEncoding are the request's
	// headers of those names.
	ContentType, ContentEncoding, GRPCEncoding string
	Headers                                    Headers
	Peer                                       netip.Addr
	// Received is when the host received the request.
	Received time.Time
	// ID is the request's ID for the scheduler.
	ID string
	// Pool is the pool that serves the request.
	Pool string
	// RouteClass is the class fixed by the route, "" when none.
	RouteClass string
	// ClassPriority: the pool's engine orders by the mesh's class
	// priorities, so the guard writes the class's priority into the body.
	ClassPriority bool
	// Passthrough: not a generation call (IsGeneration): proxied without
	// admission and recorded apart.
	Passthrough bool
	// Affinity is the value of the pool's affinity header, "" when none.
	Affinity string
	// HashPrefix: the pool picks endpoints by prefix (prefix_routing), so
	// Size names the prompt's leading blocks (RequestMeta.Blocks) for the
	// scheduler.
	HashPrefix bool
	// HasBody: a request body follows the head.
	HasBody bool
}

// Exchange is the host-independent sequence of one request, driven by its
// host one phase at a time: Start (request head), Plan (is the body
// needed), Size and Guard (the body), Request (what to admit), Admitted,
// UpstreamSent, ResponseHead, Chunk, Trailers, and End, which releases the
// admission exactly once and makes the Record. Reply is the answer to an
// error the host ends the request with. Requeued and Preempted are the
// scheduler's preemption as each host acts on it. See doc.go for which
// goroutine may call what.
//
// Times are passed in: the host reads its own (injected) clock.
type Exchange struct {
	cfg  *ExchangeConfig
	head RequestHead
	kind GRPCKind

	class  Class
	meta   RequestMeta
	sized  bool
	plan   BodyPlan
	guardP EnginePriority

	obs      *Observer
	lease    scheduler.Lease
	progress ProgressReporter
	admitted bool
	leased   bool // a lease was held at some point
	released bool
	finished bool
	ended    bool

	preemptions int
	preempted   bool // ended for the scheduler (Preempted)
	outcome     scheduler.Outcome
	outcomeSet  bool
	err         error // the host-side error of Record.Err
	cause       error // the first failure that ended the response
	endpoint    string
	endpointSet bool
}

// Start begins the exchange with the request head: it decides gRPC from
// the content type (GRPCKindOf), classifies from the head (the model is
// not known yet) and plans what the body needs. x may be a zero Exchange
// or one reused after End.
func (x *Exchange) Start(cfg *ExchangeConfig, h RequestHead) {
	*x = Exchange{cfg: cfg, head: h, kind: GRPCKindOf(h.ContentType)}
	x.head.Headers = nil // valid only during this call
	x.classify(h.Headers)
	x.plan = x.planBody(h)
	opts := cfg.Observer
	if x.kind.Framed() {
		opts.GRPCMethod = h.Path
	}
	x.obs = GetObserver(opts)
	x.obs.MarkReceived(h.Received)
}

// GRPC reports whether the request is gRPC of any kind (GRPCKindOf): it
// is routed as gRPC and answered with a gRPC status.
func (x *Exchange) GRPC() bool { return x.kind != GRPCNone }

// GRPCKind is the request's gRPC flavour.
func (x *Exchange) GRPCKind() GRPCKind { return x.kind }

// Class is the request's class as decided so far.
func (x *Exchange) Class() Class { return x.class }

// Meta is what Size read from the body (the zero value before).
func (x *Exchange) Meta() RequestMeta { return x.meta }

// Model is the model the request named, "" while unknown.
func (x *Exchange) Model() string { return x.meta.Model }

// Passthrough reports whether the request is not a generation call.
func (x *Exchange) Passthrough() bool { return x.head.Passthrough }

// Plan is what the host must do with the body (decided in Start).
func (x *Exchange) Plan() BodyPlan { return x.plan }

// Observer is the request's observer, for hosts that read it (output
// for a continuation, completeness). It is valid until End.
func (x *Exchange) Observer() *Observer { return x.obs }

// Lease is the current admission, nil when none.
func (x *Exchange) Lease() scheduler.Lease { return x.lease }

// Preemptions counts the preemptions so far.
func (x *Exchange) Preemptions() int { return x.preemptions }

func (x *Exchange) classify(h Headers) {
	c := x.cfg.Classifier
	if c == nil {
		name := x.head.RouteClass
		if name == "" {
			name = x.cfg.DefaultClass
		}
		x.class = Class{Name: name}
		return
	}
	x.class = c.Classify(RequestInfo{
		Path: x.head.Path, Model: x.meta.Model, RouteClass: x.head.RouteClass, Peer: x.head.Peer, Headers: h,
	}).Class
	if x.class.Name == "" {
		x.class.Name = x.cfg.DefaultClass
	}
}

// Request is what the host asks the scheduler to admit.
func (x *Exchange) Request() scheduler.Request {
	return scheduler.Request{
		ID:           x.head.ID,
		Pool:         x.head.Pool,
		Class:        x.class.Name,
		PromptTokens: x.meta.PromptTokens,
		MaxTokens:    x.meta.MaxTokens,
		Arrival:      x.head.Received,
		Affinity:     x.head.Affinity,
		Blocks:       x.meta.Blocks,
	}
}

// Admitted records an admission at t: the first marks the queue's end, a
// later one (after Requeued) only replaces the lease. A nil lease is a
// request let through without the scheduler.
func (x *Exchange) Admitted(t time.Time, l scheduler.Lease) {
	if !x.admitted {
		x.admitted = true
		x.obs.MarkAdmitted(t)
	}
	if l != nil {
		x.lease = l
		x.released = false
		x.leased = true
	}
}

// Refused records that the host answered the request itself (an admission
// error, relocation, the priority guard): err is what the client is told.
func (x *Exchange) Refused(err error) {
	x.obs.SetError(ErrorHTTPStatus, err.Error())
	if x.err == nil {
		x.err = err
	}
}

// UpstreamSent marks the send of an upstream attempt at t. Only attempts
// before the first token count: upstream TTFT is measured to the first
// token the client got, so a continuation's send does not move its start.
func (x *Exchange) UpstreamSent(t time.Time) {
	if x.obs.obs.TokenChunks == 0 {
		x.obs.MarkUpstreamSent(t)
	}
}

// ResponseHead records the response's status and headers at t.
func (x *Exchange) ResponseHead(t time.Time, status int, h Headers) {
	x.obs.ResponseHeaders(t, status, h)
}

// Chunk observes response bytes on their way to the client at t and tells
// the lease the stream's progress when it moved. It allocates nothing;
// the error is a parse error, recorded in the observation (the host keeps
// proxying).
func (x *Exchange) Chunk(t time.Time, b []byte) error {
	err := x.obs.Observe(t, b)
	x.progress.Report(x.lease, x.obs)
	return err
}

// Trailers records the response trailers at t (nil: none).
func (x *Exchange) Trailers(t time.Time, h Headers) {
	if h != nil {
		x.obs.Trailers(t, h)
	}
}

// Requeued ends the current admission as preempted, for a host that
// sends the request again (a requeue before the first byte, or a
// mid-stream continuation); Admitted follows with the new lease. The
// preemption is counted; the Record stays one across the attempts.
func (x *Exchange) Requeued() {
	x.preemptions++
	if x.lease != nil && !x.released {
		x.lease.Release(scheduler.Preempted)
	}
	x.lease = nil
}

// Preempted ends the request for the scheduler at t, for a host that
// cannot send it again: the observation ends as preempted, the admission
// is released as preempted, and the reply is the retryable one the
// client gets.
func (x *Exchange) Preempted(t time.Time) Reply {
	x.preemptions++
	x.preempted = true
	x.err = scheduler.ErrPreempted
	x.obs.SetError(ErrorPreempted, "preempted by the scheduler")
	x.Finish(t, scheduler.ErrPreempted)
	return ReplyFor(scheduler.ErrPreempted)
}

// Fail records a host-side error that ends the response (an upstream
// reset, a stall, a mid-stream preemption) and how its admission ends:
// err becomes the Record's Err, the first such error the observation's
// cause.
func (x *Exchange) Fail(err error, o scheduler.Outcome) {
	x.err = err
	if x.cause == nil {
		x.cause = err
	}
	x.SetOutcome(o)
}

// Cancel records that the client went away (err, when not nil, becomes
// the Record's Err): the admission ends as cancelled.
func (x *Exchange) Cancel(err error) {
	if err != nil {
		x.err = err
	}
	x.SetOutcome(scheduler.Cancelled)
}

// SetErr sets the Record's Err unless one is set, without ending anything.
func (x *Exchange) SetErr(err error) {
	if x.err == nil {
		x.err = err
	}
}

// SetOutcome fixes how the admission is released; without it, End
// derives the outcome from the observation (OutcomeOf).
func (x *Exchange) SetOutcome(o scheduler.Outcome) { x.outcome, x.outcomeSet = o, true }

// Outcome is the outcome set so far (scheduler.Done when none).
func (x *Exchange) Outcome() scheduler.Outcome { return x.outcome }

// SetEndpoint names the endpoint the last attempt went to; without it the
// Record names the lease's (scheduler.EndpointOf).
func (x *Exchange) SetEndpoint(e string) { x.endpoint, x.endpointSet = e, true }

// errClientGone is the cause of a request whose client went away.
var errClientGone = fmt.Errorf("client cancelled: %w", context.Canceled)

// Finish ends the observation at t and releases the admission, once;
// later calls do nothing. cause is what ended the response (nil: its
// clean end); when nil, the error the host recorded (Fail, or a
// cancellation) stands in.
func (x *Exchange) Finish(t time.Time, cause error) {
	if x.finished {
		return
	}
	x.finished = true
	if cause == nil {
		cause = x.cause
	}
	if cause == nil && x.outcomeSet && x.outcome == scheduler.Cancelled {
		cause = errClientGone
	}
	if cause == nil && x.err != nil && x.obs.obs.HTTPStatus == 0 {
		cause = x.err
	}
	x.obs.Finish(t, cause)
	x.Release()
}

// Release gives the admission back with the request's outcome, exactly
// once (Finish calls it; a host that must free the slot before the
// observation ends calls it itself).
func (x *Exchange) Release() {
	o := x.outcome
	if !x.outcomeSet {
		o = OutcomeOf(&x.obs.obs, x.preempted)
		if x.lease != nil && !x.released {
			x.outcome = o
		}
	}
	if x.lease == nil || x.released {
		return
	}
	x.released = true
	x.lease.Release(o)
}

// Abort ends the exchange at once with outcome o, without finishing the
// observation (a host that met a fault of its own): the admission is
// released, and End records what was observed so far.
func (x *Exchange) Abort(o scheduler.Outcome) {
	x.finished = true
	x.SetOutcome(o)
	x.Release()
}

// Released reports whether the current admission was given back (true
// when there is none).
func (x *Exchange) Released() bool { return x.lease == nil || x.released }

// Drop ends the exchange without a Record, for a host whose request went
// away before it could report one; the observer goes back to its pool.
// Release first: Drop releases nothing.
func (x *Exchange) Drop() {
	if x.ended {
		return
	}
	x.ended = true
	PutObserver(x.obs)
	x.obs = nil
}

// Finished reports whether Finish ran.
func (x *Exchange) Finished() bool { return x.finished }

// End finishes the exchange at t (Finish, if it did not run), hands its
// Record to the configured Recorder and returns it. The observer goes back
// to its pool: the Record's ITL samples are valid only until End returns,
// and nothing but the Record may be used afterwards. Later calls return
// the zero Record.
func (x *Exchange) End(t time.Time, cause error) Record {
	if x.ended {
		return Record{}
	}
	x.Finish(t, cause)
	x.ended = true
	ob := x.obs.Observation()
	outcome := x.outcome
	if !x.leased {
		outcome = scheduler.Done // never admitted: nothing was released
	}
	rec := Record{
		Observation: ob,
		Class:       x.class.Name,
		Model:       x.meta.Model,
		Pool:        x.head.Pool,
		Outcome:     outcome,
		Preemptions: x.preemptions,
		Err:         x.err,
		Passthrough: x.head.Passthrough,
		Endpoint:    x.endpoint,
	}
	if !x.endpointSet && x.lease != nil {
		rec.Endpoint = scheduler.EndpointOf(x.lease)
	}
	if x.cfg.Recorder != nil {
		x.cfg.Recorder.Record(rec)
	}
	PutObserver(x.obs)
	x.obs = nil
	return rec
}

// Reply is the answer to err, for the request's protocol (ReplyFor).
func (x *Exchange) Reply(err error) Reply { return ReplyFor(err) }

// ServerTiming is the Server-Timing value of the measurement so far at t.
// Before the end (ending false) that is the queue time. At the end, E2E
// runs to t and TPOT follows Observation's definition when the
// observation is not finished yet (a host writes the trailer before it
// ends the request), and the preemptions the client could not see
// (a transparent requeue or continuation) are named.
func (x *Exchange) ServerTiming(t time.Time, ending bool) string {
	ob := x.obs.Observation()
	if ending && !x.finished && !ob.Received.IsZero() {
		ob.E2E = t.Sub(ob.Received)
		if ob.HasTTFT && ob.OutputTokens > 1 && ob.Protocol != ProtocolJSON {
			ob.TPOT = (ob.E2E - ob.TTFT) / time.Duration(ob.OutputTokens-1)
			ob.HasTPOT = true
		}
	}
	st := AppendServerTiming(make([]byte, 0, 160), &ob)
	if ending && x.preemptions > 0 && !x.preempted {
		if len(st) > 0 {
			st = append(st, ", "...)
		}
		st = append(st, `preemptions;desc="`...)
		st = strconv.AppendInt(st, int64(x.preemptions), 10)
		st = append(st, '"')
	}
	return string(st)
}
