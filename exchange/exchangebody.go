package exchange

import (
	"fmt"
	"math"
	"strings"
)

// The body phase of an Exchange: what the body needs (decided from the
// head), the model and sizes read from it, and the engine-priority guard.

// GuardKind is which body the engine-priority guard rewrites.
type GuardKind uint8

const (
	// GuardNone: the body goes upstream as it is.
	GuardNone GuardKind = iota
	// GuardJSON: the top-level "priority" of an OpenAI JSON body.
	GuardJSON
	// GuardGRPC: llm.v1.GenerateRequest.priority.
	GuardGRPC
)

// BodyPlan says what a host must do with the request body, decided from
// the request head.
type BodyPlan struct {
	// Size: read the whole body before admission (Exchange.Size): the
	// configuration needs its model or sizes.
	Size bool
	// Guard: the whole body must pass Exchange.Guard before it goes
	// upstream.
	Guard GuardKind
	// DropContentLength: the guard may change the body's length; the host
	// must not forward the request's Content-Length.
	DropContentLength bool
	// Refuse, when not nil, is why the request is refused before its body
	// (a compressed JSON body cannot be checked): the host answers
	// ReplyFor(Refuse) and ends the request with EndRefused.
	Refuse error
}

// sizable: the core reads this body's model and sizes (an OpenAI JSON
// body, or the message of a gRPC generation it knows).
func (x *Exchange) sizable() bool {
	if x.kind.Framed() {
		return x.head.Path == MethodLLMV1 || x.head.Path == MethodVLLM
	}
	if x.kind != GRPCNone {
		return false // gRPC-Web-text: opaque
	}
	return strings.HasPrefix(strings.ToLower(strings.TrimSpace(x.head.ContentType)), "application/json")
}

func (x *Exchange) planBody(h RequestHead) BodyPlan {
	var p BodyPlan
	if !h.HasBody {
		return p
	}
	p.Size = x.cfg.SizeBody && x.sizable()
	switch {
	case x.kind != GRPCNone && h.Path == MethodLLMV1:
		p.Guard = GuardGRPC
	case x.kind == GRPCNone && isJSONBody(h.ContentType):
		p.Guard = GuardJSON
	default:
		return p
	}
	x.guardP = x.cfg.Classifier.BodyPriority(h.Peer, h.Headers)
	if x.guardP.Mode == PriorityKeep {
		p.Guard = GuardNone
		return p
	}
	if h.ClassPriority {
		x.guardP.Mode = PrioritySet // the value once the class is final
	}
	if x.kind == GRPCWebText {
		// Base64 frames the core does not decode: a priority in them
		// could not be seen.
		p.Guard = GuardNone
		p.Refuse = errGuardWebText
		return p
	}
	if p.Guard == GuardJSON {
		if ce := strings.TrimSpace(h.ContentEncoding); ce != "" && !strings.EqualFold(ce, "identity") {
			p.Guard = GuardNone
			p.Refuse = fmt.Errorf("%w: content-encoding %s", errPriorityEncoding, ce)
			return p
		}
		p.DropContentLength = x.guardP.Mode == PrioritySet // the body grows or shrinks
		return p
	}
	p.DropContentLength = true // a rewritten message may be shorter
	return p
}

// bodyState is how far the core read the request body.
type bodyState uint8

const (
	bodyUnread bodyState = iota
	bodyNoted            // NoteModel looked at the first chunk
	bodySized            // Size read the whole body
)

// NoteModel reads the model from the first request chunk when the host
// does not size the body (Size reads it otherwise): whole is true when b
// is the whole body (a JSON body must be whole; a gRPC body needs its
// first message). Only the first call after Start looks at b, so a host
// may offer every chunk.
func (x *Exchange) NoteModel(b []byte, whole bool) {
	if !x.allowed(callNoteModel) || x.body != bodyUnread {
		return
	}
	x.body = bodyNoted
	if x.meta.Model != "" || x.kind == GRPCWebText || (x.kind == GRPCNone && !whole) {
		return
	}
	x.meta.Model = requestModel(x.head.Path, b, x.kind.Framed())
}

// Size reads the model and sizes of the whole request body
// (ReadRequestMeta) and classifies again with the model. h are the request
// headers, valid during the call; nil keeps the class (the host no longer
// has them). A body the core cannot read leaves the sizes unknown. The
// error, an ErrBadRequest naming the field, is a request no engine can
// serve (RequestMeta.Invalid): the host refuses it (EndRefused). Size is
// for the Received state, before the admission.
func (x *Exchange) Size(body []byte, h Headers) error {
	if !x.allowed(callSize) {
		return nil
	}
	model := x.meta.Model
	x.meta = RequestMeta{}
	if x.kind != GRPCWebText {
		x.meta = readRequestMeta(x.head.Path, body, x.kind.Framed(), x.head.HashPrefix)
	}
	if x.meta.Model == "" {
		x.meta.Model = model
	}
	x.body = bodySized
	if x.meta.Model != "" && h != nil {
		x.classify(h)
	}
	if x.cfg.KeepOutput && x.meta.Spliceable {
		x.obs.opts.KeepOutput = true
	}
	if x.meta.Invalid != "" {
		return fmt.Errorf("%w: %s", ErrBadRequest, x.meta.Invalid)
	}
	return nil
}

// Guard applies the engine-priority guard to the whole body: out is the
// body to send upstream and changed whether it differs from body. An error
// is the refusal (ReplyFor gives its answer): a body it cannot read
// reliably. With a PrioritySet guard the priority written is the class's
// as decided now (after Size). Guard runs before the admission or, for a
// host that admits from the head, before the response (Received or
// Admitted).
func (x *Exchange) Guard(body []byte) (out []byte, changed bool, err error) {
	if !x.allowed(callGuard) || x.plan.Guard == GuardNone || len(body) == 0 {
		return body, false, nil
	}
	p := x.guardP
	if p.Mode == PrioritySet {
		p.Value = classPriority(x.class)
	}
	if x.plan.Guard == GuardGRPC {
		limit := x.cfg.GuardMaxMessage
		if limit <= 0 {
			limit = defaultMaxFrameBytes
		}
		return RewriteGRPCPriority(body, x.head.GRPCEncoding, limit, llmV1PriorityField, p)
	}
	return RewriteJSONPriority(body, p)
}

// classPriority is the engine priority written for class c; the mesh
// config keeps class priorities within int32 for pools that write them,
// a hand-built classifier is clamped.
func classPriority(c Class) int32 {
	return int32(min(max(c.Priority, math.MinInt32), math.MaxInt32))
}

// errGuardWebText refuses a gRPC-Web-text generation whose priority the
// guard must check.
var errGuardWebText = fmt.Errorf("%w: a gRPC-Web-text (base64) request cannot be checked; send application/grpc-web", ErrPriorityBody)
