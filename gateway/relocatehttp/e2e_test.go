package relocatehttp

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/api/vllmpb"
	"github.com/llmesh/llmesh/exchange/relocate"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// seen is what an upstream received for one request.
type seen struct {
	prompt     string
	headerSize int      // bytes of all metadata/header names and values
	keys       []string // metadata/header names
}

// engine is a real gRPC server implementing llm.v1.Generation and vLLM's
// engine API; it records what each call received.
type engine struct {
	llmv1.UnimplementedGenerationServer
	vllmpb.UnimplementedVllmEngineServer
	mu   sync.Mutex
	last seen
}

func (e *engine) record(ctx context.Context, prompt string) {
	md, _ := metadata.FromIncomingContext(ctx)
	s := seen{prompt: prompt}
	for k, vs := range md {
		s.keys = append(s.keys, k)
		for _, v := range vs {
			s.headerSize += len(k) + len(v)
		}
	}
	e.mu.Lock()
	e.last = s
	e.mu.Unlock()
}

func (e *engine) got() seen {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.last
}

func (e *engine) Generate(req *llmv1.GenerateRequest, st grpc.ServerStreamingServer[llmv1.GenerateResponse]) error {
	e.record(st.Context(), req.GetPrompt())
	if err := st.Send(&llmv1.GenerateResponse{TokenIds: []uint32{1}, Text: "ok"}); err != nil {
		return err
	}
	return st.Send(&llmv1.GenerateResponse{FinishReason: "stop", Usage: &llmv1.Usage{PromptTokens: uint32(len(req.GetPrompt()) / 4), CompletionTokens: 1}})
}

type vllmEngine struct{ *engine }

func (v vllmEngine) Generate(req *vllmpb.GenerateRequest, st grpc.ServerStreamingServer[vllmpb.GenerateResponse]) error {
	v.record(st.Context(), req.GetText())
	return st.Send(&vllmpb.GenerateResponse{Response: &vllmpb.GenerateResponse_Complete{Complete: &vllmpb.GenerateComplete{FinishReason: "stop"}}})
}

// mesh is a client-facing h2c server running the middleware in front of a
// reverse proxy to a gRPC engine and an HTTP engine.
type mesh struct {
	front    *httptest.Server
	grpcEng  *engine   // nil when the upstream is the sim
	httpSeen chan seen // nil when the upstream is the sim
	upstream *recorder // what left the proxy towards the engines
	refused  chan error
	moved    chan int
}

func h2cProtocols(http1 bool) *http.Protocols {
	p := new(http.Protocols)
	p.SetUnencryptedHTTP2(true)
	p.SetHTTP1(http1)
	return p
}

// recorder is the proxy's transport towards the engines; it remembers the
// headers of the last request it sent.
type recorder struct {
	rt   http.RoundTripper
	mu   sync.Mutex
	last seen
}

func (r *recorder) RoundTrip(req *http.Request) (*http.Response, error) {
	var s seen
	for k, vs := range req.Header {
		s.keys = append(s.keys, strings.ToLower(k))
		for _, v := range vs {
			s.headerSize += len(k) + len(v)
		}
	}
	r.mu.Lock()
	r.last = s
	r.mu.Unlock()
	return r.rt.RoundTrip(req)
}

func (r *recorder) got() seen {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.last
}

