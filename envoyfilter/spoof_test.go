package envoyfilter

import (
	"testing"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"

	"github.com/llmesh/llmesh/testkit/fakesdk"
)

// TestPriorityHeaderSpoofing: a client's class claim (x-llmesh-class) is
// honoured only when the config trusts the downstream peer (127.0.0.1 in
// the fake). A forwarded-for header naming a trusted address does not make
// an untrusted peer trusted, and an unknown or numeric-beyond-range claim
// falls back to the default class. The engine priority in the body follows
// the same trust: it reaches upstream only from a trusted peer (the
// untrusted request's body is collected and rewritten).
func TestPriorityHeaderSpoofing(t *testing.T) {
	const body = `{"model":"m","prompt":"hi","stream":true,"priority":-100}`
	for _, tc := range []struct {
		name, trusted string
		headers       []string
		want          string
		trustedPeer   bool
	}{
		{"untrusted peer", "10.0.0.0/8", []string{"x-llmesh-class", "interactive"}, "batch", false},
		{"forwarded-for names a trusted address", "10.0.0.0/8", []string{"x-llmesh-class", "interactive", "x-forwarded-for", "10.1.2.3", "x-real-ip", "10.1.2.3"}, "batch", false},
		{"trusted peer", "127.0.0.1/32", []string{"x-llmesh-class", "interactive"}, "interactive", true},
		{"trusted peer, unknown class", "127.0.0.1/32", []string{"x-llmesh-class", "platinum"}, "batch", true},
		{"no header config", "", []string{"x-llmesh-class", "interactive"}, "batch", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			extra := ""
			if tc.trusted != "" {
				extra = `, "classification": {"priority_header": {"name": "x-llmesh-class", "trusted_sources": ["` + tc.trusted + `"]}}`
			}
			mesh := `{
	"pools": [{"name": "sim", "protocol": "openai", "endpoints": ["127.0.0.1:9"], "capacity": {"max_inflight": 4}}],
	"classes": [{"name": "interactive", "priority": 0}, {"name": "batch", "priority": 10}],
	"default_class": "batch"` + extra + `
}`
			h := newHarness(t, `{"mesh": `+mesh+`}`, false)
			s := h.stream(fakesdk.Options{})
			upstream := `{"model":"m","prompt":"hi","stream":true}`
			if tc.trustedPeer {
				upstream = body
			}
			wantStatus(t, "DecodeHeaders", s.DecodeHeaders(sseRequest(tc.headers...), false), api.Continue)
			wantStatus(t, "DecodeData", s.DecodeData([]byte(body), true), api.Continue)
			want(t, "upstream body", compact(t, s.Upstream()), upstream)
			wantStatus(t, "EncodeHeaders", s.EncodeHeaders(sseResponse(), false), api.Continue)
			for i, c := range sseChunks {
				wantStatus(t, "EncodeData", s.EncodeData([]byte(c), i == len(sseChunks)-1), api.Continue)
			}
			s.Complete()
			noViolations(t, s)
			want(t, "class", s.Metadata(MetadataNamespace)["class"], tc.want)
		})
	}
}

// TestTrustedMarkerStripped: the trusted marker is a secret shared between
// trusted hops, so the filter removes it from the request before Envoy
// forwards it upstream, whether it matched or not, and still honours a
// matching marker when the class is decided again after the body was read
// (a model rule makes the filter buffer the body).
func TestTrustedMarkerStripped(t *testing.T) {
	const mesh = `{
	"pools": [{"name": "sim", "protocol": "openai", "endpoints": ["127.0.0.1:9"], "capacity": {"max_inflight": 4}}],
	"classes": [{"name": "interactive", "priority": 0}, {"name": "batch", "priority": 10}],
	"default_class": "batch",
	"classification": {
	  "rules": [{"model": "m", "class": "batch"}],
	  "priority_header": {"name": "x-llmesh-class", "trusted_sources": ["10.0.0.0/8"],
	                      "trusted_marker": {"header": "X-Mesh-Trusted", "value": "s3cret"}}}
}`
	h := newHarness(t, `{"mesh": `+mesh+`}`, false)
	for _, tc := range []struct {
		name    string
		headers []string
		body    bool // buffered body: the class is decided again with the model
		want    string
	}{
		{"matching marker", []string{"x-llmesh-class", "interactive", "x-mesh-trusted", "s3cret"}, false, "interactive"},
		{"matching marker, body read", []string{"x-llmesh-class", "interactive", "x-mesh-trusted", "s3cret"}, true, "interactive"},
		{"wrong marker", []string{"x-llmesh-class", "interactive", "x-mesh-trusted", "guess"}, true, "batch"},
		{"marker twice", []string{"x-llmesh-class", "interactive", "x-mesh-trusted", "guess", "x-mesh-trusted", "s3cret"}, false, "batch"},
		{"no marker", []string{"x-llmesh-class", "interactive"}, false, "batch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := h.stream(fakesdk.Options{})
			req := sseRequest(tc.headers...)
			if tc.body {
				wantStatus(t, "DecodeHeaders", s.DecodeHeaders(req, false), api.StopAndBuffer)
				wantStatus(t, "DecodeData", s.DecodeData([]byte(`{"model":"m","prompt":"hi","stream":true}`), true), api.Continue)
			} else {
				wantStatus(t, "DecodeHeaders", s.DecodeHeaders(req, true), api.Continue)
			}
			snap := req.Snapshot()
			if v, ok := snap["x-mesh-trusted"]; ok {
				t.Errorf("marker header forwarded upstream: %q", v)
			}
			want(t, "class header forwarded", req.Peek("x-llmesh-class"), "interactive")
			want(t, "content-type forwarded", req.Peek("content-type"), "application/json")
			wantStatus(t, "EncodeHeaders", s.EncodeHeaders(sseResponse(), false), api.Continue)
			for i, c := range sseChunks {
				wantStatus(t, "EncodeData", s.EncodeData([]byte(c), i == len(sseChunks)-1), api.Continue)
			}
			s.Complete()
			noViolations(t, s)
			want(t, "class", s.Metadata(MetadataNamespace)["class"], tc.want)
		})
	}
}
