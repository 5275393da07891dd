package gateway

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"strings"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/filter"
)

// guardPriority keeps a client from choosing its engine priority: unless
// the request's source is trusted for priority (the classifier's decision
// for the priority header), the top-level "priority" of an OpenAI JSON
// body and llm.v1.GenerateRequest.priority are removed before the body
// goes upstream (filter.RewriteJSONPriority, filter.RewriteGRPCPriority).
// It runs on the body as read for admission, after prompt relocation (a
// wrapper around the handler), so a relocated header cannot bring a
// priority back; retries and continuations reuse the guarded body.
//
// A body it cannot read reliably is refused: err is the refusal, which
// the core's reply table answers (400 / INVALID_ARGUMENT, or 413 /
// RESOURCE_EXHAUSTED past max_request_bytes once decompressed). Bodies of
// other content types and other gRPC methods pass as they are.
//
// For a pool with ClassPriority, untrusted requests get their class's
// priority written instead (filter.PrioritySet): class is the one the
// handler decided from the route and the body's model, so that an engine
// scheduling by priority orders its queue by the mesh's classes.
func (g *Gateway) guardPriority(r *http.Request, rt *compiled, pool *compiledPool, class string, body []byte, grpcReq bool) ([]byte, error) {
	if len(body) == 0 {
		return body, nil
	}
	if grpcReq && r.URL.Path != llmv1.Generation_Generate_FullMethodName {
		return body, nil
	}
	if !grpcReq && !filter.IsJSONBody(r.Header.Get("Content-Type")) {
		return body, nil
	}
	peer, _ := netip.ParseAddrPort(r.RemoteAddr)
	p := g.classifier.Load().BodyPriority(peer.Addr().Unmap(), r.Header)
	if p.Mode == filter.PriorityKeep {
		return body, nil
	}
	if pool.ClassPriority {
		p = filter.EnginePriority{Mode: filter.PrioritySet, Value: g.classPriority(class)}
	}
	var (
		out []byte
		err error
	)
	if grpcReq {
		out, _, err = filter.RewriteGRPCPriority(body, r.Header.Get("Grpc-Encoding"), int(rt.cfg.MaxRequestBytes), filter.LLMv1PriorityField, p)
	} else {
		if ce := strings.TrimSpace(r.Header.Get("Content-Encoding")); ce != "" && !strings.EqualFold(ce, "identity") {
			return nil, fmt.Errorf("%w: Content-Encoding %s", filter.ErrPriorityEncoding, ce)
		}
		out, _, err = filter.RewriteJSONPriority(body, p)
	}
	if errors.Is(err, filter.ErrPriorityTooLarge) {
		return nil, fmt.Errorf("%w (max_request_bytes)", err)
	}
	return out, err
}

// classPriority is the priority of class (the default class when the
// classifier knows no other); 0, the engine's default, without a
// classifier.
func (g *Gateway) classPriority(class string) int32 {
	c := g.classifier.Load()
	if c == nil {
		return 0
	}
	cl, ok := c.Class(class)
	if !ok {
		cl = c.Default()
	}
	// The mesh config keeps class priorities within int32 for such pools;
	// a hand-built classifier is clamped.
	return int32(min(max(cl.Priority, math.MinInt32), math.MaxInt32))
}
