package envoy

import (
	"fmt"
	"math"
	"strings"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/filter"
)

// Engine priority guard. Unless the request's source is trusted for
// priority (the classifier's decision for the priority header), the
// top-level "priority" of an OpenAI JSON body and
// llm.v1.GenerateRequest.priority are removed before the request goes
// upstream, so a client cannot jump an engine's own priority queue
// (filter.RewriteJSONPriority, filter.RewriteGRPCPriority).
//
// The check needs the whole body. When the request is buffered by Envoy
// anyway (JSON relocation, or the model and size read before admission),
// the check runs on that buffer after relocation, before admission.
// Otherwise the request is admitted from its headers as usual and the
// filter collects the body itself (StopNoBuffer, bounded by
// relocation.max_body for JSON and relocation.max_message for llm.v1), so
// Envoy's per-connection buffer limit does not apply, and hands it on
// rewritten with the last chunk. Stripping keeps a JSON body's length, so
// its headers go upstream untouched; an llm.v1 request loses its
// content-length, if it had one, in DecodeHeaders.
//
// For a pool with engine_priority: class the guard writes the request's
// class priority instead (filter.PrioritySet), the class as decided once
// the body is read (classification rules may match its model). That
// changes the body's length, so a JSON request also loses its
// content-length in DecodeHeaders and Envoy frames what it forwards.

// guardKind says which body a request's guard rewrites.
type guardKind uint8

const (
	guardNone guardKind = iota
	guardJSON
	guardGRPC
)

// planPriorityGuard decides in DecodeHeaders, after classification,
// whether the request body must be checked. done is true when the request
// is answered here (a compressed JSON body cannot be checked).
func (f *streamFilter) planPriorityGuard(h api.RequestHeaderMap, hv headers, ct string, endStream bool) (done bool, st api.StatusType) {
	if endStream {
		return false, 0
	}
	switch {
	case f.grpc && f.path == llmv1.Generation_Generate_FullMethodName:
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
	if f.pool.ClassEnginePriority() {
		f.guardMode.Mode = filter.PrioritySet // the value once the class is final
	}
	if f.guard == guardJSON {
		if ce, _ := h.Get("content-encoding"); strings.TrimSpace(ce) != "" && !strings.EqualFold(strings.TrimSpace(ce), "identity") {
			f.guard = guardNone
			return true, f.priorityRefused(f.cb.DecoderFilterCallbacks(),
				fmt.Errorf("%w: content-encoding %s", filter.ErrPriorityEncoding, ce))
		}
		if f.guardMode.Mode == filter.PrioritySet {
			h.Del("content-length") // the body grows or shrinks
		}
		return false, 0
	}
	f.grpcEnc, _ = h.Get("grpc-encoding")
	// The rewritten message may be shorter; Envoy frames what it forwards.
	h.Del("content-length")
	return false, 0
}

// guardLimit bounds the body the filter collects for the check.
func (f *streamFilter) guardLimit() int {
	r := config.Relocation{MaxBody: config.DefaultRelocMaxBody, MaxMessage: config.DefaultRelocMaxMessage}
	if f.cfg.Mesh != nil {
		r = f.cfg.Mesh.Relocation
	}
	if f.guard == guardGRPC {
		return r.MaxMessage + 5 // one message and its prefix
	}
	return r.MaxBody
}

// guardBody runs in DecodeData while the guard holds the body. Before the
// end it collects the chunk (StopNoBuffer: Envoy forgets it). At the end
// it relocates (if planned), rewrites the priority, and forwards the
// whole body; when admission waited for the body (Envoy buffered it for
// relocation or sizing) it reads the model and sizes and admits.
func (f *streamFilter) guardBody(b api.BufferInstance, endStream bool) api.StatusType {
	dcb := f.cb.DecoderFilterCallbacks()
	limit := f.guardLimit()
	if n := len(f.guardBuf) + b.Len(); n > limit {
		f.guard, f.guardBuf = guardNone, nil
		msg := fmt.Sprintf("request body of at least %d bytes exceeds relocation.max_body = %d bytes", n, limit)
		if f.grpc {
			msg = fmt.Sprintf("llm.v1 request of at least %d bytes exceeds relocation.max_message = %d bytes plus its 5-byte prefix", n, limit-5)
		}
		return f.priorityRefused(dcb, fmt.Errorf("%w: %s", filter.ErrPriorityTooLarge, msg))
	}
	if !endStream {
		f.guardBuf = append(f.guardBuf, b.Bytes()...)
		return api.StopNoBuffer
	}
	kind := f.guard
	body := b.Bytes()
	collected := f.guardBuf != nil
	if collected {
		body = append(f.guardBuf, body...)
	}
	f.guard, f.guardBuf = guardNone, nil
	admitNow := f.httpPlan != nil || f.sizing // Envoy buffered the body; admission waits for it
	var err error
	switch {
	case f.httpPlan != nil:
		body, err = f.relocateJSON(body)
		collected = true
	case f.grpcRW != nil:
		body, err = f.relocateGRPCBody(body)
		collected = true
	}
	if err != nil {
		return f.relocationFailed(dcb, err)
	}
	if f.sizing {
		f.readBody(body) // the model may decide the class, and so the priority
	}
	mode := f.guardMode
	if mode.Mode == filter.PrioritySet {
		mode.Value = classPriority(f.class)
	}
	var changed bool
	if kind == guardGRPC {
		body, changed, err = filter.RewriteGRPCPriority(body, f.grpcEnc, limit-5, filter.LLMv1PriorityField, mode)
	} else {
		body, changed, err = filter.RewriteJSONPriority(body, mode)
	}
	if err != nil {
		return f.priorityRefused(dcb, err)
	}
	if changed {
		if mode.Mode == filter.PrioritySet {
			f.m.prioritySet.Increment(1)
		} else {
			f.m.priorityStripped.Increment(1)
		}
	}
	if changed || collected {
		if err := b.Set(body); err != nil {
			return f.relocationFailed(dcb, err)
		}
	}
	if !admitNow {
		return api.Continue
	}
	f.reqHV = headers{}
	return f.admit()
}

// classPriority is the engine priority written for class c. The mesh
// config keeps class priorities within int32 for pools that write them.
func classPriority(c filter.Class) int32 {
	return int32(min(max(c.Priority, math.MinInt32), math.MaxInt32))
}

func (f *streamFilter) priorityRefused(cb api.FilterProcessCallbacks, err error) api.StatusType {
	f.m.priorityRefused.Increment(1)
	f.noteRefused(err)
	f.finishOnPanic() // releases an admission made from the headers
	return f.reply(cb, filter.ReplyFor(err))
}

// errGuardTrailers: the body collected so far would be lost (Envoy has
// forgotten it) or handed on unchecked.
var errGuardTrailers = fmt.Errorf("%w: request trailers cannot follow a body checked for a client-set priority", filter.ErrPriorityBody)

// guardTrailers refuses request trailers while the guard holds the body.
func (f *streamFilter) guardTrailers() api.StatusType {
	f.guard, f.guardBuf = guardNone, nil
	return f.priorityRefused(f.cb.DecoderFilterCallbacks(), errGuardTrailers)
}
