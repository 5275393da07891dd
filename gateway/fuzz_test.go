package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/testkit/grpcframe"
)

func FuzzRequestMeta(f *testing.F) {
	f.Add("/v1/completions", []byte(`{"model":"m","prompt":"hi","stream":true,"max_tokens":5}`), false)
	f.Add("/v1/chat/completions", []byte(`{"messages":[{"role":"user","content":"x"}],"stream":true,"n":1,"max_completion_tokens":3}`), false)
	f.Add("/v1/completions", []byte(`{"prompt":[1,2,3],"logprobs":2,"echo":true}`), false)
	f.Add("/llm.v1.Generation/Generate", grpcframe.Message(&llmv1.GenerateRequest{Prompt: "abc", MaxTokens: 4}), true)
	f.Add("/vllm.grpc.engine.VllmEngine/Generate", []byte{0, 0, 0, 0, 9, 1, 2}, true)
	f.Add("/v1/completions", []byte(`{"prompt":"x","max_tokens":4294967297}`), false)
	f.Add("/v1/chat/completions", []byte(`{"max_tokens":1,"max_completion_tokens":2147483648}`), false)
	f.Fuzz(func(t *testing.T, path string, body []byte, grpc bool) {
		m := exchange.ReadRequestMeta(path, body, grpc)
		if m.MaxTokens < 0 || m.MaxTokens > exchange.MaxOutputTokens {
			t.Fatalf("output limit %d outside [0, %d]", m.MaxTokens, exchange.MaxOutputTokens)
		}
		if m.Invalid != "" && (m.MaxTokens != 0 || !strings.Contains(m.Invalid, "max_") || !strings.Contains(m.Invalid, "tokens: ")) {
			t.Fatalf("invalid request %q does not name its field, or kept a size: %+v", m.Invalid, m)
		}
		if m.PromptTokens < 0 {
			t.Fatalf("negative prompt tokens %d", m.PromptTokens)
		}
		if m.Spliceable && (!m.Stream || m.API == exchange.APIOther) {
			t.Fatalf("spliceable without a streamed OpenAI API: %+v", m)
		}
	})
}

// chunkedReader returns data in pieces of the given sizes.
type chunkedReader struct {
	data  []byte
	sizes []byte
}

func (c *chunkedReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := len(c.data)
	if len(c.sizes) > 0 {
		n = min(n, int(c.sizes[0])+1)
		c.sizes = c.sizes[1:]
	}
	n = copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

// pipeThrough runs body through a stream as ReverseProxy would (32 KiB
// buffer, or bufSize) and returns what the client would get.
func pipeThrough(t *testing.T, contentType string, body []byte, sizes []byte, bufSize int) []byte {
	t.Helper()
	g, err := New(Config{Pools: []Pool{{Name: "p", Upstream: "127.0.0.1:1"}}})
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, "http://gw/v1/completions", nil)
	x := g.newExchange(g.cfg.Load(), g.cfg.Load().httpPool, req, g.clock.Now(), nil, "", false)
	defer x.finish()
	res := &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {contentType}},
		Body: io.NopCloser(&chunkedReader{data: body, sizes: sizes}), Request: req}
	a := x.newAttempt(context.Background())
	s := newStream(x, a, nil, req, res)
	if err := s.prime(); err != nil {
		t.Fatalf("prime: %v", err)
	}
	var out bytes.Buffer
	buf := make([]byte, bufSize)
	for {
		n, err := s.Read(buf)
		out.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("Read: %v", err)
		}
	}
	s.Close()
	return out.Bytes()
}

// FuzzStreamTransparent: whatever the upstream sends and however its reads
// are split, a stream that ends normally reaches the client byte for byte
// (holding back partial SSE events and gRPC frames only delays them).
func FuzzStreamTransparent(f *testing.F) {
	f.Add("text/event-stream", []byte("data: {\"choices\":[{\"text\":\"a\"}]}\n\ndata: [DONE]\n\n"), []byte{3, 200, 1}, uint16(64))
	f.Add("text/event-stream", []byte("data: x\r\n\r\n: c\n\nevent: e\ndata: y\n\n"), []byte{0, 0, 0}, uint16(5))
	f.Add("application/grpc", append(grpcframe.Message(&llmv1.GenerateResponse{TokenIds: []uint32{1}}), grpcframe.Message(&llmv1.GenerateResponse{Text: "zz"})...), []byte{2, 9}, uint16(7))
	f.Add("application/grpc", []byte{0, 0, 0, 1, 0, 1, 2, 3}, []byte{1}, uint16(4))
	f.Add("application/json", []byte(`{"choices":[]}`), []byte{}, uint16(32768))
	f.Fuzz(func(t *testing.T, ct string, body, sizes []byte, bufSize uint16) {
		if bufSize == 0 {
			bufSize = 1
		}
		got := pipeThrough(t, ct, body, sizes, int(bufSize))
		if !bytes.Equal(got, body) {
			t.Fatalf("client got %q, upstream sent %q", got, body)
		}
	})
}

func FuzzSpliceRewrite(f *testing.F) {
	f.Add([]byte(`data: {"id":"x","choices":[{"delta":{"role":"assistant","content":""}}]}`+"\n\n"+`data: {"choices":[{"text":" a"}],"usage":{"prompt_tokens":9,"completion_tokens":3}}`+"\n\ndata: [DONE]\n\n"),
		[]byte(`{"prompt":"p","max_tokens":8,"min_tokens":2}`), true)
	f.Add([]byte("event: x\n\n\n\n"), []byte(`{"messages":[{"role":"user","content":"q"}],"max_completion_tokens":1}`), false)
	f.Fuzz(func(t *testing.T, events, orig []byte, chat bool) {
		kind := exchange.APICompletions
		if chat {
			kind = exchange.APIChat
		}
		sp := newSplicer(kind)
		sp.track(events)
		sp.before = 3
		sp.sent, sp.checking = " a b", chat
		out, err := sp.rewrite(events)
		if err != nil && !errors.Is(err, ErrContinuationRestarted) {
			t.Fatalf("rewrite: %v", err)
		}
		if err == nil {
			rest, err := sp.settle()
			if err != nil && !errors.Is(err, ErrContinuationRestarted) {
				t.Fatalf("settle: %v", err)
			}
			out = append(out, rest...)
		}
		forEachData(out, func(data []byte) bool { return true })
		body, ok, err := sp.continuationBody(orig, " a b", 3)
		if err == nil && ok && !json.Valid(body) {
			t.Fatalf("continuation body is not JSON: %q", body)
		}
	})
}
