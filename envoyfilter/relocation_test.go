package envoyfilter

import (
	"encoding/binary"
	"encoding/json"
	"strings"
	"testing"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"
	"google.golang.org/protobuf/proto"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/testkit/fakesdk"
	"github.com/llmesh/llmesh/testkit/grpcframe"
)

const relocationMesh = `, "relocation": {
	"http": [{"header": "x-llmesh-prompt", "threshold": 16}],
	"grpc": [{"metadata": "x-llmesh-prompt", "field": 2, "threshold": 16}]}`

// TestRelocationHTTP: an oversized prompt in a header is moved into the
// JSON body; the header and the stale content-length are removed, the body
// is buffered across chunks, and admission happens after the rewrite.
func TestRelocationHTTP(t *testing.T) {
	h := newHarness(t, `{"mesh": `+testMesh("fifo", relocationMesh)+`}`, true)
	s := h.stream(fakesdk.Options{})
	prompt := strings.Repeat("long prompt ", 20)
	body := `{"model":"m","max_tokens":3,"stream":true}`
	hdr := sseRequest("x-llmesh-prompt", prompt, "content-length", "42")
	wantStatus(t, "DecodeHeaders", s.DecodeHeaders(hdr, false), api.StopAndBuffer)
	wantStatus(t, "DecodeData 1", s.DecodeData([]byte(body[:10]), false), api.StopAndBuffer)
	r := s.DecodeData([]byte(body[10:]), true)
	wantStatus(t, "DecodeData 2", r, api.Continue)
	if !r.Async {
		t.Error("admission after relocation should hold the buffered data phase")
	}
	var got map[string]interface{}
	if err := json.Unmarshal(s.Upstream(), &got); err != nil {
		t.Fatalf("upstream body is not JSON: %v: %s", err, s.Upstream())
	}
	want(t, "prompt", got["prompt"], prompt)
	want(t, "model", got["model"], "m")
	snap := hdr.Snapshot()
	for _, k := range []string{"x-llmesh-prompt", "content-length"} {
		if _, ok := snap[k]; ok {
			t.Errorf("header %s still present after relocation", k)
		}
	}
	want(t, StatRelocated, h.counter(StatRelocated), 1)
	s.Complete()
	noViolations(t, s)
}

// TestRelocationGRPC: a prompt in gRPC metadata becomes field 2 (prompt)
// of the first llm.v1 request message, which arrives split across chunks.
func TestRelocationGRPC(t *testing.T) {
	h := newHarness(t, `{"mesh": `+testMesh("fifo", relocationMesh)+`}`, false)
	s := h.stream(fakesdk.Options{})
	prompt := strings.Repeat("p", 100)
	hdr := grpcRequest("x-llmesh-prompt", prompt)
	wantStatus(t, "DecodeHeaders", s.DecodeHeaders(hdr, false), api.Continue)
	if _, ok := hdr.Snapshot()["x-llmesh-prompt"]; ok {
		t.Error("metadata entry still present after relocation")
	}
	frame := grpcframe.Message(&llmv1.GenerateRequest{Model: "m", MaxTokens: 3})
	wantStatus(t, "DecodeData 1", s.DecodeData(frame[:3], false), api.StopNoBuffer)
	wantStatus(t, "DecodeData 2", s.DecodeData(frame[3:], true), api.Continue)
	up := s.Upstream()
	if len(up) < 5 || int(binary.BigEndian.Uint32(up[1:5])) != len(up)-5 {
		t.Fatalf("upstream is not one gRPC frame: %x", up)
	}
	var req llmv1.GenerateRequest
	if err := proto.Unmarshal(up[5:], &req); err != nil {
		t.Fatal(err)
	}
	want(t, "prompt", req.GetPrompt(), prompt)
	want(t, "model", req.GetModel(), "m")
	want(t, StatRelocated, h.counter(StatRelocated), 1)
	s.Complete()
	noViolations(t, s)
}

// TestRelocationErrors: values over the limit and requests without a body
// are refused with the relocation package's status, as gRPC statuses for
// gRPC.
func TestRelocationErrors(t *testing.T) {
	mesh := testMesh("fifo", `, "relocation": {
		"http": [{"header": "x-llmesh-prompt", "threshold": 4, "max": 8}],
		"grpc": [{"metadata": "x-llmesh-prompt", "field": 2, "threshold": 4, "max": 8}]}`)
	h := newHarness(t, `{"mesh": `+mesh+`}`, false)
	for _, tc := range []struct {
		name      string
		hdr       *fakesdk.HeaderMap
		end       bool
		code      int
		grpc      int64
		bodyMatch string
	}{
		{"http too large", sseRequest("x-llmesh-prompt", "0123456789"), false, 413, -1, "max"},
		{"grpc too large", grpcRequest("x-llmesh-prompt", "0123456789"), false, 413, 8, "max"},
		{"http no body", sseRequest("x-llmesh-prompt", "01234"), true, 400, -1, "no body"},
		{"grpc no body", grpcRequest("x-llmesh-prompt", "01234"), true, 400, 3, "no body"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := h.stream(fakesdk.Options{})
			wantStatus(t, "DecodeHeaders", s.DecodeHeaders(tc.hdr, tc.end), api.LocalReply)
			rep := s.Reply()
			want(t, "code", rep.Code, tc.code)
			want(t, "grpc status", rep.GRPCStatus, tc.grpc)
			if !strings.Contains(rep.Body, tc.bodyMatch) {
				t.Errorf("reply body %q does not mention %q", rep.Body, tc.bodyMatch)
			}
			s.Complete()
			noViolations(t, s)
		})
	}
	t.Run("http trailers", func(t *testing.T) {
		s := h.stream(fakesdk.Options{})
		wantStatus(t, "DecodeHeaders", s.DecodeHeaders(sseRequest("x-llmesh-prompt", "01234"), false), api.StopAndBuffer)
		wantStatus(t, "DecodeTrailers", s.DecodeTrailers(fakesdk.NewHeaders("x-t", "1")), api.LocalReply)
		want(t, "code", s.Reply().Code, 400)
		s.Complete()
		noViolations(t, s)
	})
	want(t, StatRelocationErrors, h.counter(StatRelocationErrors), 5)
}
