package envoyfilter

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"
	"google.golang.org/protobuf/proto"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/sim"
	"github.com/llmesh/llmesh/sim/simtest"
	"github.com/llmesh/llmesh/testkit/fakesdk"
	"github.com/llmesh/llmesh/testkit/grpcframe"
)

// classMesh: one pool with engine_priority: class; classes gold -5 and
// bulk 7 (the default); the fake's peer is not trusted for priority, the
// marker x-mesh-trusted: s3cret makes a request trusted. rules, when not
// empty, is a classification rules array.
func classMesh(protocol, rules string) string {
	return `{
	"pools": [{"name": "sim", "protocol": "` + protocol + `", "endpoints": ["127.0.0.1:9"], "capacity": {"max_inflight": 4},
	           "engine_priority": "class"}],
	"classes": [{"name": "gold", "priority": -5}, {"name": "bulk", "priority": 7}],
	"default_class": "bulk",
	"classification": {"rules": ` + rules + `, "priority_header": {"name": "x-llmesh-class", "trusted_sources": ["10.0.0.0/8"],
	                   "trusted_marker": {"header": "x-mesh-trusted", "value": "s3cret"}}}
}`
}

// TestEnginePriorityClassThroughSim: for a pool with engine_priority:
// class, the adapter writes the request's class priority into what the
// real sim (scheduling by priority) receives, replacing or adding the
// top-level "priority" of an untrusted request, streaming and not; the
// class is the one decided after the body is read when a rule matches the
// model; the body's length changes, so the request loses its
// content-length; a trusted request passes byte for byte.
func TestEnginePriorityClassThroughSim(t *testing.T) {
	s := simtest.Start(t, simtest.WithEngine(sim.Config{Policy: sim.Priority}))
	c := &http.Client{Timeout: time.Minute}
	defer c.CloseIdleConnections()
	eng := simtest.StartRecorder(t, s.HTTPURL, false)
	byHeaders := newHarness(t, `{"mesh": `+classMesh("openai", "[]")+`}`, true)
	byModel := newHarness(t, `{"mesh": `+classMesh("openai", `[{"model": "`+s.Model+`", "class": "gold"}]`)+`}`, true)
	var set uint64
	for _, tc := range []struct {
		name    string
		h       *harness
		headers []string
		sent    string // the client's priority member, "" for none
		want    string // the engine's top-level priority, "" for the body as sent
		class   string
	}{
		{"untrusted, class from headers", byHeaders, []string{"x-llmesh-class", "gold"}, `,"priority":-100,"priorit\u0079":-200`, "7", "bulk"},
		{"untrusted, case variants", byHeaders, nil, `,"PRIORITY":-100,"Priority":-200`, "7", "bulk"},
		{"untrusted, no priority", byHeaders, nil, "", "7", "bulk"},
		{"untrusted, class from the model", byModel, nil, `,"priority":-100`, "-5", "gold"},
		{"trusted marker", byHeaders, []string{"x-mesh-trusted", "s3cret", "x-llmesh-class", "gold"}, `,"priority":-100`, "", "gold"},
	} {
		for _, stream := range []bool{false, true} {
			body := `{"model":"` + s.Model + `","prompt":"hi","max_tokens":4,"stream":` + jsonBool(stream) + tc.sent + `}`
			reqH := sseRequest(append([]string{"content-length", strconv.Itoa(len(body))}, tc.headers...)...)
			st := proxy(t, tc.h, c, eng.URL+"/v1/completions", reqH, []byte(body))
			got := eng.TakeAll()
			if len(got) != 1 {
				t.Fatalf("%s stream=%v: engine received %d requests", tc.name, stream, len(got))
			}
			_, hasLen := reqH.Snapshot()["content-length"]
			md := st.Metadata(MetadataNamespace)
			want(t, tc.name+" class", md["class"], tc.class)
			want(t, tc.name+" output_tokens", md["output_tokens"], 4)
			if _, bad := md["error"]; bad {
				t.Errorf("%s stream=%v: error = %v", tc.name, stream, md["error"])
			}
			if tc.want == "" {
				if string(got[0]) != body || !hasLen {
					t.Errorf("%s stream=%v: trusted body changed (content-length kept: %v):\nsent %s\ngot  %s", tc.name, stream, hasLen, body, got[0])
				}
				continue
			}
			set++
			m := topLevel(t, got[0])
			if string(m["priority"]) != tc.want || string(m["prompt"]) != `"hi"` || string(m["max_tokens"]) != "4" {
				t.Errorf("%s stream=%v: engine received %s, want priority %s", tc.name, stream, got[0], tc.want)
			}
			// What a Go engine reads: encoding/json matches keys
			// case-insensitively and keeps the last match.
			var eng struct {
				P json.RawMessage `json:"priority"`
			}
			if err := json.Unmarshal(got[0], &eng); err != nil || string(eng.P) != tc.want {
				t.Errorf("%s stream=%v: encoding/json reads priority %s (%v), want %s: %s", tc.name, stream, eng.P, err, tc.want, got[0])
			}
			var dup map[string]any
			if err := json.Unmarshal(got[0], &dup); err != nil || len(dup) != len(m) {
				t.Errorf("%s stream=%v: %s", tc.name, stream, got[0])
			}
			if hasLen {
				t.Errorf("%s stream=%v: content-length %v kept on a rewritten body", tc.name, stream, reqH.Snapshot()["content-length"])
			}
		}
	}
	want(t, StatPrioritySet, byHeaders.counter(StatPrioritySet)+byModel.counter(StatPrioritySet), set)
	want(t, StatPriorityStripped, byHeaders.counter(StatPriorityStripped)+byModel.counter(StatPriorityStripped), 0)
}

