package envoyfilter

import (
	goruntime "runtime"
	"strings"
	"testing"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"
	"google.golang.org/protobuf/proto"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/api/vllmpb"
	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/testkit/fakesdk"
	"github.com/llmesh/llmesh/testkit/grpcframe"
)

const bodyMesh = `{
	"pools": [{"name": "sim", "protocol": "openai", "endpoints": ["127.0.0.1:9"],
	           "capacity": {"max_inflight": 4, "max_inflight_tokens": 1000}}],
	"classes": [
	  {"name": "interactive", "priority": 0},
	  {"name": "batch", "priority": 10}
	],
	"default_class": "interactive",
	"classification": {"rules": [{"model": "big-model", "class": "batch"}],
	                   "priority_header": {"name": "x-llmesh-class", "trusted_sources": ["127.0.0.1/32"]}}
}`

// TestBodyReadForModelAndSize: with model rules or a token bound the JSON
// body is buffered and read before admission: the model picks the class,
// max_tokens and the prompt size the request, and one that can never fit
// the pool's token bound is refused.
func TestBodyReadForModelAndSize(t *testing.T) {
	h := newHarness(t, `{"mesh": `+bodyMesh+`}`, true)
	for _, tc := range []struct {
		name      string
		body      string
		wantClass string
		wantCode  int
		wantReply string // in the reply's body
	}{
		{"model rule", `{"model":"big-model","prompt":"hi","max_tokens":10}`, "batch", 0, ""},
		{"other model", `{"model":"small","prompt":"hi","max_tokens":10}`, "interactive", 0, ""},
		{"chat", `{"model":"big-model","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":10}`, "batch", 0, ""},
		{"not openai", `[1,2,3]`, "interactive", 0, ""},
		{"never fits", `{"model":"small","prompt":"hi","max_tokens":5000}`, "", 503, "max_inflight_tokens"},
		// A client error, not a capacity shortage: 400 naming the field,
		// never a 503 that asks the client to retry.
		{"max_tokens beyond 32 bits", `{"model":"small","prompt":"hi","max_tokens":4294967297}`, "", 400, "max_tokens: 4294967297 exceeds 2147483647"},
		{"max_completion_tokens beyond 32 bits", `{"model":"small","messages":[],"max_completion_tokens":2147483648}`, "", 400, "max_completion_tokens: 2147483648 exceeds"},
		{"max_completion_tokens beside max_tokens", `{"model":"small","prompt":"hi","max_tokens":5,"max_completion_tokens":9999999999}`, "", 400, "max_completion_tokens: 9999999999 exceeds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := h.stream(fakesdk.Options{})
			wantStatus(t, "DecodeHeaders", s.DecodeHeaders(sseRequest(), false), api.StopAndBuffer)
			wantStatus(t, "DecodeData 1", s.DecodeData([]byte(tc.body[:5]), false), api.StopAndBuffer)
			r := s.DecodeData([]byte(tc.body[5:]), true)
			if tc.wantCode != 0 {
				wantStatus(t, "DecodeData 2", r, api.LocalReply)
				want(t, "code", s.Reply().Code, tc.wantCode)
				if rep := s.Reply(); !strings.Contains(rep.Body, tc.wantReply) || (tc.wantCode == 400) != (rep.Details == "llmesh_bad_request") {
					t.Errorf("reply %q (%s), want it to name %q", rep.Body, rep.Details, tc.wantReply)
				}
				if tc.wantCode == 400 {
					if v := s.Reply().Headers["retry-after"]; len(v) > 0 {
						t.Errorf("a client error told to retry after %s", v)
					}
				}
				s.Complete()
				noViolations(t, s)
				return
			}
			wantStatus(t, "DecodeData 2", r, api.Continue)
			want(t, "upstream body", string(s.Upstream()), tc.body)
			s.Complete()
			want(t, "class", s.Metadata(MetadataNamespace)["class"], tc.wantClass)
			noViolations(t, s)
		})
	}
	t.Run("headers only", func(t *testing.T) {
		s := h.stream(fakesdk.Options{})
		wantStatus(t, "GET", s.DecodeHeaders(fakesdk.RequestHeaders("GET", "/v1/models"), true), api.Continue)
		s.Complete()
		noViolations(t, s)
	})
	t.Run("trailers", func(t *testing.T) {
		s := h.stream(fakesdk.Options{})
		wantStatus(t, "DecodeHeaders", s.DecodeHeaders(sseRequest(), false), api.StopAndBuffer)
		wantStatus(t, "DecodeTrailers", s.DecodeTrailers(fakesdk.NewHeaders("x-t", "1")), api.Continue)
		s.Complete()
		noViolations(t, s)
	})
	want(t, "inflight", h.gauge(GaugeInflight), 0)
}

