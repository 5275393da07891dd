package envoyfilter

import (
	"strings"
	"testing"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"

	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/testkit/fakesdk"
)

// pickMesh has two endpoints of one slot each; accept says whether the
// pool honours a pick made upstream (pools[].accept_upstream_pick).
func pickMesh(accept bool) string {
	a := "false"
	if accept {
		a = "true"
	}
	return `{"mesh": {
	"pools": [{"name": "sim", "protocol": "openai", "accept_upstream_pick": ` + a + `,
	           "endpoints": [{"address": "127.0.0.1:8001", "max_inflight": 1}, {"address": "127.0.0.1:8002", "max_inflight": 1}]}],
	"classes": [{"name": "batch", "priority": 10}],
	"default_class": "batch"
}}`
}

// pickedBy returns a way to carry a pick of ep on the request: in the
// x-gateway-destination-endpoint header, or in the envoy.lb dynamic
// metadata an ext_proc filter earlier in the chain set.
type pickCarrier struct {
	name  string
	apply func(s *fakesdk.Stream, ep string) *fakesdk.HeaderMap
}

var pickCarriers = []pickCarrier{
	{"header", func(_ *fakesdk.Stream, ep string) *fakesdk.HeaderMap {
		return sseRequest(exchange.PickHeader, ep)
	}},
	{"metadata", func(s *fakesdk.Stream, ep string) *fakesdk.HeaderMap {
		s.StreamInfo().DynamicMetadata().Set(exchange.PickNamespace, exchange.PickKey, ep)
		return sseRequest()
	}},
}

// TestUpstreamPickOverridesHost: a request picked upstream for the second
// endpoint is sent there (strict override) although the first is free, and
// a second request picked for it waits for that endpoint's one slot rather
// than going to the free one; once the slot is released it goes there too.
func TestUpstreamPickOverridesHost(t *testing.T) {
	for _, c := range pickCarriers {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, pickMesh(true), true)
			const picked = "127.0.0.1:8002"
			s1 := h.stream(fakesdk.Options{})
			wantStatus(t, "first", s1.DecodeHeaders(c.apply(s1, picked), true), api.Continue)
			if o := s1.UpstreamOverride(); o == nil || o.Host != picked || !o.Strict {
				t.Fatalf("first request override %+v, want strict %s", o, picked)
			}

			s2 := h.stream(fakesdk.Options{})
			p2 := s2.StartDecodeHeaders(c.apply(s2, picked), true)
			h.waitQueued("batch", 1) // held to the picked endpoint's limit
			if p2.Ready() {
				t.Fatal("the second request for the full endpoint was not held")
			}
			s1.EncodeHeaders(sseResponse(), false)
			s1.EncodeData([]byte(sseChunks[0]), true)
			s1.Complete()
			wantStatus(t, "second", p2.Wait(), api.Continue)
			if o := s2.UpstreamOverride(); o == nil || o.Host != picked {
				t.Fatalf("second request override %+v, want %s", o, picked)
			}
			s2.Complete()
			for _, s := range []*fakesdk.Stream{s1, s2} {
				noViolations(t, s)
			}
		})
	}
}

// TestUpstreamPickMetadataWins: with both, the envoy.lb metadata (set by
// the gateway's ext_proc filter; a client cannot forge it) names the
// endpoint, not the header.
func TestUpstreamPickMetadataWins(t *testing.T) {
	h := newHarness(t, pickMesh(true), true)
	s := h.stream(fakesdk.Options{})
	s.StreamInfo().DynamicMetadata().Set(exchange.PickNamespace, exchange.PickKey, "127.0.0.1:8001")
	wantStatus(t, "DecodeHeaders", s.DecodeHeaders(sseRequest(exchange.PickHeader, "127.0.0.1:8002"), true), api.Continue)
	if o := s.UpstreamOverride(); o == nil || o.Host != "127.0.0.1:8001" {
		t.Fatalf("override %+v, want the metadata's 127.0.0.1:8001", o)
	}
	s.Complete()
	noViolations(t, s)
}

// TestUpstreamPickRefusedByFilter: a malformed pick is the client's 400, a
// pick outside the pool a 503 (the picker and the mesh disagree), each
// naming where the pick came from; neither reaches the scheduler.
func TestUpstreamPickRefusedByFilter(t *testing.T) {
	for _, c := range pickCarriers {
		for _, tc := range []struct {
			name, pick string
			code       int
			body       string
		}{
			{"malformed", "not-an-endpoint", 400, "must be host:port"},
			{"bad port", "127.0.0.1:0", 400, "invalid port"},
			{"outside the pool", "127.0.0.1:9999", 503, "not an endpoint of the pool"},
		} {
			t.Run(c.name+"/"+tc.name, func(t *testing.T) {
				h := newHarness(t, pickMesh(true), true)
				s := h.stream(fakesdk.Options{})
				s.DecodeHeaders(c.apply(s, tc.pick), true)
				r := s.Reply()
				if r == nil || r.Code != tc.code || !strings.Contains(r.Body, tc.body) {
					t.Fatalf("reply %+v, want %d naming %q", r, tc.code, tc.body)
				}
				from := exchange.PickHeader
				if c.name == "metadata" {
					from = exchange.PickNamespace + " metadata"
				}
				if !strings.Contains(r.Body, from) {
					t.Errorf("reply body %q does not name %q", r.Body, from)
				}
				if o := s.UpstreamOverride(); o != nil {
					t.Errorf("a refused request was routed to %+v", o)
				}
				s.Complete()
				noViolations(t, s)
				// Nothing was admitted: both endpoints' slots are free.
				for _, ep := range []string{"127.0.0.1:8001", "127.0.0.1:8002"} {
					ok := h.stream(fakesdk.Options{})
					wantStatus(t, "then "+ep, ok.DecodeHeaders(sseRequest(exchange.PickHeader, ep), true), api.Continue)
					defer ok.Complete()
				}
			})
		}
	}
}

// TestUpstreamPickIgnoredWithoutAccept: a pool without accept_upstream_pick
// does not let the header (a client's) choose the endpoint: the scheduler
// picks, and a malformed value is not an error.
func TestUpstreamPickIgnoredWithoutAccept(t *testing.T) {
	h := newHarness(t, pickMesh(false), true)
	busy := h.stream(fakesdk.Options{})
	wantStatus(t, "busy", busy.DecodeHeaders(sseRequest(), true), api.Continue)
	taken := busy.UpstreamOverride().Host
	s := h.stream(fakesdk.Options{})
	wantStatus(t, "picked", s.DecodeHeaders(sseRequest(exchange.PickHeader, taken), true), api.Continue)
	if o := s.UpstreamOverride(); o == nil || o.Host == taken {
		t.Fatalf("override %+v: the header chose the full endpoint %s", o, taken)
	}
	bad := h.stream(fakesdk.Options{})
	p := bad.StartDecodeHeaders(sseRequest(exchange.PickHeader, "garbage"), true)
	h.waitQueued("batch", 1)
	busy.Complete()
	wantStatus(t, "malformed ignored", p.Wait(), api.Continue)
	for _, x := range []*fakesdk.Stream{s, bad} {
		x.Complete()
		noViolations(t, x)
	}
}