// TestEnginePriorityClassGRPC: an untrusted llm.v1 request reaches the sim
// with its class's priority (set or not by the client); a trusted one with
// the client's.
func TestEnginePriorityClassGRPC(t *testing.T) {
	s := simtest.Start(t, simtest.WithEngine(sim.Config{Policy: sim.Priority}))
	h := newHarness(t, `{"mesh": `+classMesh("grpc", "[]")+`}`, true)
	eng := simtest.StartRecorder(t, "http://"+s.GRPCAddr, true)
	var protos http.Protocols
	protos.SetUnencryptedHTTP2(true)
	c := &http.Client{Timeout: time.Minute, Transport: &http.Transport{Protocols: &protos}}
	defer c.CloseIdleConnections()
	for _, tc := range []struct {
		name       string
		headers    []string
		sent, want int32
	}{
		{"untrusted", []string{"x-llmesh-class", "gold"}, -100, 7},
		{"untrusted, no priority", nil, 0, 7},
		{"trusted marker", []string{"x-mesh-trusted", "s3cret"}, 3, 3},
	} {
		req := grpcframe.Message(&llmv1.GenerateRequest{Model: s.Model, Prompt: "hi", MaxTokens: 6, Priority: tc.sent,
			Sampling: &llmv1.SamplingParams{IgnoreEos: true}})
		st := proxy(t, h, c, eng.URL+llmv1.Generation_Generate_FullMethodName, grpcRequest(tc.headers...), req)
		got := eng.TakeAll()
		if len(got) != 1 || len(got[0]) < 5 {
			t.Fatalf("%s: engine received %d requests", tc.name, len(got))
		}
		var r llmv1.GenerateRequest
		if err := proto.Unmarshal(got[0][5:], &r); err != nil {
			t.Fatal(err)
		}
		if r.GetPriority() != tc.want || r.GetPrompt() != "hi" || r.GetMaxTokens() != 6 {
			t.Errorf("%s: engine received %v, want priority %d", tc.name, &r, tc.want)
		}
		want(t, tc.name+" output_tokens", st.Metadata(MetadataNamespace)["output_tokens"], 6)
	}
	want(t, StatPrioritySet, h.counter(StatPrioritySet), 2)
}

// FuzzGuardedBodyClass: arbitrary JSON bodies from an untrusted peer to a
// pool with engine_priority: class, in two chunks cut anywhere, never
// panic or break an SDK rule; either the body is refused with 400 before
// anything goes upstream, or what goes upstream is exactly the core's
// rewrite with the default class's priority.
func FuzzGuardedBodyClass(f *testing.F) {
	for i, s := range []string{
		`{"model":"m","priority":-100}`, `{"priority":1,"priority":2}`, `{"a":{"priority":1}}`, `{}`, `[1]`, ``,
		`{"priority":NaN}`, `{"priorit\u0079":3}`, "\xef\xbb\xbf{\"priority\":1}", ` { "a" : 1 } `,
	} {
		f.Add([]byte(s), uint16(i*3))
	}
	h := newHarness(f, `{"mesh": `+classMesh("openai", "[]")+`}`, false)
	f.Fuzz(func(t *testing.T, body []byte, cut uint16) {
		s := h.stream(fakesdk.Options{})
		reqH := sseRequest("content-length", strconv.Itoa(len(body)))
		if r := s.DecodeHeaders(reqH, false); r.Status != api.Continue {
			t.Fatalf("DecodeHeaders: %+v", r)
		}
		if _, ok := reqH.Snapshot()["content-length"]; ok {
			t.Fatal("content-length kept for a body that will be rewritten")
		}
		last := body
		if int(cut) < len(body) {
			if r := s.DecodeData(body[:cut], false); r.Status != api.StopNoBuffer {
				t.Fatalf("DecodeData 1: %+v", r)
			}
			last = body[cut:]
		}
		r := s.DecodeData(last, true)
		want, _, err := exchange.RewriteJSONPriority(body, exchange.EnginePriority{Mode: exchange.PrioritySet, Value: 7})
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
