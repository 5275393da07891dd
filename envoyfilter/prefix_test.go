package envoyfilter

import (
	"strings"
	"testing"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"

	"github.com/llmesh/llmesh/testkit/fakesdk"
)

// TestUpstreamOverridePrefixRouting: in a pool that routes by prefix, a
// prompt that extends one sent before goes to the endpoint that served it,
// though the other is as idle and comes first (where a pool without the
// rule sends it). The same case as the gateway's
// TestEndpointsPrefixRouting. (max_inflight_tokens makes both pools read
// the body before admission, as prefix routing does.)
func TestUpstreamOverridePrefixRouting(t *testing.T) {
	sys := strings.Repeat("You are a careful assistant. ", 30)
	for _, prefix := range []bool{true, false} {
		routing := ""
		if prefix {
			routing = `, "prefix_routing": {"weight": 1, "capacity_blocks": 10000}`
		}
		h := newHarness(t, `{"mesh": {
	"pools": [{"name": "sim", "protocol": "openai", "capacity": {"max_inflight": 4, "max_inflight_tokens": 1000000}`+routing+`,
	           "endpoints": [{"address": "127.0.0.1:8001", "max_inflight": 1}, {"address": "127.0.0.1:8002", "max_inflight": 1}]}],
	"classes": [{"name": "batch", "priority": 10}],
	"default_class": "batch"}}`, true)
		send := func(prompt string) *fakesdk.Stream {
			s := h.stream(fakesdk.Options{})
			wantStatus(t, "DecodeHeaders", s.DecodeHeaders(sseRequest(), false), api.StopAndBuffer)
			wantStatus(t, "DecodeData", s.DecodeData([]byte(`{"model":"m","max_tokens":4,"stream":true,"prompt":"`+prompt+`"}`), true), api.Continue)
			if s.UpstreamOverride() == nil {
				t.Fatal("no override")
			}
			return s
		}
		long := send("hello")
		first := send(sys + "first question")
		if long.UpstreamOverride().Host != "127.0.0.1:8001" || first.UpstreamOverride().Host != "127.0.0.1:8002" {
			t.Fatalf("long stream on %s, first turn on %s", long.UpstreamOverride().Host, first.UpstreamOverride().Host)
		}
		long.Complete()
		first.Complete()
		second := send(sys + "first question an answer second")
		want := "127.0.0.1:8002"
		if !prefix {
			want = "127.0.0.1:8001"
		}
		if got := second.UpstreamOverride().Host; got != want {
			t.Errorf("prefix routing %v: second turn on %s, want %s", prefix, got, want)
		}
		second.Complete()
		for _, s := range []*fakesdk.Stream{long, first, second} {
			noViolations(t, s)
		}
	}
}