// startEngines starts a real gRPC server (llm.v1 and vLLM) and an
// OpenAI-style HTTP server that record what they receive, and the mesh in
// front of them.
func startMesh(t *testing.T, cfg relocate.Config) *mesh {
	t.Helper()
	eng := &engine{}
	httpSeen := make(chan seen, 4)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(64 << 20))
	llmv1.RegisterGenerationServer(gs, eng)
	vllmpb.RegisterVllmEngineServer(gs, vllmEngine{eng})
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)

	httpEng := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil || int64(len(body)) != r.ContentLength {
			http.Error(w, fmt.Sprintf("body %d bytes, content-length %d, err %v", len(body), r.ContentLength, err), 400)
			return
		}
		var req struct {
			Prompt   string `json:"prompt"`
			Messages []struct {
				Role, Content string
			} `json:"messages"`
		}
		if err := json.Unmarshal(body, &req); err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		s := seen{prompt: req.Prompt}
		if n := len(req.Messages); n > 0 && req.Messages[n-1].Role == "user" {
			s.prompt = req.Messages[n-1].Content
		}
		for k, vs := range r.Header {
			s.keys = append(s.keys, strings.ToLower(k))
			for _, v := range vs {
				s.headerSize += len(k) + len(v)
			}
		}
		httpSeen <- s
		_, _ = io.WriteString(w, `{"choices":[{"text":"ok"}]}`)
	}))
	t.Cleanup(httpEng.Close)

	m := startFront(t, cfg, lis.Addr().String(), httpEng.URL)
	m.grpcEng, m.httpSeen = eng, httpSeen
	return m
}

// startFront starts the client-facing server: the middleware in front of a
// reverse proxy sending gRPC to grpcAddr (h2c) and everything else to
// httpURL.
func startFront(t *testing.T, cfg relocate.Config, grpcAddr, httpURL string) *mesh {
	t.Helper()
	rel, err := relocate.Compile(cfg)
	if err != nil {
		t.Fatal(err)
	}
	m := &mesh{refused: make(chan error, 4), moved: make(chan int, 4)}
	grpcURL := &url.URL{Scheme: "http", Host: grpcAddr}
	hURL, err := url.Parse(httpURL)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{Protocols: h2cProtocols(false)}
	t.Cleanup(tr.CloseIdleConnections)
	httpTr := &http.Transport{}
	t.Cleanup(httpTr.CloseIdleConnections)
	m.upstream = &recorder{rt: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		if IsGRPC(r) {
			return tr.RoundTrip(r)
		}
		return httpTr.RoundTrip(r)
	})}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			if IsGRPC(pr.In) {
				pr.SetURL(grpcURL)
			} else {
				pr.SetURL(hURL)
			}
		},
		Transport:     m.upstream,
		FlushInterval: -1,
	}
	mw := New(proxy, rel, Options{
		OnRelocated: func(kind string, n int) { m.moved <- n },
		OnRefused:   func(_ *http.Request, err error) { m.refused <- err },
	})
	m.front = httptest.NewUnstartedServer(mw)
	m.front.Config.Protocols = h2cProtocols(true)
	// The client-facing side must accept the oversized header in the first
	// place: net/http advertises MaxHeaderBytes as HTTP/2's
	// SETTINGS_MAX_HEADER_LIST_SIZE, and grpc-go checks it before sending.
	m.front.Config.MaxHeaderBytes = 64 << 20
	m.front.Start()
	t.Cleanup(m.front.Close)
	return m
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func (m *mesh) dial(t *testing.T) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(m.front.Listener.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithMaxHeaderListSize(64<<20))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// bigPrompt is n bytes of printable ASCII (gRPC text metadata allows
// nothing else), varied so that no compression hides a bug.
func bigPrompt(n int) string {
	var b strings.Builder
	b.Grow(n)
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "token%d ", i*7919%100003)
	}
	return b.String()[:n]
}

