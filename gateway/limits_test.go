package gateway

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/sim/simtest"
)

// TestOutputLimitBeyond32BitsRefused: an output limit no engine can hold
// is the client's error: 400 naming the field, no Retry-After, and the
// engine never sees the request (before the fix the scheduler rejected
// it as if capacity were short: 503 with Retry-After: 1).
func TestOutputLimitBeyond32BitsRefused(t *testing.T) {
	sim := simtest.Start(t)
	eng := simtest.StartRecorder(t, sim.HTTPURL, false)
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "sim", Upstream: eng.URL}}})
	for _, tc := range []struct {
		name, path, body, field string
	}{
		{"max_tokens", "/v1/completions", `{"model":"M","prompt":"hi","max_tokens":4294967297}`, "max_tokens: 4294967297 exceeds 2147483647"},
		{"max_tokens, streaming", "/v1/completions", `{"model":"M","prompt":"hi","stream":true,"max_tokens":2147483648}`, "max_tokens: 2147483648 exceeds"},
		{"max_completion_tokens", "/v1/chat/completions", `{"model":"M","messages":[{"role":"user","content":"hi"}],"max_completion_tokens":9999999999}`, "max_completion_tokens: 9999999999 exceeds"},
		{"max_completion_tokens beside max_tokens", "/v1/chat/completions", `{"model":"M","messages":[],"max_tokens":3,"max_completion_tokens":9999999999}`, "max_completion_tokens: 9999999999 exceeds"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := doJSON(t, gw+tc.path, []byte(strings.Replace(tc.body, `"M"`, `"`+sim.Model+`"`, 1)))
			got, _ := io.ReadAll(res.Body)
			res.Body.Close()
			if res.StatusCode != http.StatusBadRequest || !strings.Contains(string(got), tc.field) {
				t.Fatalf("status %d %s, want 400 naming %q", res.StatusCode, got, tc.field)
			}
			if ra := res.Header.Get("Retry-After"); ra != "" {
				t.Errorf("a client error told to retry after %s", ra)
			}
			if n := len(eng.TakeAll()); n != 0 {
				t.Errorf("engine received %d requests", n)
			}
		})
	}
	// At the limit the request reaches the engine (which may refuse it
	// for its own context length).
	res := doJSON(t, gw+"/v1/completions", []byte(`{"model":"`+sim.Model+`","prompt":"hi","max_tokens":2147483647}`))
	res.Body.Close()
	if n := len(eng.TakeAll()); n != 1 {
		t.Errorf("max_tokens 2147483647: engine received %d requests, want 1 (status %d)", n, res.StatusCode)
	}
}

// TestGRPCOutputLimitBeyond32BitsRefused: llm.v1 max_tokens is a uint32;
// past int32 the call ends INVALID_ARGUMENT naming the field, before the
// engine.
func TestGRPCOutputLimitBeyond32BitsRefused(t *testing.T) {
	up := startGRPC(t, &genServer{n: 2})
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "g", Protocol: GRPC, Upstream: up}}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	st, err := grpcClient(t, gw).Generate(ctx, &llmv1.GenerateRequest{Model: "m", Prompt: "hello", MaxTokens: 1<<32 - 1})
	if err == nil {
		_, err = st.Recv()
	}
	if s := status.Convert(err); s.Code() != codes.InvalidArgument || !strings.Contains(s.Message(), "max_tokens: 4294967295 exceeds") {
		t.Fatalf("status %v, want InvalidArgument naming max_tokens", err)
	}
}
