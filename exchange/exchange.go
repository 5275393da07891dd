package exchange

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
	// (before and after decompression); 0 means defaultMaxFrameBytes.
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
	// Misuse is told of every call the request's state does not allow
	// (the call does nothing); nil ignores them. Tests set it to prove a
	// host drives the lifecycle as the transition table says; it must not
	// block.
	Misuse func(call string, s State)
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
	// Passthrough: not a generation call (Generations.Match): proxied without
	// admission and recorded apart.
	Passthrough bool
	// AffinityHeader names the pool's affinity header: its value in
	// Headers is the request's affinity key for the scheduler
	// (scheduler.Request.Affinity). "" means none.
	AffinityHeader string
	// HashPrefix: the pool picks endpoints by prefix (prefix_routing), so
	// Size names the prompt's leading blocks (RequestMeta.Blocks) for the
	// scheduler.
	HashPrefix bool
	// HasBody: a request body follows the head.
	HasBody bool
	// Pin is the endpoint a picker upstream of the host chose
	// (UpstreamPick), "" when none or when the pool does not accept one:
	// the scheduler admits the request there only (scheduler.Request.Pin).
	Pin string
}

// Exchange is the lifecycle of one request, driven by its host one phase
// at a time and written once for every host. Its state (State) moves
// through the transition table in lifecycle.go (allowedIn):
//
//	idle ─Start→ received ─Admitted→ admitted ─ResponseHead→ streaming
//	admitted, streaming ─Requeued→ requeued ─Admitted→ admitted (streaming
//	    when the client's response is under way)
//	received, admitted, requeued, streaming ─Finish→ finished ─End→ ended
//	received, admitted, requeued, streaming ─End→ ended
//
// A call the state does not allow does nothing (ExchangeConfig.Misuse is
// told). The host never decides the scheduler's outcome: it says how the
// request ended (Ending) in Finish or End, and the Exchange releases the
// admission exactly once, on the one transition that leaves a state
// holding it, and makes exactly one Record. See doc.go for which
// goroutine may call what.
//
// Times are passed in: the host reads its own (injected) clock.
type Exchange struct {
	cfg   *ExchangeConfig
	head  RequestHead
	kind  GRPCKind
	state State
	body  bodyState

	class  Class
	meta   RequestMeta
	plan   BodyPlan
	guardP EnginePriority

	obs      *Observer
	lease    scheduler.Lease // the admission held now, nil when none
	progress progressReporter
	endpoint string
	affinity string // the value of the pool's affinity header

	preemptions int
	leases      int               // admissions with a lease so far
	ending      Ending            // how the request ended, set by the transition to Finished
	outcome     scheduler.Outcome // how the last admission ended, for the Record
	err         error             // the Record's Err
}