func ctxTimeout(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func assertClean(t *testing.T, s seen, key, want string) {
	t.Helper()
	if s.prompt != want {
		t.Fatalf("engine got a prompt of %d bytes, want %d bytes", len(s.prompt), len(want))
	}
	for _, k := range s.keys {
		if strings.EqualFold(k, key) {
			t.Fatalf("engine still received header %q", key)
		}
	}
	if s.headerSize > 4096 {
		t.Fatalf("engine received %d bytes of headers; the prompt was not moved out", s.headerSize)
	}
}

var grpcRules = relocate.Config{GRPC: []relocate.GRPCRule{
	{Method: "/llm.v1.Generation/Generate", Key: "x-prompt-raw", Field: 2, Max: 8 << 20},
	{Method: "/vllm.grpc.engine.VllmEngine/Generate", Key: "x-prompt-bin", Field: 3, Max: 8 << 20},
}, HTTP: []relocate.HTTPRule{{Header: "x-prompt", Max: 8 << 20}}}

// TestGRPCLargePrompt sends a 1 MiB prompt in gRPC metadata through
// the middleware; the engine receives it in GenerateRequest.prompt (field 2)
// and no oversized header.
func TestGRPCLargePrompt(t *testing.T) {
	m := startMesh(t, grpcRules)
	cc := m.dial(t)
	prompt := bigPrompt(1 << 20)
	ctx := metadata.AppendToOutgoingContext(ctxTimeout(t), "x-prompt-raw", prompt)
	st, err := llmv1.NewGenerationClient(cc).Generate(ctx, &llmv1.GenerateRequest{Model: "m", MaxTokens: 1})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	for {
		_, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		n++
	}
	if n != 2 {
		t.Fatalf("got %d responses, want 2", n)
	}
	assertClean(t, m.grpcEng.got(), "x-prompt-raw", prompt)
	if got := <-m.moved; got != len(prompt) {
		t.Fatalf("OnRelocated reported %d bytes, want %d", got, len(prompt))
	}
}

// TestGRPCBinaryMetadataVLLM relocates base64 "-bin" metadata into vLLM's
// GenerateRequest.text (field 3), replacing the tokenized input of the oneof.
func TestGRPCBinaryMetadataVLLM(t *testing.T) {
	m := startMesh(t, grpcRules)
	cc := m.dial(t)
	prompt := "Grüße, 世界! " + bigPrompt(256<<10)
	// grpc-go base64-encodes -bin values itself.
	ctx := metadata.AppendToOutgoingContext(ctxTimeout(t), "x-prompt-bin", prompt)
	st, err := vllmpb.NewVllmEngineClient(cc).Generate(ctx, &vllmpb.GenerateRequest{RequestId: "r1",
		Input: &vllmpb.GenerateRequest_Tokenized{Tokenized: &vllmpb.TokenizedInput{InputIds: []uint32{1, 2}}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatalf("Recv: %v", err)
	}
	assertClean(t, m.grpcEng.got(), "x-prompt-bin", prompt)
}

// TestGRPCOverLimit: a prompt over the rule's max is answered by the
// middleware with RESOURCE_EXHAUSTED naming the limit.
func TestGRPCOverLimit(t *testing.T) {
	cfg := relocate.Config{GRPC: []relocate.GRPCRule{{Key: "x-prompt-raw", Field: 2, Max: 64 << 10}}}
	m := startMesh(t, cfg)
	cc := m.dial(t)
	ctx := metadata.AppendToOutgoingContext(ctxTimeout(t), "x-prompt-raw", bigPrompt(100<<10))
	st, err := llmv1.NewGenerationClient(cc).Generate(ctx, &llmv1.GenerateRequest{Model: "m"})
	if err == nil {
		_, err = st.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "relocation.grpc[0].max") {
		t.Fatalf("got %v, want RESOURCE_EXHAUSTED naming relocation.grpc[0].max", err)
	}
	if got := <-m.refused; !strings.Contains(got.Error(), "102400 bytes") {
		t.Fatalf("OnRefused got %v", got)
	}
}

// TestGRPCSmallPromptStays: under the threshold nothing changes.
func TestGRPCSmallPromptStays(t *testing.T) {
	m := startMesh(t, grpcRules)
	cc := m.dial(t)
	ctx := metadata.AppendToOutgoingContext(ctxTimeout(t), "x-prompt-raw", "short")
	st, err := llmv1.NewGenerationClient(cc).Generate(ctx, &llmv1.GenerateRequest{Prompt: "body"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); err != nil {
		t.Fatal(err)
	}
	s := m.grpcEng.got()
	if s.prompt != "body" || !strings.Contains(strings.Join(s.keys, ","), "x-prompt-raw") {
		t.Fatalf("engine saw prompt %q, keys %v; want the request untouched", s.prompt, s.keys)
	}
}

func postJSON(t *testing.T, m *mesh, path, header, body string) (status int, respBody []byte) {
	t.Helper()
	req, err := http.NewRequestWithContext(ctxTimeout(t), http.MethodPost, m.front.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Prompt", header)
	c := &http.Client{Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// TestHTTPLargePrompt moves a 1 MiB header into "prompt" of a
// completion and into a user message of a chat completion.
func TestHTTPLargePrompt(t *testing.T) {
	m := startMesh(t, grpcRules)
	prompt := bigPrompt(1<<20) + ` "quoted" \ back`
	for _, tc := range []struct{ path, body string }{
		{"/v1/completions", `{"model":"m","prompt":"old","max_tokens":4}`},
		{"/v1/chat/completions", `{"model":"m","messages":[{"role":"system","content":"be brief"}],"stream":false}`},
		{"/v1/chat/completions", `{"model":"m"}`},
	} {
		status, b := postJSON(t, m, tc.path, prompt, tc.body)
		if status != 200 {
			t.Fatalf("%s: status %d: %s", tc.path, status, b)
		}
		assertClean(t, <-m.httpSeen, "x-prompt", prompt)
	}
}

// TestHTTPErrors: limits answer 413 naming the limit; a body that is not
// JSON answers 400.
func TestHTTPErrors(t *testing.T) {
	cfg := relocate.Config{HTTP: []relocate.HTTPRule{{Header: "x-prompt", Max: 64 << 10, MaxBody: 128 << 10}}}
	m := startMesh(t, cfg)
	for _, tc := range []struct {
		name, prompt, body string
		status             int
		msg                string
	}{
		{"value over max", bigPrompt(100 << 10), `{}`, 413, "relocation.http[0].max "},
		{"body over max_body", bigPrompt(8 << 10), `{"pad":"` + strings.Repeat("x", 130<<10) + `"}`, 413, "relocation.http[0].max_body"},
		{"not json", bigPrompt(8 << 10), `not json`, 400, "not valid JSON"},
		{"not an object", bigPrompt(8 << 10), `[1,2]`, 400, "not a JSON object"},
	} {
		status, b := postJSON(t, m, "/v1/completions", tc.prompt, tc.body)
		if status != tc.status || !bytes.Contains(b, []byte(tc.msg)) {
			t.Errorf("%s: got %d %s, want %d containing %q", tc.name, status, b, tc.status, tc.msg)
		}
		if err := <-m.refused; err == nil {
			t.Errorf("%s: refusal reported without a cause", tc.name)
		}
	}
}

// TestGRPCGzipClient: a grpc-go client compressing its messages with gzip
// gets its prompt recompressed into the message, or refused with
// UNIMPLEMENTED where the rule says so.
func TestGRPCGzipClient(t *testing.T) {
	refuse := relocate.Config{GRPC: []relocate.GRPCRule{{Key: "x-prompt-raw", Field: 2, Compressed: relocate.Refuse}}}
	for _, tc := range []struct {
		name string
		cfg  relocate.Config
		want codes.Code
	}{
		{"recompress", grpcRules, codes.OK},
		{"refuse", refuse, codes.Unimplemented},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := startMesh(t, tc.cfg)
			cc := m.dial(t)
			prompt := bigPrompt(64 << 10)
			ctx := metadata.AppendToOutgoingContext(ctxTimeout(t), "x-prompt-raw", prompt)
			st, err := llmv1.NewGenerationClient(cc).Generate(ctx, &llmv1.GenerateRequest{Model: strings.Repeat("m", 300)}, grpc.UseCompressor(gzip.Name))
			if err == nil {
				_, err = st.Recv()
			}
			if status.Code(err) != tc.want {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if tc.want == codes.OK {
				assertClean(t, m.grpcEng.got(), "x-prompt-raw", prompt)
			} else if !strings.Contains(err.Error(), "uncompressed") {
				t.Fatalf("refusal %q does not tell the client what to do", err)
			}
		})
	}
}
