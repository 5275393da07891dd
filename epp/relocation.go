package epp

import (
	"errors"
	"fmt"
	"strings"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"

	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/exchange/relocate"
)

// Prompt relocation (the mesh's relocation section, exchange/relocate) in
// the picker: the prompt a client put into a header or gRPC metadata is
// moved into the request body with the other hosts' semantics, through
// ext_proc mutations. The picker holds the whole body before it answers
// (full duplex: nothing goes upstream before the headers answer; buffered:
// Envoy holds the headers for the body answer), so the header is removed
// by the answer's header mutation and the rewritten body is what the
// picker streams back or the answer's body mutation. In STREAMED mode the
// headers go upstream with the headers answer and every chunk with its
// own, so a request whose prompt must move is refused at its headers
// (errRelocationStreamed), before anything of it went on.

var (
	// errNoBody: the prompt must move into a body the request does not
	// have (the Envoy filter host's refusal, 400).
	errNoBody = errors.New("the request has no body to carry the relocated prompt")
	// errRelocationStreamed: a prompt to relocate on a stream in STREAMED
	// request mode, where the picker cannot rewrite the request in time.
	errRelocationStreamed = fmt.Errorf("%w: the prompt must be moved from the header into the body, which the picker cannot do in STREAMED request mode (use FULL_DUPLEX_STREAMED or BUFFERED)", exchange.ErrInternal)
)

// protoHeaders is the relocation's view of Envoy's request header map:
// every value of a name (Envoy sends a repeated header as several
// entries), matched case-insensitively, so a prompt sent twice is refused
// as the other hosts refuse it.
type protoHeaders struct{ m *corev3.HeaderMap }

var _ relocate.Headers = protoHeaders{}

func (h protoHeaders) Values(key string) []string {
	var out []string
	for _, hv := range h.m.GetHeaders() {
		if !strings.EqualFold(hv.GetKey(), key) {
			continue
		}
		v := hv.GetValue()
		if len(hv.GetRawValue()) > 0 {
			v = string(hv.GetRawValue())
		}
		out = append(out, v)
	}
	return out
}

// relocation is the plan for one request: at most one of grpc and http.
type relocation struct {
	grpc *relocate.GRPCPlan
	http *relocate.HTTPPlan
}

func (r relocation) none() bool { return r.grpc == nil && r.http == nil }

// planRelocation decides from the request's path and headers whether its
// prompt moves, as the other hosts decide it: gRPC and binary gRPC-Web
// by method and metadata, gRPC-Web-text never (its base64 frames are not
// decoded), anything else by path prefix and header into a JSON body. An
// error is the refusal (a value over its max, a bad value, a compressed
// JSON body).
func (st *stream) planRelocation(path string) (relocation, error) {
	rel := st.s.reloc
	if rel == nil {
		return relocation{}, nil
	}
	h := protoHeaders{st.rawHeaders}
	switch exchange.GRPCKindOf(st.headers.Get("content-type")) {
	case exchange.GRPCWebText:
		return relocation{}, nil
	case exchange.GRPC, exchange.GRPCWeb:
		p, err := rel.PlanGRPC(path, h)
		return relocation{grpc: p}, err
	}
	p, err := rel.PlanHTTP(path, h)
	return relocation{http: p}, err
}

// relocate moves the prompt into the whole request body, st.body, per the
// plan for path: the rewritten body replaces it and the header is noted for
// removal (with content-length, which the body no longer matches). It runs
// before the body is parsed, sized and guarded, so all of those see the
// body the engine gets, as in the other hosts: a relocated priority
// field meets the engine-priority guard.
func (st *stream) relocate(path string) error {
	plan, err := st.planRelocation(path)
	if err != nil || plan.none() {
		return err
	}
	if st.headersEOS {
		return fmt.Errorf("%w: %w", relocate.ErrMalformed, errNoBody)
	}
	on := st.s.cfg.OnRelocated
	if plan.grpc != nil {
		rw := relocate.NewGRPCRewriter(plan.grpc, st.headers.Get("grpc-encoding"), on)
		// The rewriter hands on sub-slices of the body and its own
		// recycled buffer: copied into one body sized for the result.
		out := make([]byte, 0, len(st.body)+plan.grpc.Value.Len()+16)
		err := rw.Write(st.body, func(p []byte) error {
			out = append(out, p...)
			return nil
		})
		if err == nil {
			err = rw.Close()
		}
		if err != nil {
			return err
		}
		st.body = out
		st.removeHeaders = append(st.removeHeaders, plan.grpc.Key)
	} else {
		jb, err := relocate.RewriteJSON(st.body, plan.http, on)
		if err != nil {
			return err
		}
		st.body = jb.Bytes()
		st.removeHeaders = append(st.removeHeaders, strings.ToLower(plan.http.Header))
	}
	st.bodyChanged = true
	return nil
}

// refuseStreamedRelocation refuses, at its headers, a request in STREAMED
// mode whose prompt would have to move (or whose relocation fails): ok is
// false when there is nothing to refuse.
func (st *stream) refuseStreamedRelocation() (ok bool, err error) {
	if st.reqMode != filterv3.ProcessingMode_STREAMED || st.headersEOS || st.s.reloc == nil {
		return false, nil
	}
	path := st.path()
	plan, perr := st.planRelocation(path)
	if perr == nil && plan.none() {
		return false, nil
	}
	if perr == nil {
		perr = errRelocationStreamed
	}
	return true, st.refuseHead(path, perr)
}

// refuseHead answers err for a request the picker refuses from its head:
// routed and classified from its headers (the body is not read), as the
// other hosts record a request refused before its body.
func (st *stream) refuseHead(path string, err error) error {
	h := st.headers
	if pi, routeClass, ok := st.s.route(path, h.Get, strings.HasPrefix(h.Get("content-type"), "application/grpc")); ok {
		st.pool = pi
		st.class = st.s.cls.Classify(exchange.RequestInfo{Path: path, RouteClass: routeClass, Headers: h})
	}
	return st.immediate(err)
}

// path is the request's :path without its query.
func (st *stream) path() string {
	path := st.headers.Get(":path")
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path = path[:i]
	}
	return path
}
