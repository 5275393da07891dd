package exchange

import (
	"encoding/binary"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/testkit/grpcframe"
)

func TestRequestModel(t *testing.T) {
	full := grpcframe.Message(&llmv1.GenerateRequest{Prompt: "p", MaxTokens: 3, Model: "m-1"})
	for _, tc := range []struct {
		name   string
		method string
		body   []byte
		grpc   bool
		want   string
	}{
		{"json", "/v1/completions", []byte(`{"prompt":"x","model":"m-2"}`), false, "m-2"},
		{"json without model", "/v1/completions", []byte(`{"prompt":"x"}`), false, ""},
		{"not json", "/v1/completions", []byte(`nope`), false, ""},
		{"llm.v1", llmv1.Generation_Generate_FullMethodName, full, true, "m-1"},
		{"llm.v1 cut", llmv1.Generation_Generate_FullMethodName, full[:len(full)-2], true, ""},
		{"llm.v1 compressed", llmv1.Generation_Generate_FullMethodName, append([]byte{1}, full[1:]...), true, ""},
		{"other method", "/vllm.grpc.engine.VllmEngine/Generate", full, true, ""},
	} {
		if got := requestModel(tc.method, tc.body, tc.grpc); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}

// FuzzRequestModel: any gRPC body is read without a panic, and the model
// found is the one proto.Unmarshal reads.
func FuzzRequestModel(f *testing.F) {
	f.Add(grpcframe.Message(&llmv1.GenerateRequest{Model: "m", Prompt: "p"}))
	f.Add([]byte{0, 0, 0, 0, 1, 10})
	f.Fuzz(func(t *testing.T, body []byte) {
		m := requestModel(MethodLLMV1, body, true)
		if m == "" {
			return
		}
		var req llmv1.GenerateRequest
		n := binary.BigEndian.Uint32(body[1:5])
		if err := proto.Unmarshal(body[5:5+n], &req); err == nil && req.GetModel() != m {
			t.Fatalf("model %q, proto.Unmarshal reads %q", m, req.GetModel())
		}
	})
}
