package exchange

import (
	"reflect"
	"strconv"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/api/vllmpb"
)

// protoMeta is what the generated messages say about a gRPC request: the
// reference ReadRequestMeta's protowire reading must agree with.
func protoMeta(t testing.TB, path string, body []byte) (model string, maxTokens, promptTokens int) {
	t.Helper()
	msg := body[5:]
	switch path {
	case MethodLLMV1:
		var r llmv1.GenerateRequest
		if err := proto.Unmarshal(msg, &r); err != nil {
			t.Fatal(err)
		}
		if r.GetPrompt() != "" {
			return r.GetModel(), int(r.GetMaxTokens()), estimateTokens(len(r.GetPrompt()))
		}
		return r.GetModel(), int(r.GetMaxTokens()), len(r.GetPromptTokenIds())
	default:
		var r vllmpb.GenerateRequest
		if err := proto.Unmarshal(msg, &r); err != nil {
			t.Fatal(err)
		}
		if r.GetText() != "" {
			return "", int(r.GetSamplingParams().GetMaxTokens()), estimateTokens(len(r.GetText()))
		}
		return "", int(r.GetSamplingParams().GetMaxTokens()), len(r.GetTokenized().GetInputIds())
	}
}

func metaFrame(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	out := []byte{0, byte(len(b) >> 24), byte(len(b) >> 16), byte(len(b) >> 8), byte(len(b))}
	return append(out, b...)
}

// FuzzReadRequestMetaGRPC: for any llm.v1 or vLLM request the generated
// code writes, the core's reading gives what the generated code reads.
func FuzzReadRequestMetaGRPC(f *testing.F) {
	f.Add("m", "a prompt", []byte{1, 2, 3}, uint32(16), false)
	f.Add("", "", []byte{200, 7}, uint32(0), true)
	f.Add("m", "text", []byte{}, uint32(1<<31), true)
	f.Fuzz(func(t *testing.T, model, prompt string, idBytes []byte, maxTokens uint32, vllm bool) {
		ids := make([]uint32, len(idBytes))
		for i, b := range idBytes {
			ids[i] = uint32(b) << (i % 24)
		}
		path := MethodLLMV1
		var msg proto.Message = &llmv1.GenerateRequest{Model: model, Prompt: prompt, PromptTokenIds: ids, MaxTokens: maxTokens}
		if vllm {
			path = MethodVLLM
			r := &vllmpb.GenerateRequest{SamplingParams: &vllmpb.SamplingParams{MaxTokens: &maxTokens}, Stream: true}
			if prompt != "" {
				r.Input = &vllmpb.GenerateRequest_Text{Text: prompt}
			} else {
				r.Input = &vllmpb.GenerateRequest_Tokenized{Tokenized: &vllmpb.TokenizedInput{InputIds: ids}}
			}
			msg = r
		}
		b, err := proto.Marshal(msg)
		if err != nil {
			return // not valid UTF-8: the generated code refuses to write it
		}
		body := append([]byte{0, byte(len(b) >> 24), byte(len(b) >> 16), byte(len(b) >> 8), byte(len(b))}, b...)
		got := ReadRequestMeta(path, body, true)
		wm, wmax, wprompt := protoMeta(t, path, body)
		if wmax > MaxOutputTokens {
			// No engine can honour it: named, unsized (hosts refuse it).
			if !strings.Contains(got.Invalid, "max_tokens: "+strconv.Itoa(wmax)+" exceeds") || got.MaxTokens != 0 {
				t.Fatalf("%s: max_tokens %d read as %+v, want it named in Invalid", path, wmax, got)
			}
			wmax = 0
		} else if got.Invalid != "" {
			t.Fatalf("%s: max_tokens %d refused: %s", path, wmax, got.Invalid)
		}
		if got.Model != wm || got.MaxTokens != wmax || got.PromptTokens != wprompt || !got.Stream {
			t.Fatalf("%s: got %+v, the generated code reads model %q, max %d, prompt tokens %d", path, got, wm, wmax, wprompt)
		}
	})
}