// TestNoBodyReadWithoutNeed: without model rules or token bounds requests
// stream through unbuffered.
func TestNoBodyReadWithoutNeed(t *testing.T) {
	h := newHarness(t, `{"mesh": `+testMesh("fifo", "")+`}`, false)
	s := h.stream(fakesdk.Options{})
	wantStatus(t, "DecodeHeaders", s.DecodeHeaders(sseRequest(), false), api.Continue)
	wantStatus(t, "DecodeData", s.DecodeData([]byte(`{"model":"x"}`), false), api.Continue)
	s.Complete()
	noViolations(t, s)
}

// FuzzRequestBody: arbitrary request bodies read before admission never
// panic, never break an SDK rule, reach the upstream unchanged and give
// non-negative sizes.
func FuzzRequestBody(f *testing.F) {
	for _, s := range []string{
		`{"model":"big-model","prompt":"hi","max_tokens":10}`,
		`{"messages":[{"content":"x"},{"content":[1,2]}],"max_completion_tokens":-3}`,
		`{"max_tokens":1e30}`, `{"model":7}`, `null`, ``, `{"prompt":"\ud800"}`,
	} {
		f.Add([]byte(s))
	}
	h := newHarness(f, `{"mesh": `+bodyMesh+`}`, false)
	f.Fuzz(func(t *testing.T, body []byte) {
		s := h.stream(fakesdk.Options{})
		if r := s.DecodeHeaders(sseRequest(), false); r.Status != api.StopAndBuffer {
			t.Fatalf("DecodeHeaders: %+v", r)
		}
		if r := s.DecodeData(body, true); r.Status != api.Continue {
			t.Fatalf("DecodeData: %+v", r)
		}
		sf := s.Filter().(*streamFilter)
		if m := sf.x.View().Meta; m.MaxTokens < 0 || m.PromptTokens < 0 {
			t.Fatalf("negative sizes: max %d prompt %d", m.MaxTokens, m.PromptTokens)
		}
		if string(s.Upstream()) != string(body) {
			t.Fatal("body changed on the way upstream")
		}
		s.Complete()
		if v := s.Violations(); len(v) > 0 || len(s.Panics()) > 0 {
			t.Fatalf("violations %v panics %v", v, s.Panics())
		}
	})
}

// TestTrailersAfterBufferedBody: request trailers after a JSON body read
// before admission, as Envoy delivers them (the buffered body first, to
// DecodeData without endStream, then the trailers): the body stays in the
// filter until admission and is read for the model, and a body being
// relocated is refused with nothing sent on. Answering StopAndBuffer there
// let Envoy send the request upstream unadmitted (see testkit/envoyhost).
func TestTrailersAfterBufferedBody(t *testing.T) {
	h := newHarness(t, `{"mesh": `+bodyMesh+`}`, true)
	s := h.stream(fakesdk.Options{})
	body := `{"model":"big-model","prompt":"hi","max_tokens":10}`
	wantStatus(t, "DecodeHeaders", s.DecodeHeaders(sseRequest(), false), api.StopAndBuffer)
	wantStatus(t, "DecodeData", s.DecodeData([]byte(body), false), api.StopAndBuffer)
	wantStatus(t, "DecodeTrailers", s.DecodeTrailers(fakesdk.NewHeaders("x-t", "1")), api.Continue)
	want(t, "upstream before admission", string(s.Upstream()), "")
	if got := s.AddedData(); len(got) != 1 || string(got[0]) != body {
		t.Errorf("AddData before admission = %q, want the body once", got)
	}
	s.Complete()
	want(t, "class", s.Metadata(MetadataNamespace)["class"], "batch")
	noViolations(t, s)
}

