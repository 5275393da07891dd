package envoyfilter

import (
	"strings"
	"testing"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"

	"github.com/llmesh/llmesh/testkit/fakesdk"
)

func endpointMesh(endpoints string) string {
	return `{
	"pools": [{"name": "sim", "protocol": "openai", "affinity_header": "x-session-id",
	           "endpoints": ` + endpoints + `, "capacity": {"max_inflight": 2}}],
	"classes": [{"name": "batch", "priority": 10}],
	"default_class": "batch"
}`
}

// TestUpstreamOverrideFollowsLease: each admitted request is sent to the
// endpoint its lease is bound to (strict override); with one slot per
// endpoint two requests go to two endpoints, and a released slot's
// endpoint takes the next.
func TestUpstreamOverrideFollowsLease(t *testing.T) {
	h := newHarness(t, `{"mesh": `+endpointMesh(`["127.0.0.1:8001", "127.0.0.1:8002"]`)+`}`, true)
	var got []string
	var streams []*fakesdk.Stream
	for i := 0; i < 2; i++ {
		s := h.stream(fakesdk.Options{})
		wantStatus(t, "DecodeHeaders", s.DecodeHeaders(sseRequest(), true), api.Continue)
		o := s.UpstreamOverride()
		if o == nil || !o.Strict {
			t.Fatalf("request %d: override %+v, want a strict one", i, o)
		}
		got = append(got, o.Host)
		streams = append(streams, s)
	}
	if got[0] == got[1] || !strings.HasPrefix(got[0], "127.0.0.1:800") || !strings.HasPrefix(got[1], "127.0.0.1:800") {
		t.Fatalf("overrides %v, want the two endpoints", got)
	}
	streams[1].Complete()
	s := h.stream(fakesdk.Options{})
	wantStatus(t, "third", s.DecodeHeaders(sseRequest(), true), api.Continue)
	if o := s.UpstreamOverride(); o == nil || o.Host != got[1] {
		t.Fatalf("third request override %+v, want the freed %s", o, got[1])
	}
	s.Complete()
	streams[0].Complete()
	for _, s := range append(streams, s) {
		noViolations(t, s)
	}
	want(t, StatOverrideFailed, h.counter(StatOverrideFailed), 0)
}

// TestUpstreamOverrideAffinity: the affinity header keeps a session on one
// endpoint.
func TestUpstreamOverrideAffinity(t *testing.T) {
	h := newHarness(t, `{"mesh": `+endpointMesh(`[{"address": "127.0.0.1:8001", "max_inflight": 4}, {"address": "127.0.0.1:8002", "max_inflight": 4}]`)+`}`, true)
	seen := map[string]bool{}
	for i := 0; i < 4; i++ {
		s := h.stream(fakesdk.Options{})
		wantStatus(t, "DecodeHeaders", s.DecodeHeaders(sseRequest("x-session-id", "conversation-7"), true), api.Continue)
		seen[s.UpstreamOverride().Host] = true
		s.Complete()
		noViolations(t, s)
	}
	if len(seen) != 1 {
		t.Fatalf("one session went to %v", seen)
	}
}

// TestUpstreamOverrideHostName: Envoy overrides by IP address only; a pool
// of host names is routed by the cluster's load balancer, and that is
// counted.
func TestUpstreamOverrideHostName(t *testing.T) {
	h := newHarness(t, `{"mesh": `+endpointMesh(`["engine-a:8000", "engine-b:8000"]`)+`}`, true)
	s := h.stream(fakesdk.Options{})
	wantStatus(t, "DecodeHeaders", s.DecodeHeaders(sseRequest(), true), api.Continue)
	if o := s.UpstreamOverride(); o != nil {
		t.Fatalf("override %+v for a host name", o)
	}
	want(t, StatOverrideFailed, h.counter(StatOverrideFailed), 1)
	s.Complete()
	noViolations(t, s)
}
