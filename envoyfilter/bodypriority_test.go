package envoyfilter

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"
	"google.golang.org/protobuf/proto"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/sim/simtest"
	"github.com/llmesh/llmesh/testkit/fakesdk"
	"github.com/llmesh/llmesh/testkit/grpcframe"
)

// guardMesh does not trust the fake's peer (127.0.0.1) for priority; the
// marker x-mesh-trusted: s3cret makes a request trusted.
func guardMesh(extra string) string {
	return `{
	"pools": [{"name": "sim", "protocol": "openai", "endpoints": ["127.0.0.1:9"], "capacity": {"max_inflight": 4}}],
	"classes": [{"name": "interactive", "priority": 0}, {"name": "batch", "priority": 10}],
	"default_class": "batch",
	"classification": {"priority_header": {"name": "x-llmesh-class", "trusted_sources": ["10.0.0.0/8"],
	                   "trusted_marker": {"header": "x-mesh-trusted", "value": "s3cret"}}}` + extra + `
}`
}

func topLevel(t testing.TB, body []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("upstream body is not a JSON object: %v: %s", err, body)
	}
	return m
}

// compact drops JSON white space: stripping blanks members in place.
func compact(t testing.TB, b []byte) string {
	t.Helper()
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		t.Fatalf("not JSON: %v: %q", err, b)
	}
	return out.String()
}