// Start begins the lifecycle with the request head (Idle → Received): it
// decides gRPC from the content type (GRPCKindOf), classifies from the
// head (the model is not known yet) and plans what the body needs. x may
// be a zero Exchange or one reused after End.
func (x *Exchange) Start(cfg *ExchangeConfig, h RequestHead) {
	if !x.allowed(callStart) {
		return
	}
	*x = Exchange{cfg: cfg, head: h, kind: GRPCKindOf(h.ContentType), state: StateReceived}
	x.affinity = affinity(h.AffinityHeader, h.Headers)
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

// State is where the request is in its lifecycle.
func (x *Exchange) State() State { return x.state }

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

// Admitted records an admission at t (Received or Requeued → Admitted, or
// back to Streaming for a continuation of a response already under way):
// the first marks the queue's end. A nil lease is a request let through
// without the scheduler.
func (x *Exchange) Admitted(t time.Time, l scheduler.Lease) {
	if !x.allowed(callAdmitted) {
		return
	}
	if x.state == StateReceived {
		x.obs.MarkAdmitted(t)
	}
	x.state = StateAdmitted
	if !x.obs.obs.ResponseHeaders.IsZero() {
		x.state = StateStreaming // a continuation: the client's response goes on
	}
	if l != nil {
		x.lease = l
		x.leases++
		x.endpoint = scheduler.EndpointOf(l)
	}
}

// UpstreamSent marks the send of an upstream attempt at t to endpoint
// (host:port; "" names the lease's endpoint, if any). Only attempts before
// the first token count for timing: upstream TTFT is measured to the
// first token the client got, so a continuation's send does not move its
// start.
func (x *Exchange) UpstreamSent(t time.Time, endpoint string) {
	if !x.allowed(callUpstreamSent) {
		return
	}
	if x.obs.obs.TokenChunks == 0 {
		x.obs.MarkUpstreamSent(t)
	}
	if endpoint != "" {
		x.endpoint = endpoint
	}
}

// ResponseHead records the response's status and headers at t
// (Admitted → Streaming; from Received for a response the host's proxy
// made itself before any admission, such as Envoy's buffer-limit 413).
func (x *Exchange) ResponseHead(t time.Time, status int, h Headers) {
	if !x.allowed(callResponseHead) {
		return
	}
	x.state = StateStreaming
	x.obs.ResponseHeaders(t, status, h)
}

// Chunk observes response bytes on their way to the client at t and tells
// the lease the stream's progress when it moved (Streaming). It allocates
// nothing; the error is a parse error, recorded in the observation (the
// host keeps proxying).
func (x *Exchange) Chunk(t time.Time, b []byte) error {
	if x.state != StateStreaming { // allowedIn[callChunk], inlined on the hot path
		x.misuse(callChunk)
		return nil
	}
	err := x.obs.Observe(t, b)
	x.progress.Report(x.lease, x.obs)
	return err
}

// Trailers records the response trailers at t (nil: none) (Streaming).
func (x *Exchange) Trailers(t time.Time, h Headers) {
	if !x.allowed(callTrailers) {
		return
	}
	if h != nil {
		x.obs.Trailers(t, h)
	}
}

// Requeued gives the current admission back, how the attempt ended, for a
// host that sends the request again: Admitted or Streaming → Requeued,
// and Admitted follows with the new lease. EndPreempted (a requeue before
// the first byte, or a mid-stream continuation) counts a preemption;
// EndFailed and EndUnreachable (an upstream that failed before any byte
// reached the client, tried once more elsewhere) release with their
// outcome; any other ending is taken as EndPreempted. The Record stays one
// across the attempts.
func (x *Exchange) Requeued(how Ending) {
	if !x.allowed(callRequeued) {
		return
	}
	if how != EndFailed && how != EndUnreachable {
		how = EndPreempted
		x.preemptions++
	}
	x.release(how.outcome(nil))
	x.state = StateRequeued
}

// Finish ends the response at t, how says (a live state → Finished): the
// observation ends, the admission is released with the outcome the
// ending implies (Ending), and only ServerTiming and End remain. It is for
// a host whose Record comes later than the response's end (Envoy writes
// access logs after the last callback); the first ending stands.
func (x *Exchange) Finish(t time.Time, how Ending, cause error) {
	if !x.allowed(callFinish) {
		return
	}
	x.finish(t, how, cause)
}

// End ends the lifecycle at t (any state but Idle and Ended → Ended):
// Finish(t, how, cause) if the response is not finished yet (a finished
// one keeps its ending), then the Record, handed to the configured
// Recorder and returned. EndDropped makes none (the zero Record), even
// for a finished response: the host lost the request before it could
// report it. The observer goes back to its pool: the Record's ITL samples
// are valid only until End returns, and nothing but the Record may be used
// afterwards.
func (x *Exchange) End(t time.Time, how Ending, cause error) Record {
	if !x.allowed(callEnd) {
		return Record{}
	}
	if x.state != StateFinished {
		x.finish(t, how, cause)
	}
	x.state = StateEnded
	var rec Record
	if how != EndDropped && x.ending != EndDropped {
		rec = x.record()
		if x.cfg.Recorder != nil {
			x.cfg.Recorder.Record(rec)
		}
	}
	PutObserver(x.obs)
	x.obs = nil
	return rec
}

// errClientGone is the cause of a request whose client went away.
var errClientGone = fmt.Errorf("client cancelled: %w", context.Canceled)

// finish is the one transition to Finished: the observation's end and
// the release of the admission held, if any.
func (x *Exchange) finish(t time.Time, how Ending, cause error) {
	if how == EndRefused {
		if cause == nil {
			cause = errRefused
		}
		if errorKindOf(cause) == ErrorCancelled {
			how = EndClientGone // the client left while queued: nobody was refused
		}
	}
	x.state = StateFinished
	x.ending = how
	if cause != nil && how != EndCompleted && x.err == nil {
		x.err = cause
	}
	switch how {
	case EndFault:
		// The host's own fault: free the slot first, and leave the
		// observation as it is (the observer may be what broke).
		x.release(scheduler.Failed)
		return
	case EndDropped:
		x.release(scheduler.Cancelled)
		return
	case EndRefused:
		x.obs.SetError(ErrorHTTPStatus, cause.Error())
	case EndClientGone:
		if errorKindOf(cause) != ErrorCancelled {
			cause = errClientGone
		}
	case EndPreempted:
		x.preemptions++
		msg := "preempted by the scheduler"
		if cause == nil {
			cause = scheduler.ErrPreempted
			x.err = cause
		} else {
			msg = cause.Error()
		}
		x.obs.SetError(ErrorPreempted, msg)
	}
	x.obs.Finish(t, cause)
	x.release(x.ending.outcome(&x.obs.obs))
}

// errRefused stands in for a refusal whose host named no error.
var errRefused = fmt.Errorf("%w: refused by the host", ErrInternal)

// release gives the admission held back with o. It runs only on the
// transitions out of the states that may hold one (Admitted and Streaming
// → Requeued or Finished, Requeued → Finished), and it drops the lease it
// releases, so each admission is released exactly once.
func (x *Exchange) release(o scheduler.Outcome) {
	if x.leases > 0 {
		x.outcome = o // the Record names the last admission's end
	}
	if l := x.lease; l != nil {
		x.lease = nil
		l.Release(o)
	}
}

func (x *Exchange) record() Record {
	rec := Record{
		Observation: x.obs.Observation(),
		Class:       x.class.Name,
		Model:       x.meta.Model,
		Pool:        x.head.Pool,
		Outcome:     scheduler.Done, // never admitted: nothing was released
		Preemptions: x.preemptions,
		Err:         x.err,
		Passthrough: x.head.Passthrough,
		Endpoint:    x.endpoint,
	}
	if x.leases > 0 {
		rec.Outcome = x.outcome
	}
	return rec
}

// ServerTiming is the Server-Timing value of the measurement so far at t
// (any state but Idle and Ended). Before the end (ending false) that is
// the queue time. At the end, E2E runs to t and TPOT follows
// Observation's definition when the response is not finished yet (a host
// writes the trailer before it ends the request), and the preemptions the
// client could not see (a transparent requeue or continuation) are named.
func (x *Exchange) ServerTiming(t time.Time, ending bool) string {
	if !x.allowed(callServerTiming) {
		return ""
	}
	ob := x.obs.Observation()
	if ending && x.state != StateFinished && !ob.Received.IsZero() {
		ob.E2E = t.Sub(ob.Received)
		if ob.HasTTFT && ob.OutputTokens > 1 && ob.Protocol != ProtocolJSON {
			ob.TPOT = (ob.E2E - ob.TTFT) / time.Duration(ob.OutputTokens-1)
			ob.HasTPOT = true
		}
	}
	st := appendServerTiming(make([]byte, 0, 160), &ob)
	if ending && x.preemptions > 0 && x.ending != EndPreempted {
		if len(st) > 0 {
			st = append(st, ", "...)
		}
		st = append(st, `preemptions;desc="`...)
		st = strconv.AppendInt(st, int64(x.preemptions), 10)
		st = append(st, '"')
	}
	return string(st)
}

// View is a read-only snapshot of the request as decided so far.
func (x *Exchange) View() ExchangeView {
	v := ExchangeView{
		State: x.state, Kind: x.kind, Class: x.class, Meta: x.meta, Plan: x.plan, Passthrough: x.head.Passthrough,
		Lease: x.lease, Preemptions: x.preemptions, GuardMode: PriorityKeep, obs: x.obs,
		Request: scheduler.Request{
			ID:           x.head.ID,
			Pool:         x.head.Pool,
			Class:        x.class.Name,
			PromptTokens: x.meta.PromptTokens,
			MaxTokens:    x.meta.MaxTokens,
			Arrival:      x.head.Received,
			Affinity:     x.affinity,
			Blocks:       x.meta.Blocks,
			Pin:          x.head.Pin,
		},
	}
	if x.plan.Guard != GuardNone {
		v.GuardMode = x.guardP.Mode
	}
	if x.obs != nil {
		v.Progress = x.obs.Progress()
	}
	return v
}

// ExchangeView is what an Exchange decided and saw so far, for its host
// to read: a value, taken by Exchange.View. Observation and Output read
// the request's observer, so a view is valid only until the Exchange ends.
type ExchangeView struct {
	State State
	// Kind is the request's gRPC flavour (GRPCNone: not gRPC).
	Kind GRPCKind
	// Class is the request's class as decided so far.
	Class Class
	// Meta is what Size read from the body (the zero value before), and
	// the model NoteModel read.
	Meta RequestMeta
	// Plan is what the host must do with the body (decided in Start).
	Plan BodyPlan
	// GuardMode is the guard's decision for the body (PriorityKeep when
	// none).
	GuardMode PriorityMode
	// Passthrough: not a generation call.
	Passthrough bool
	// Lease is the admission held now, nil when none.
	Lease scheduler.Lease
	// Preemptions counts the preemptions so far.
	Preemptions int
	// Progress is the stream's progress in the scheduler's terms.
	Progress scheduler.Progress
	// Request is what the host asks the scheduler to admit.
	Request scheduler.Request

	obs *Observer
}

// GRPC reports whether the request is gRPC of any kind (GRPCKindOf): it
// is routed as gRPC and answered with a gRPC status.
func (v ExchangeView) GRPC() bool { return v.Kind != GRPCNone }

// Observation is the measurement so far (partial before the response's
// end); the zero value once the Exchange ended.
func (v ExchangeView) Observation() Observation {
	if v.obs == nil {
		return Observation{}
	}
	return v.obs.Observation()
}

// Output is the text generated so far (ExchangeConfig.KeepOutput, for a
// spliceable request): the observer's buffer, valid until the next call
// on the Exchange.
func (v ExchangeView) Output() []byte {
	if v.obs == nil {
		return nil
	}
	text, _ := v.obs.Output()
	return text
}