// TestGRPCBodySizedForTokenBound: with a token bound an llm.v1 or vLLM
// request's message is read before admission (exchange.ReadRequestMeta, as
// the gateway reads it), so one that can never fit the pool's bound is
// refused with a real gRPC status instead of being admitted unsized.
func TestGRPCBodySizedForTokenBound(t *testing.T) {
	mesh := `{"pools": [{"name": "g", "protocol": "grpc", "endpoints": ["127.0.0.1:9"],
	           "capacity": {"max_inflight": 4, "max_inflight_tokens": 1000}}],
	"classes": [{"name": "batch", "priority": 10}], "default_class": "batch"}`
	h := newHarness(t, `{"mesh": `+mesh+`}`, true)
	for _, tc := range []struct {
		name     string
		path     string
		msg      proto.Message
		wantGRPC int64 // 0: admitted
	}{
		{"llm.v1 fits", llmv1.Generation_Generate_FullMethodName, &llmv1.GenerateRequest{Prompt: "hi", MaxTokens: 10}, 0},
		{"llm.v1 never fits", llmv1.Generation_Generate_FullMethodName, &llmv1.GenerateRequest{Prompt: "hi", MaxTokens: 5000}, 14},
		{"llm.v1 max_tokens beyond 32 bits", llmv1.Generation_Generate_FullMethodName, &llmv1.GenerateRequest{Prompt: "hi", MaxTokens: 1<<32 - 1}, 3},
		{"vLLM max_tokens beyond 32 bits", vllmpb.VllmEngine_Generate_FullMethodName, &vllmpb.GenerateRequest{
			Input: &vllmpb.GenerateRequest_Text{Text: "hi"}, SamplingParams: &vllmpb.SamplingParams{MaxTokens: proto.Uint32(1 << 31)}}, 3},
		{"vLLM never fits", vllmpb.VllmEngine_Generate_FullMethodName, &vllmpb.GenerateRequest{
			Input: &vllmpb.GenerateRequest_Text{Text: "hi"}, SamplingParams: &vllmpb.SamplingParams{MaxTokens: proto.Uint32(5000)}}, 14},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := h.stream(fakesdk.Options{Protocol: "HTTP/2"})
			req := fakesdk.RequestHeaders("POST", tc.path, "content-type", "application/grpc", "te", "trailers")
			wantStatus(t, "DecodeHeaders", s.DecodeHeaders(req, false), api.StopAndBuffer)
			r := s.DecodeData(grpcframe.Message(tc.msg), true)
			if tc.wantGRPC != 0 {
				wantStatus(t, "DecodeData", r, api.LocalReply)
				want(t, "grpc status", s.Reply().GRPCStatus, tc.wantGRPC)
			} else {
				wantStatus(t, "DecodeData", r, api.Continue)
			}
			s.Complete()
			noViolations(t, s)
		})
	}
	want(t, "inflight", h.gauge(GaugeInflight), 0)
}

// TestSizedBodyParsedOnce: a sized body that arrives in one chunk is
// parsed once, by the sizing (the model is read with the sizes), not a
// second time for the model alone. Each parse copies the prompt, so the
// bytes allocated while the chunk is handled tell the parses apart: the
// sizing's own (measured alone) and the fake host's two copies of the chunk
// (its buffer, its record of what went upstream), where a second parse
// would add another copy of the prompt.
func TestSizedBodyParsedOnce(t *testing.T) {
	h := newHarness(t, `{"mesh": `+bodyMesh+`}`, true)
	const prompt = 8 << 20
	body := []byte(`{"model":"big-model","prompt":"` + strings.Repeat("a", prompt) + `","max_tokens":10}`)
	allocated := func(f func()) uint64 {
		var before, after goruntime.MemStats
		goruntime.ReadMemStats(&before)
		f()
		goruntime.ReadMemStats(&after)
		return after.TotalAlloc - before.TotalAlloc
	}
	sizing := allocated(func() { exchange.ReadRequestMeta("/v1/completions", body, false) })
	s := h.stream(fakesdk.Options{})
	wantStatus(t, "DecodeHeaders", s.DecodeHeaders(sseRequest(), false), api.StopAndBuffer)
	handled := allocated(func() { s.DecodeData(body, true) })
	s.Complete()
	noViolations(t, s)
	if limit := sizing + uint64(len(body))*5/2; handled > limit {
		t.Errorf("handling a one-chunk body of %d bytes allocated %d bytes, the sizing alone %d: parsed more than once", len(body), handled, sizing)
	}
}