func TestReadRequestMeta(t *testing.T) {
	for _, tc := range []struct {
		name, path string
		body       []byte
		grpc       bool
		want       RequestMeta
	}{
		{"completions", "/v1/completions", []byte(`{"model":"m","prompt":"hi there","stream":true,"max_tokens":5}`), false,
			RequestMeta{API: APICompletions, Model: "m", Stream: true, MaxTokens: 5, PromptTokens: 3, Spliceable: true}},
		{"chat", "/v1/chat/completions", []byte(`{"messages":[{"role":"user","content":"x"}],"max_completion_tokens":3,"stream":true,"stream_options":{"include_usage":true}}`), false,
			RequestMeta{API: APIChat, Stream: true, MaxTokens: 3, PromptTokens: 1, Spliceable: true, IncludeUsage: true}},
		{"negative max_tokens clamps", "/v1/completions", []byte(`{"prompt":"x","max_tokens":-4}`), false,
			RequestMeta{API: APICompletions, PromptTokens: 1}},
		{"max_tokens at the limit", "/v1/completions", []byte(`{"prompt":"x","max_tokens":2147483647}`), false,
			RequestMeta{API: APICompletions, PromptTokens: 1, MaxTokens: 2147483647}},
		{"max_tokens beyond 32 bits", "/v1/completions", []byte(`{"prompt":"x","max_tokens":4294967297}`), false,
			RequestMeta{API: APICompletions, PromptTokens: 1, Invalid: "max_tokens: 4294967297 exceeds 2147483647"}},
		{"max_completion_tokens beyond 32 bits", "/v1/chat/completions", []byte(`{"messages":[],"max_completion_tokens":2147483648}`), false,
			RequestMeta{API: APIChat, Invalid: "max_completion_tokens: 2147483648 exceeds 2147483647"}},
		{"max_completion_tokens beside a valid max_tokens", "/v1/completions", []byte(`{"max_tokens":3,"max_completion_tokens":2147483648}`), false,
			RequestMeta{API: APICompletions, Invalid: "max_completion_tokens: 2147483648 exceeds 2147483647"}},
		{"llm.v1 max_tokens beyond int32", MethodLLMV1, metaFrame(t, &llmv1.GenerateRequest{Model: "m", Prompt: "abcd", MaxTokens: 1 << 31}), true,
			RequestMeta{Model: "m", Stream: true, PromptTokens: 1, Invalid: "max_tokens: 2147483648 exceeds 2147483647"}},
		{"echo is not spliceable", "/v1/completions", []byte(`{"prompt":"x","stream":true,"echo":true}`), false,
			RequestMeta{API: APICompletions, Stream: true, PromptTokens: 1}},
		{"not json", "/v1/completions", []byte(`nope`), false, RequestMeta{}},
		{"no body", "/v1/models", nil, false, RequestMeta{}},
		{"a route's own generation path", "/generate", []byte(`{"model":"m","prompt":"x","stream":true}`), false,
			RequestMeta{Model: "m", Stream: true, PromptTokens: 1}},
		{"llm.v1", MethodLLMV1, metaFrame(t, &llmv1.GenerateRequest{Model: "m", PromptTokenIds: []uint32{1, 2, 3}, MaxTokens: 9}), true,
			RequestMeta{Model: "m", Stream: true, MaxTokens: 9, PromptTokens: 3}},
		{"compressed", MethodLLMV1, append([]byte{1}, metaFrame(t, &llmv1.GenerateRequest{Model: "m"})[1:]...), true, RequestMeta{}},
		{"unknown method", "/x.Y/Z", metaFrame(t, &llmv1.GenerateRequest{Model: "m"}), true, RequestMeta{}},
		{"bad protobuf", MethodVLLM, []byte{0, 0, 0, 0, 2, 0x1a, 0x09}, true, RequestMeta{}},
	} {
		if got := ReadRequestMeta(tc.path, tc.body, tc.grpc); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: %+v, want %+v", tc.name, got, tc.want)
		}
	}
}
