package relocatehttp

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"google.golang.org/grpc/metadata"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/api/vllmpb"
	"github.com/llmesh/llmesh/exchange/relocate"
	"github.com/llmesh/llmesh/sim/simtest"
)

// wordPrompt is about n bytes of long whitespace-separated words and their
// count. The sim counts prompt tokens as words, so its usage report proves
// that the whole prompt arrived in the body.
func wordPrompt(n int) (string, int) {
	const wordLen = 1023
	var b strings.Builder
	b.Grow(n + wordLen)
	words := 0
	for i := 0; b.Len() < n; i++ {
		if i > 0 {
			b.WriteByte(' ')
		}
		w := bigPrompt(wordLen + i%7)
		b.WriteString(strings.ReplaceAll(w, " ", "_"))
		words++
	}
	return b.String(), words
}

func assertNoBigHeader(t *testing.T, s seen, key string) {
	t.Helper()
	for _, k := range s.keys {
		if strings.EqualFold(k, key) {
			t.Fatalf("the request to the sim still carried %q", key)
		}
	}
	if s.headerSize > 4096 {
		t.Fatalf("the request to the sim carried %d bytes of headers", s.headerSize)
	}
}

// TestSimGRPC sends multi-megabyte prompts in metadata through the middleware
// to the real simulated engine over gRPC (2 MiB for llm.v1 in text metadata,
// 1 MiB, 1.4 MiB as base64, for vLLM's API in -bin metadata); the sim's
// usage counts every word, and the request that reached the sim carried no
// oversized header. (The sim keeps gRPC's default 4 MiB message limit.)
func TestSimGRPC(t *testing.T) {
	sim := simtest.Start(t)
	m := startFront(t, grpcRules, sim.GRPCAddr, sim.HTTPURL)
	cc := m.dial(t)
	prompt, words := wordPrompt(2 << 20)

	ctx := metadata.AppendToOutgoingContext(ctxTimeout(t), "x-prompt-raw", prompt)
	st, err := llmv1.NewGenerationClient(cc).Generate(ctx, &llmv1.GenerateRequest{Model: sim.Model, MaxTokens: 3})
	if err != nil {
		t.Fatal(err)
	}
	var usage *llmv1.Usage
	for {
		r, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		if r.GetUsage() != nil {
			usage = r.GetUsage()
		}
	}
	if usage == nil || int(usage.PromptTokens) != words {
		t.Fatalf("sim usage %v, want %d prompt tokens", usage, words)
	}
	assertNoBigHeader(t, m.upstream.got(), "x-prompt-raw")

	prompt, words = wordPrompt(1 << 20)
	ctx = metadata.AppendToOutgoingContext(ctxTimeout(t), "x-prompt-bin", prompt)
	vst, err := vllmpb.NewVllmEngineClient(cc).Generate(ctx, &vllmpb.GenerateRequest{RequestId: "v1", Stream: true,
		SamplingParams: &vllmpb.SamplingParams{MaxTokens: ptr(uint32(2))}})
	if err != nil {
		t.Fatal(err)
	}
	var complete *vllmpb.GenerateComplete
	for {
		r, err := vst.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		if c := r.GetComplete(); c != nil {
			complete = c
		}
	}
	if complete == nil || int(complete.PromptTokens) != words {
		t.Fatalf("sim complete %v, want %d prompt tokens", complete, words)
	}
	assertNoBigHeader(t, m.upstream.got(), "x-prompt-bin")
}

// TestSimHTTP moves a 2 MiB header into the JSON body of completions and
// chat completions sent to the real simulated engine.
func TestSimHTTP(t *testing.T) {
	sim := simtest.Start(t)
	m := startFront(t, relocate.Config{HTTP: []relocate.HTTPRule{{Header: "x-prompt"}}}, sim.GRPCAddr, sim.HTTPURL)
	prompt, words := wordPrompt(2 << 20)
	for _, tc := range []struct{ path, body string }{
		{"/v1/completions", `{"model":"` + sim.Model + `","max_tokens":2}`},
		{"/v1/chat/completions", `{"model":"` + sim.Model + `","max_tokens":2,"messages":[]}`},
	} {
		status, b := postJSON(t, m, tc.path, prompt, tc.body)
		if status != http.StatusOK {
			t.Fatalf("%s: %d %s", tc.path, status, b)
		}
		var out struct {
			Usage struct {
				PromptTokens int `json:"prompt_tokens"`
			} `json:"usage"`
		}
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatalf("%s: %v: %s", tc.path, err, b)
		}
		if out.Usage.PromptTokens != words {
			t.Fatalf("%s: sim counted %d prompt tokens, want %d", tc.path, out.Usage.PromptTokens, words)
		}
		assertNoBigHeader(t, m.upstream.got(), "x-prompt")
	}
}

func ptr[T any](v T) *T { return &v }