// TestEnginePriorityGuardJSON: from an untrusted peer the request is
// admitted from its headers, the filter collects the body across chunks
// (Envoy forgets them: StopNoBuffer) and forwards it with the last one,
// every top-level priority blanked out (nested ones stay) at the same
// length, so content-length stands; a trusted marker or a body without
// priority passes unchanged.
func TestEnginePriorityGuardJSON(t *testing.T) {
	h := newHarness(t, `{"mesh": `+guardMesh("")+`}`, true)
	for _, tc := range []struct {
		name, body string
		headers    []string
		want       string // upstream body
	}{
		{"completion", `{"model":"m","prompt":"hi","priority":-100,"stream":true}`, nil, `{"model":"m","prompt":"hi","stream":true}`},
		{"non-streaming", `{"priority": -100, "model":"m","prompt":"hi"}`, nil, `{ "model":"m","prompt":"hi"}`},
		{"chat, nested priority kept", `{"model":"m","messages":[{"role":"user","content":"x","priority":-1}],"priority":-100}`, nil,
			`{"model":"m","messages":[{"role":"user","content":"x","priority":-1}]}`},
		{"duplicate escaped key", `{"priority":1,"model":"m","priorit\u0079":-100}`, nil, `{"model":"m"}`},
		{"case variants", `{"PRIORITY":-100,"model":"m","Priority":-1,"PRIORIT\u0059":-2}`, nil, `{"model":"m"}`},
		{"class header does not make it trusted", `{"model":"m","priority":-100}`, []string{"x-llmesh-class", "interactive"}, `{"model":"m"}`},
		{"no priority", `{"model":"m","prompt":"hi"}`, nil, `{"model":"m","prompt":"hi"}`},
		{"trusted marker", `{"model":"m","priority":-100}`, []string{"x-mesh-trusted", "s3cret"}, `{"model":"m","priority":-100}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := h.counter(StatPriorityStripped)
			s := h.stream(fakesdk.Options{})
			hdr := sseRequest(append([]string{"content-length", "99"}, tc.headers...)...)
			trusted := len(tc.headers) > 0 && tc.headers[0] == "x-mesh-trusted"
			r := s.DecodeHeaders(hdr, false)
			wantStatus(t, "DecodeHeaders", r, api.Continue)
			if !r.Async {
				t.Error("admission should happen from the headers (held phase)")
			}
			if trusted {
				wantStatus(t, "DecodeData", s.DecodeData([]byte(tc.body), true), api.Continue)
			} else {
				wantStatus(t, "DecodeData 1", s.DecodeData([]byte(tc.body[:7]), false), api.StopNoBuffer)
				wantStatus(t, "DecodeData 2", s.DecodeData([]byte(tc.body[7:]), true), api.Continue)
			}
			up := s.Upstream()
			want(t, "upstream length", len(up), len(tc.body))
			want(t, "upstream body", compact(t, up), compact(t, []byte(tc.want)))
			if tc.want == tc.body {
				want(t, "upstream bytes", string(up), tc.body)
			}
			want(t, "content-length", hdr.Peek("content-length"), "99")
			stripped := uint64(0)
			if tc.want != tc.body {
				stripped = 1
			}
			want(t, StatPriorityStripped, h.counter(StatPriorityStripped)-before, stripped)
			wantStatus(t, "EncodeHeaders", s.EncodeHeaders(sseResponse(), false), api.Continue)
			for i, c := range sseChunks {
				wantStatus(t, "EncodeData", s.EncodeData([]byte(c), i == len(sseChunks)-1), api.Continue)
			}
			s.Complete()
			noViolations(t, s)
		})
	}
	want(t, "inflight", h.gauge(GaugeInflight), 0)
}

// TestEnginePriorityGuardRefusals: bodies the guard cannot read with
// certainty never reach upstream: invalid JSON (400, naming the byte), a
// compressed JSON body (415, in DecodeHeaders), request trailers after a
// collected body (400), llm.v1 messages in an unknown encoding or too large
// once decompressed, bodies past relocation.max_body (413); each counts in
// llmesh.priority_refused, and the admission made from the headers is
// released.
func TestEnginePriorityGuardRefusals(t *testing.T) {
	h := newHarness(t, `{"mesh": `+guardMesh("")+`}`, true)
	t.Run("invalid JSON", func(t *testing.T) {
		s := h.stream(fakesdk.Options{})
		wantStatus(t, "DecodeHeaders", s.DecodeHeaders(sseRequest(), false), api.Continue)
		wantStatus(t, "DecodeData", s.DecodeData([]byte(`{"model":"m","priority":NaN}`), true), api.LocalReply)
		r := s.Reply()
		want(t, "code", r.Code, 400)
		if !strings.Contains(r.Body, "invalid JSON at byte 24: unexpected character 'N'") || r.Details != "llmesh_priority_body" {
			t.Errorf("reply %q (%s)", r.Body, r.Details)
		}
		if len(s.Upstream()) != 0 {
			t.Errorf("upstream got %q", s.Upstream())
		}
		s.Complete()
		noViolations(t, s)
	})
	t.Run("compressed JSON", func(t *testing.T) {
		s := h.stream(fakesdk.Options{})
		wantStatus(t, "DecodeHeaders", s.DecodeHeaders(sseRequest("content-encoding", "gzip"), false), api.LocalReply)
		want(t, "code", s.Reply().Code, 415)
		s.Complete()
		noViolations(t, s)
	})
	t.Run("trailers", func(t *testing.T) {
		s := h.stream(fakesdk.Options{})
		wantStatus(t, "DecodeHeaders", s.DecodeHeaders(sseRequest(), false), api.Continue)
		wantStatus(t, "DecodeData", s.DecodeData([]byte(`{"priority":-1`), false), api.StopNoBuffer)
		wantStatus(t, "DecodeTrailers", s.DecodeTrailers(fakesdk.NewHeaders("x-t", "1")), api.LocalReply)
		want(t, "code", s.Reply().Code, 400)
		s.Complete()
		noViolations(t, s)
	})
	t.Run("gRPC in an unreadable encoding", func(t *testing.T) {
		s := h.stream(fakesdk.Options{})
		wantStatus(t, "DecodeHeaders", s.DecodeHeaders(grpcRequest("grpc-encoding", "snappy"), false), api.Continue)
		wantStatus(t, "DecodeData", s.DecodeData([]byte{1, 0, 0, 0, 2, 0x30, 0x01}, true), api.LocalReply)
		r := s.Reply()
		want(t, "grpc status", r.GRPCStatus, 3)
		if !strings.Contains(r.Body, `grpc-encoding "snappy"`) {
			t.Errorf("reply %q", r.Body)
		}
		s.Complete()
		noViolations(t, s)
	})
	t.Run("gRPC message beyond max_message once decompressed", func(t *testing.T) {
		hs := newHarness(t, `{"mesh": `+guardMesh(`, "relocation": {"max_message": 1024}`)+`}`, false)
		s := hs.stream(fakesdk.Options{})
		wantStatus(t, "DecodeHeaders", s.DecodeHeaders(grpcRequest("grpc-encoding", "gzip"), false), api.Continue)
		msg, err := proto.Marshal(&llmv1.GenerateRequest{Prompt: strings.Repeat("x", 4096)})
		if err != nil {
			t.Fatal(err)
		}
		wantStatus(t, "DecodeData", s.DecodeData(grpcframe.Gzip(msg), true), api.LocalReply)
		want(t, "grpc status", s.Reply().GRPCStatus, 8)
		s.Complete()
		noViolations(t, s)
	})
	t.Run("body past relocation.max_body", func(t *testing.T) {
		hs := newHarness(t, `{"mesh": `+guardMesh(`, "relocation": {"max_body": 64}`)+`}`, false)
		s := hs.stream(fakesdk.Options{})
		wantStatus(t, "DecodeHeaders", s.DecodeHeaders(sseRequest(), false), api.Continue)
		chunk := []byte(`{"prompt":"` + strings.Repeat("x", 30))
		wantStatus(t, "DecodeData 1", s.DecodeData(chunk, false), api.StopNoBuffer)
		wantStatus(t, "DecodeData 2", s.DecodeData(chunk, false), api.LocalReply)
		r := s.Reply()
		want(t, "code", r.Code, 413)
		if !strings.Contains(r.Body, "exceeds relocation.max_body = 64 bytes") {
			t.Errorf("reply %q", r.Body)
		}
		if len(s.Upstream()) != 0 {
			t.Errorf("upstream got %q", s.Upstream())
		}
		s.Complete()
		noViolations(t, s)
	})
	want(t, StatPriorityRefused, h.counter(StatPriorityRefused), 4)
	want(t, "inflight", h.gauge(GaugeInflight), 0)
	want(t, "queued", h.gauge(GaugeQueued), 0)
}

// TestEnginePriorityGuardGRPC: an untrusted llm.v1 request is collected by
// the filter and its priority removed, after a prompt was relocated from
// metadata into it; content-length, which no longer holds, is removed;
// vLLM's VllmEngine (no priority field) streams through untouched.
func TestEnginePriorityGuardGRPC(t *testing.T) {
	h := newHarness(t, `{"mesh": `+guardMesh(relocationMesh)+`}`, true)
	prompt := strings.Repeat("a prompt in metadata ", 4)
	req := grpcframe.Message(&llmv1.GenerateRequest{Model: "m", MaxTokens: 5, Priority: -100})
	s := h.stream(fakesdk.Options{})
	hdr := grpcRequest("x-llmesh-prompt", prompt, "content-length", strconv.Itoa(len(req)))
	wantStatus(t, "DecodeHeaders", s.DecodeHeaders(hdr, false), api.Continue)
	if _, ok := hdr.Snapshot()["content-length"]; ok {
		t.Error("content-length forwarded for a message that changes")
	}
	wantStatus(t, "DecodeData 1", s.DecodeData(req[:4], false), api.StopNoBuffer)
	wantStatus(t, "DecodeData 2", s.DecodeData(req[4:], true), api.Continue)
	up := s.Upstream()
	var got llmv1.GenerateRequest
	if len(up) < 5 || proto.Unmarshal(up[5:], &got) != nil {
		t.Fatalf("upstream %x", up)
	}
	if got.GetPriority() != 0 || got.GetPrompt() != prompt || got.GetMaxTokens() != 5 {
		t.Errorf("upstream message %v", &got)
	}
	want(t, StatRelocated, h.counter(StatRelocated), 1)
	want(t, StatPriorityStripped, h.counter(StatPriorityStripped), 1)
	s.Complete()
	noViolations(t, s)

	s = h.stream(fakesdk.Options{})
	vllm := fakesdk.RequestHeaders("POST", "/vllm.grpc.engine.VllmEngine/Generate", "content-type", "application/grpc")
	wantStatus(t, "VllmEngine DecodeHeaders", s.DecodeHeaders(vllm, false), api.Continue)
	wantStatus(t, "VllmEngine DecodeData", s.DecodeData([]byte{0, 0, 0, 0, 2, 0x30, 0x01}, false), api.Continue)
	s.Complete()
	noViolations(t, s)
}

// TestEnginePriorityAfterRelocation: a relocation rule writing a header
// into the body's "priority" cannot bring a priority back.
func TestEnginePriorityAfterRelocation(t *testing.T) {
	h := newHarness(t, `{"mesh": `+guardMesh(`, "relocation": {"http": [{"header": "x-prio", "field": "priority", "threshold": 1}]}`)+`}`, false)
	s := h.stream(fakesdk.Options{})
	wantStatus(t, "DecodeHeaders", s.DecodeHeaders(sseRequest("x-prio", "-100"), false), api.StopAndBuffer)
	wantStatus(t, "DecodeData", s.DecodeData([]byte(`{"model":"m","prompt":"hi"}`), true), api.Continue)
	want(t, "upstream body", compact(t, s.Upstream()), `{"model":"m","prompt":"hi"}`)
	want(t, StatRelocated, h.counter(StatRelocated), 1)
	s.Complete()
	noViolations(t, s)
}

// TestEnginePrioritySpoofingThroughSim: untrusted requests through the
// adapter to the real sim, streaming and non-streaming OpenAI and llm.v1:
// the engine receives no client priority, and the requests complete.
func TestEnginePrioritySpoofingThroughSim(t *testing.T) {
	sim := simtest.Start(t)
	h := newHarness(t, `{"mesh": `+guardMesh("")+`}`, true)
	c := &http.Client{Timeout: time.Minute}
	defer c.CloseIdleConnections()
	eng := simtest.StartRecorder(t, sim.HTTPURL, false)
	for _, stream := range []bool{false, true} {
		body := `{"model":"` + sim.Model + `","prompt":"hi","max_tokens":4,"priority":-100,"stream":` + jsonBool(stream) + `}`
		s := proxy(t, h, c, eng.URL+"/v1/completions", sseRequest(), []byte(body))
		got := eng.TakeAll()
		if len(got) != 1 {
			t.Fatalf("engine received %d requests", len(got))
		}
		if p, ok := topLevel(t, got[0])["priority"]; ok {
			t.Errorf("stream=%v: engine received priority %s", stream, p)
		}
		md := s.Metadata(MetadataNamespace)
		want(t, "output_tokens", md["output_tokens"], 4)
		if _, bad := md["error"]; bad {
			t.Errorf("stream=%v: error = %v", stream, md["error"])
		}
	}

	geng := simtest.StartRecorder(t, "http://"+sim.GRPCAddr, true)
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	gc := &http.Client{Timeout: time.Minute, Transport: &http.Transport{Protocols: &protos}}
	defer gc.CloseIdleConnections()
	req := grpcframe.Message(&llmv1.GenerateRequest{Model: sim.Model, Prompt: "hi", MaxTokens: 6, Priority: -100,
		Sampling: &llmv1.SamplingParams{IgnoreEos: true}})
	s := proxy(t, h, gc, geng.URL+llmv1.Generation_Generate_FullMethodName, grpcRequest(), req)
	got := geng.TakeAll()
	if len(got) != 1 || len(got[0]) < 5 {
		t.Fatalf("engine received %d requests", len(got))
	}
	var r llmv1.GenerateRequest
	if err := proto.Unmarshal(got[0][5:], &r); err != nil {
		t.Fatal(err)
	}
	if r.GetPriority() != 0 || r.GetPrompt() != "hi" {
		t.Errorf("engine received %v", &r)
	}
	want(t, "output_tokens", s.Metadata(MetadataNamespace)["output_tokens"], 6)
}

func jsonBool(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

// FuzzGuardedBody: arbitrary JSON bodies from an untrusted peer, in two
// chunks cut anywhere, never panic or break an SDK rule; either the body is
// refused with 400 before anything goes upstream, or what goes upstream is
// exactly the core's rewrite (no top-level priority, same length).
func FuzzGuardedBody(f *testing.F) {
	for i, s := range []string{
		`{"model":"m","priority":-100}`, `{"priority":1,"priority":2}`, `{"a":{"priority":1}}`, `[1]`, ``,
		`{"priority":NaN}`, `{"priorit\u0079":3}`, "\xef\xbb\xbf{\"priority\":1}",
	} {
		f.Add([]byte(s), uint16(i*3))
	}
	h := newHarness(f, `{"mesh": `+guardMesh("")+`}`, false)
	f.Fuzz(func(t *testing.T, body []byte, cut uint16) {
		s := h.stream(fakesdk.Options{})
		if r := s.DecodeHeaders(sseRequest(), false); r.Status != api.Continue {
			t.Fatalf("DecodeHeaders: %+v", r)
		}
		last := body
		if int(cut) < len(body) {
			if r := s.DecodeData(body[:cut], false); r.Status != api.StopNoBuffer {
				t.Fatalf("DecodeData 1: %+v", r)
			}
			last = body[cut:]
		}
		r := s.DecodeData(last, true)
		want, _, err := exchange.RewriteJSONPriority(body, exchange.EnginePriority{Mode: exchange.PriorityStrip})
		switch {
		case err != nil:
			if r.Status != api.LocalReply || s.Reply() == nil || s.Reply().Code != 400 || !errors.Is(err, exchange.ErrPriorityBody) {
				t.Fatalf("refused body: %+v", r)
			}
			if len(s.Upstream()) != 0 {
				t.Fatal("a refused body went upstream")
			}
		case r.Status != api.Continue:
			t.Fatalf("DecodeData: %+v", r)
		case !bytes.Equal(s.Upstream(), want):
			t.Fatalf("upstream %q, want %q", s.Upstream(), want)
		}
		s.Complete()
		noViolations(t, s)
	})
}
