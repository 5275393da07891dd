package envoyfilter

import (
	"fmt"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/exchange"
)

// Engine priority guard. Unless the request's source is trusted for
// priority (the classifier's decision for the priority header), the
// top-level "priority" of an OpenAI JSON body and
// llm.v1.GenerateRequest.priority are removed before the request goes
// upstream, so a client cannot jump an engine's own priority queue
// (exchange.RewriteJSONPriority, exchange.RewriteGRPCPriority).
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
// class priority instead (exchange.PrioritySet), the class as decided once
// the body is read (classification rules may match its model). That
// changes the body's length, so a JSON request also loses its
// content-length in DecodeHeaders and Envoy frames what it forwards.

// relocation is the mesh's relocation limits, the defaults without a mesh.
func (f *streamFilter) relocation() config.Relocation {
	if f.cfg.Mesh != nil {
		return f.cfg.Mesh.Relocation
	}
	return config.Relocation{MaxBody: config.DefaultRelocMaxBody, MaxMessage: config.DefaultRelocMaxMessage}
}

// guardLimit bounds the body the filter collects for the check.
func (f *streamFilter) guardLimit() int {
	r := f.relocation()
	if f.x.View().Plan.Guard == exchange.GuardGRPC {
		return r.MaxMessage + 5 // one message and its prefix
	}
	return r.MaxBody
}

// guardBody runs in DecodeData while the guard holds the body. Before the
// end it collects the chunk (StopNoBuffer: Envoy forgets it). At the end
// it relocates (if planned), rewrites the priority (the core's Guard), and
// forwards the whole body; when admission waited for the body (Envoy
// buffered it for relocation or sizing) it reads the model and sizes and
// admits.
func (f *streamFilter) guardBody(b api.BufferInstance, endStream bool) api.StatusType {
	dcb := f.cb.DecoderFilterCallbacks()
	limit := f.guardLimit()
	if n := len(f.guardBuf) + b.Len(); n > limit {
		if endStream && f.guardBuf == nil {
			f.noteModel(b.Bytes())
		}
		f.guarding, f.guardBuf = false, nil
		msg := fmt.Sprintf("request body of at least %d bytes exceeds relocation.max_body = %d bytes", n, limit)
		if f.x.View().Plan.Guard == exchange.GuardGRPC {
			msg = fmt.Sprintf("llm.v1 request of at least %d bytes exceeds relocation.max_message = %d bytes plus its 5-byte prefix", n, limit-5)
		}
		return f.priorityRefused(dcb, fmt.Errorf("%w: %s", exchange.ErrPriorityTooLarge, msg))
	}
	if !endStream {
		f.guardBuf = append(f.guardBuf, b.Bytes()...)
		return api.StopNoBuffer
	}
	body := b.Bytes()
	collected := f.guardBuf != nil
	if collected {
		body = append(f.guardBuf, body...)
	}
	f.guarding, f.guardBuf = false, nil
	admitNow := f.httpPlan != nil || f.sizing // Envoy buffered the body; admission waits for it
	whole := body
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
		f.noteModel(whole)
		return f.relocationFailed(dcb, err)
	}
	if f.sizing {
		// The model may decide the class, and so the priority.
		if err := f.readBody(body); err != nil {
			return f.refuseBody(dcb, err)
		}
	}
	body, changed, err := f.x.Guard(body)
	if err != nil {
		return f.priorityRefused(dcb, err)
	}
	if changed {
		if f.x.View().GuardMode == exchange.PrioritySet {
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

func (f *streamFilter) priorityRefused(cb api.FilterProcessCallbacks, err error) api.StatusType {
	f.m.priorityRefused.Increment(1)
	return f.refuse(cb, err) // releases an admission made from the headers
}

// errGuardTrailers: the body collected so far would be lost (Envoy has
// forgotten it) or handed on unchecked.
var errGuardTrailers = fmt.Errorf("%w: request trailers cannot follow a body checked for a client-set priority", exchange.ErrPriorityBody)

// guardTrailers refuses request trailers while the guard holds the body.
func (f *streamFilter) guardTrailers() api.StatusType {
	f.guarding, f.guardBuf = false, nil
	return f.priorityRefused(f.cb.DecoderFilterCallbacks(), errGuardTrailers)
}
