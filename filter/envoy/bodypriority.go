package envoy

import (
	"errors"
	"strconv"
	"strings"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"

	"github.com/llmesh/llmesh/filter"
)

// Engine priority guard. Unless the request's source is trusted for
// priority (the classifier's decision for the priority header), the
// top-level "priority" of an OpenAI JSON body and
// llm.v1.GenerateRequest.priority are removed before the request goes
// upstream, so a client cannot jump an engine's own priority queue
// (filter.RewriteJSONPriority, filter.RewriteGRPCPriority).
//
// The body is buffered for it (StopAndBuffer in DecodeHeaders; Envoy
// answers 413 past its buffer limit) and admission waits for the whole
// body, as for relocation. Prompt relocation runs first on the buffered
// body, so a relocated header cannot bring a priority back.

// guardKind says which body a request's guard rewrites.
type guardKind uint8

const (
	guardNone guardKind = iota
	guardJSON
	guardGRPC
)

// grpcInvalidArgument is the gRPC status of a body that cannot be checked.
const grpcInvalidArgument = 3

// maxGuardMessage bounds a compressed llm.v1 message once decompressed,
// when the relocation section sets no max_message.
const maxGuardMessage = 32 << 20

// planPriorityGuard decides in DecodeHeaders, after classification,
// whether the request body must be checked. done is true when the request
// is answered here (a compressed JSON body cannot be checked).
func (f *streamFilter) planPriorityGuard(h api.RequestHeaderMap, hv headers, ct string, endStream bool) (done bool, st api.StatusType) {
	if endStream {
		return false, 0
	}
	switch {
	case f.grpc && f.path == filter.LLMv1GenerateMethod:
		f.guard = guardGRPC
	case !f.grpc && filter.IsJSONBody(ct):
		f.guard = guardJSON
	default:
		return false, 0
	}
	f.guardMode = f.cfg.classifier.BodyPriority(f.peer, hv)
	if f.guardMode.Mode == filter.PriorityKeep {
		f.guard = guardNone
		return false, 0
	}
	if f.guard == guardJSON {
		if ce, _ := h.Get("content-encoding"); strings.TrimSpace(ce) != "" && !strings.EqualFold(strings.TrimSpace(ce), "identity") {
			f.guard = guardNone
			return true, f.priorityRefused(f.cb.DecoderFilterCallbacks(), localReply{http: 415, grpc: grpcInvalidArgument,
				body: "content-encoding " + ce + ": a compressed JSON body cannot be checked for a client-set priority", details: "llmesh_priority_body"})
		}
	}
	f.grpcEnc, _ = h.Get("grpc-encoding")
	f.reqH = h
	return false, 0
}

// guardBody runs in DecodeData while the guard buffers the body: at the
// end of the body it relocates (if planned), rewrites the priority, fixes
// content-length, reads the model and sizes (if needed) and admits.
func (f *streamFilter) guardBody(b api.BufferInstance, endStream bool) api.StatusType {
	if !endStream {
		return api.StopAndBuffer
	}
	dcb := f.cb.DecoderFilterCallbacks()
	kind, h := f.guard, f.reqH
	f.guard, f.reqH = guardNone, nil
	body := b.Bytes()
	rewritten := false
	var err error
	switch {
	case f.httpPlan != nil:
		body, err = f.relocateJSON(body)
		rewritten = true
	case f.grpcRW != nil:
		body, err = f.relocateGRPCBody(body)
		rewritten = true
	}
	if err != nil {
		return f.relocationFailed(dcb, err)
	}
	var changed bool
	if kind == guardGRPC {
		body, changed, err = filter.RewriteGRPCPriority(body, f.grpcEnc, f.maxGuardMessage(), filter.LLMv1PriorityField, f.guardMode)
	} else {
		body, changed, err = filter.RewriteJSONPriority(body, f.guardMode)
	}
	if err != nil {
		r := localReply{http: 400, grpc: grpcInvalidArgument, body: err.Error(), details: "llmesh_priority_body"}
		if errors.Is(err, filter.ErrPriorityTooLarge) {
			r.http, r.grpc = 413, grpcResourceExhausted
		}
		f.finishOnPanic() // releases nothing yet held; ends the observer's use
		return f.priorityRefused(dcb, r)
	}
	if changed {
		f.m.priorityStripped.Increment(1)
	}
	if changed || rewritten {
		if err := b.Set(body); err != nil {
			return f.relocationFailed(dcb, err)
		}
		if _, ok := h.Get("content-length"); ok {
			h.Set("content-length", strconv.Itoa(len(body)))
		}
	}
	if f.sizing {
		f.readBody(body)
	}
	f.reqHV = headers{}
	return f.admit()
}

// maxGuardMessage is the decompressed size bound for llm.v1 messages:
// the relocation section's max_message, which bounds the same messages
// when a prompt is relocated.
func (f *streamFilter) maxGuardMessage() int {
	if f.cfg.Mesh != nil && f.cfg.Mesh.Relocation.MaxMessage > 0 {
		return f.cfg.Mesh.Relocation.MaxMessage
	}
	return maxGuardMessage
}

func (f *streamFilter) priorityRefused(cb api.FilterProcessCallbacks, r localReply) api.StatusType {
	f.m.priorityRefused.Increment(1)
	return f.reply(cb, r)
}

// errGuardTrailers: Envoy would hand the buffered body on before the
// priority check if request trailers followed it.
var errGuardTrailers = errors.New("request trailers cannot follow a body checked for a client-set priority")

// guardTrailers refuses request trailers while the guard buffers the body.
func (f *streamFilter) guardTrailers() api.StatusType {
	f.guard, f.reqH = guardNone, nil
	f.finishOnPanic()
	return f.priorityRefused(f.cb.DecoderFilterCallbacks(), localReply{http: 400, grpc: grpcInvalidArgument,
		body: errGuardTrailers.Error(), details: "llmesh_priority_body"})
}
