package envoyfilter

import (
	"errors"
	"fmt"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"

	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/exchange/relocate"
)

// planRelocation decides in DecodeHeaders whether a prompt is moved from
// metadata/headers into the body. done is true when the callback's status
// is decided here (a local reply, or StopAndBuffer to collect a JSON body
// whose admission then happens in DecodeData).
//
// gRPC: the metadata entry is removed now and the first request message is
// rewritten as it streams through DecodeData, so streaming calls are not
// buffered. HTTP/JSON: the whole body is needed, so the request is buffered
// (StopAndBuffer; Envoy answers 413 past its buffer limit) and the header
// map stays writable until the buffered DecodeData.
func (f *streamFilter) planRelocation(h api.RequestHeaderMap, hv headers, endStream bool) (bool, api.StatusType) {
	rel := f.cfg.rt.reloc
	dcb := f.cb.DecoderFilterCallbacks()
	switch f.x.View().Kind {
	case exchange.GRPCWebText:
		// Base64 frames are not decoded: nothing is relocated into them.
		return false, 0
	case exchange.GRPC, exchange.GRPCWeb:
		plan, err := rel.PlanGRPC(f.path, hv)
		if err != nil {
			return true, f.relocationFailed(dcb, err)
		}
		if plan == nil {
			return false, 0
		}
		if endStream {
			return true, f.relocationFailed(dcb, errNoBody)
		}
		enc, _ := h.Get("grpc-encoding")
		h.Del(plan.Key)
		h.Del("content-length")
		f.grpcPlan = plan
		f.grpcRW = relocate.NewGRPCRewriter(plan, enc, f.onRelocated)
		return false, 0
	}
	plan, err := rel.PlanHTTP(f.path, hv)
	if err != nil {
		return true, f.relocationFailed(dcb, err)
	}
	if plan == nil {
		return false, 0
	}
	if endStream {
		return true, f.relocationFailed(dcb, errNoBody)
	}
	h.Del(plan.Header)
	// The body grows; Envoy recomputes framing for the upstream.
	h.Del("content-length")
	f.httpPlan = plan
	return true, api.StopAndBuffer
}

var (
	errNoBody   = errors.New("the request has no body to carry the relocated prompt")
	errTrailers = errors.New("request trailers cannot follow a JSON body whose prompt is relocated")
)

func (f *streamFilter) onRelocated(kind string, n int) { f.m.relocated.Increment(1) }

func (f *streamFilter) relocationFailed(cb api.FilterProcessCallbacks, err error) api.StatusType {
	f.m.relocationErrors.Increment(1)
	if errors.Is(err, errNoBody) || errors.Is(err, errTrailers) {
		err = fmt.Errorf("%w: %w", relocate.ErrMalformed, err)
	}
	return f.refuse(cb, err)
}

// relocateBody rewrites request body data (DecodeData) per the plan made
// in DecodeHeaders.
func (f *streamFilter) relocateBody(b api.BufferInstance, endStream bool) api.StatusType {
	dcb := f.cb.DecoderFilterCallbacks()
	if f.httpPlan != nil {
		// Buffered: Envoy calls once with the whole body and endStream
		// (DecodeHeaders returned StopAndBuffer). Without endStream it is
		// handing the body over before request trailers: keep it here, as
		// StopAndBuffer would let Envoy send it on, and the held headers
		// with it, before DecodeTrailers refuses the request.
		if !endStream {
			f.sizeBuf = append(f.sizeBuf, b.Bytes()...)
			return api.StopNoBuffer
		}
		in := b.Bytes()
		if f.sizeBuf != nil {
			in = append(f.sizeBuf, in...)
			f.sizeBuf = nil
		}
		body, err := f.relocateJSON(in)
		if err != nil {
			f.noteModel(in)
			return f.relocationFailed(dcb, err)
		}
		if err := b.Set(body); err != nil {
			return f.relocationFailed(dcb, err)
		}
		if f.sizing {
			if err := f.readBody(body); err != nil {
				return f.refuseBody(dcb, err)
			}
		}
		f.reqHV = headers{}
		return f.admit()
	}
	rw := f.grpcRW
	f.relocOut = f.relocOut[:0]
	err := rw.Write(b.Bytes(), func(p []byte) error {
		f.relocOut = append(f.relocOut, p...)
		return nil
	})
	if err == nil && endStream {
		err = rw.Close()
	}
	if err != nil {
		f.grpcRW = nil
		return f.relocationFailed(dcb, err)
	}
	if rw.Relocated() {
		// Everything after the first message passes untouched.
		f.grpcRW = nil
	}
	if len(f.relocOut) == 0 && !endStream {
		// The rewriter keeps the partial first message itself.
		return api.StopNoBuffer
	}
	if err := b.Set(f.relocOut); err != nil {
		return f.relocationFailed(dcb, err)
	}
	return api.Continue
}

// relocateJSON rewrites a whole buffered JSON body per the plan made in
// DecodeHeaders and ends the relocation.
func (f *streamFilter) relocateJSON(body []byte) ([]byte, error) {
	plan := f.httpPlan
	f.httpPlan = nil
	out, err := relocate.RewriteJSON(body, plan, f.onRelocated)
	if err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// relocateGRPCBody rewrites a whole buffered gRPC request body (the
// priority guard buffers llm.v1 requests) and ends the relocation.
func (f *streamFilter) relocateGRPCBody(body []byte) ([]byte, error) {
	rw := f.grpcRW
	f.grpcRW = nil
	var out []byte
	err := rw.Write(body, func(p []byte) error {
		out = append(out, p...)
		return nil
	})
	if err == nil {
		err = rw.Close()
	}
	return out, err
}
