package envoyfilter

import (
	"testing"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"

	"github.com/llmesh/llmesh/testkit/fakesdk"
)

// TestListenerRoutesByProtocol: the filter routes by the mesh listener's
// routes with the gateway's rule: a route to a gRPC pool takes gRPC requests
// only, so an HTTP request skips the catch-all gRPC route listed first and
// is admitted on the OpenAI pool, and a gRPC request on the gRPC pool.
func TestListenerRoutesByProtocol(t *testing.T) {
	mesh := `{
	"listeners": [{"name": "main", "address": "127.0.0.1:10000", "routes": [
	  {"name": "rpc", "match": {"path_prefix": "/"}, "pool": "rpc"},
	  {"name": "chat", "match": {"path_prefix": "/v1/"}, "pool": "chat"}]}],
	"pools": [
	  {"name": "rpc", "protocol": "grpc", "endpoints": ["127.0.0.1:9"], "capacity": {"max_inflight": 4}},
	  {"name": "chat", "protocol": "openai", "endpoints": ["127.0.0.1:8"], "capacity": {"max_inflight": 4}}],
	"classes": [{"name": "batch", "priority": 10}],
	"default_class": "batch"
}`
	h := newHarness(t, `{"mesh": `+mesh+`, "listener": "main"}`, true)
	inflight := func() map[string]int {
		out := map[string]int{}
		for _, s := range h.scheds.sets {
			for _, ps := range s.Stats() {
				out[ps.Name] += ps.InFlight
			}
		}
		return out
	}
	httpReq := h.stream(fakesdk.Options{})
	wantStatus(t, "HTTP DecodeHeaders", httpReq.DecodeHeaders(sseRequest(), true), api.Continue)
	if got := inflight(); got["chat"] != 1 || got["rpc"] != 0 {
		t.Errorf("after an HTTP request: in flight %v, want it on chat", got)
	}
	grpcReq := h.stream(fakesdk.Options{})
	wantStatus(t, "gRPC DecodeHeaders", grpcReq.DecodeHeaders(grpcRequest(), true), api.Continue)
	if got := inflight(); got["chat"] != 1 || got["rpc"] != 1 {
		t.Errorf("after a gRPC request: in flight %v, want one on each pool", got)
	}
	httpReq.Complete()
	grpcReq.Complete()
	noViolations(t, httpReq)
	noViolations(t, grpcReq)
}
