package epp_test

import (
	"encoding/binary"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/epp/epptest"
	"github.com/llmesh/llmesh/testkit/grpcframe"
)

func guardRequest(body string, kv ...string) epptest.Request {
	h := map[string]string{":method": "POST", ":path": "/v1/completions", "content-type": "application/json",
		"content-length": "99"}
	for i := 0; i+1 < len(kv); i += 2 {
		h[kv[i]] = kv[i+1]
	}
	return epptest.Request{Headers: h, Chunks: split(body, 3)}
}

// TestGuardRewritesBody: in a pool with engine_priority: class, the body
// forwarded is the guarded one (the client's priority replaced by its
// class's, Content-Length removed) in full duplex (streamed back) and
// buffered (the body mutation) modes; in streamed mode, where the chunks
// went on unchanged, such a body is refused rather than forwarded as sent.
// A body the guard leaves alone (the trusted marker keeps the client's
// priority) is forwarded as it is, in every mode.
func TestGuardRewritesBody(t *testing.T) {
	p := startPickerMesh(t, "testdata/mesh-guard.yaml", nil)
	const sent = `{"model":"m","prompt":"p","max_tokens":2,"priority":-100}`
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			call, pick, err := p.driver(m.mode).Start(ctx(t), guardRequest(sent))
			if err != nil {
				t.Fatal(err)
			}
			defer call.Cancel()
			if m.mode == epptest.Streamed {
				if pick.Immediate == nil || pick.Immediate.GetStatus().GetCode() != 400 ||
					!strings.Contains(string(pick.Immediate.GetBody()), "STREAMED") {
					t.Fatalf("streamed mode: %+v, want a 400 saying the body cannot be rewritten", pick)
				}
				return
			}
			if pick.Immediate != nil {
				t.Fatalf("refused: %s", pick.Immediate.GetBody())
			}
			if got := string(pick.Body); !strings.Contains(got, `"priority":10`) || strings.Contains(got, "-100") {
				t.Errorf("forwarded body %s, want the batch class's priority 10 in place of -100", got)
			}
			if !slices.Contains(pick.Removed, "content-length") {
				t.Errorf("removed headers %q, want content-length", pick.Removed)
			}
			if pick.Header != "10.0.0.1:8000" {
				t.Errorf("pick %q", pick.Header)
			}
		})
		t.Run(m.name+"/trusted", func(t *testing.T) {
			call, pick, err := p.driver(m.mode).Start(ctx(t), guardRequest(sent, "x-mesh-trusted", "s3cret"))
			if err != nil || pick.Immediate != nil {
				t.Fatalf("%v %+v", err, pick.Immediate)
			}
			defer call.Cancel()
			if string(pick.Body) != sent || len(pick.Removed) > 0 {
				t.Errorf("forwarded %s removing %q, want the body as sent", pick.Body, pick.Removed)
			}
		})
	}
}

// TestGuardRefusesUnreadableBody: a body the guard cannot read reliably
// (not strict JSON) is a 400 from the picker in every mode, as the other
// hosts refuse it.
func TestGuardRefusesUnreadableBody(t *testing.T) {
	p := startPickerMesh(t, "testdata/mesh-guard.yaml", nil)
	for _, m := range modes {
		t.Run(m.name, func(t *testing.T) {
			call, pick, err := p.driver(m.mode).Start(ctx(t), guardRequest(`{"model":"m","prompt":"p","max_tokens":2,"priority":NaN}`))
			if err != nil {
				t.Fatal(err)
			}
			defer call.Cancel()
			if pick.Immediate == nil || pick.Immediate.GetStatus().GetCode() != 400 {
				t.Fatalf("%+v, want 400", pick)
			}
		})
	}
}

// TestGRPCRequestModelAndGuard: an llm.v1 Generate request's message is
// read as the other hosts read it: its model is in the Record, and in a
// pool with engine_priority: class its priority is rewritten to the
// class's in the message streamed back (full duplex), split across chunks.
func TestGRPCRequestModelAndGuard(t *testing.T) {
	p := startPickerMesh(t, "testdata/mesh-guard.yaml", nil)
	body := grpcframe.Message(&llmv1.GenerateRequest{Model: "llama-g", Prompt: "a prompt", MaxTokens: 7, Priority: -5})
	h := map[string]string{":method": "POST", ":path": llmv1.Generation_Generate_FullMethodName,
		"content-type": "application/grpc", "te": "trailers"}
	call, pick, err := p.driver(epptest.FullDuplex).Start(ctx(t), epptest.Request{Headers: h, Chunks: split(string(body), 3)})
	if err != nil || pick.Immediate != nil {
		t.Fatalf("%v %+v", err, pick.Immediate)
	}
	if pick.Header != "10.0.0.3:9000" {
		t.Errorf("pick %q", pick.Header)
	}
	if len(pick.Body) < 5 || int(binary.BigEndian.Uint32(pick.Body[1:5])) != len(pick.Body)-5 {
		t.Fatalf("forwarded %d bytes, not one gRPC frame", len(pick.Body))
	}
	var got llmv1.GenerateRequest
	if err := proto.Unmarshal(pick.Body[5:], &got); err != nil {
		t.Fatal(err)
	}
	if got.GetPriority() != 10 || got.GetModel() != "llama-g" || got.GetPrompt() != "a prompt" {
		t.Errorf("forwarded %v, want the message with priority 10", &got)
	}
	call.Cancel()
	if r := p.record(t); r.Model != "llama-g" {
		t.Errorf("record model %q, want llama-g", r.Model)
	}
}
