package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/exchange"
)

func TestSSEStreamPassesAndIsObserved(t *testing.T) {
	up := httptest.NewServer(sseUpstream(5, time.Millisecond))
	defer up.Close()
	rec := newRecorder()
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "p", Upstream: up.URL}}, ServerTiming: true}, WithRecorder(rec))

	res := post(t, context.Background(), gw+"/v1/completions", `{"model":"m","prompt":"hi","stream":true,"max_tokens":5}`)
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("status %d", res.StatusCode)
	}
	if !strings.HasPrefix(res.Header.Get("Server-Timing"), "queue;dur=") {
		t.Errorf("Server-Timing header = %q, want queue;dur=…", res.Header.Get("Server-Timing"))
	}
	datas, _ := readSSE(t, res)
	if len(datas) != 7 || datas[6] != "[DONE]" {
		t.Fatalf("got %d events (%q), want 5 tokens + usage + [DONE]", len(datas), datas)
	}
	if st := res.Trailer.Get("Server-Timing"); !strings.Contains(st, "ttft;dur=") {
		t.Errorf("Server-Timing trailer = %q, want ttft", st)
	}
	r := rec.next(t)
	if !r.OK() || r.OutputTokens != 5 || r.TokenChunks != 5 || !r.HasTTFT || !r.Complete {
		t.Errorf("observation: ok=%v err=%q tokens=%d chunks=%d ttft=%v complete=%v",
			r.OK(), r.Error, r.OutputTokens, r.TokenChunks, r.HasTTFT, r.Complete)
	}
	if r.Protocol != exchange.ProtocolSSE {
		t.Errorf("protocol %v, want sse", r.Protocol)
	}
}

func TestNonStreamingJSON(t *testing.T) {
	body := `{"id":"c","object":"text_completion","choices":[{"index":0,"text":"hello world","finish_reason":"stop"}],"usage":{"prompt_tokens":2,"completion_tokens":2,"total_tokens":4}}`
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, body)
	}))
	defer up.Close()
	rec := newRecorder()
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "p", Upstream: up.URL}}}, WithRecorder(rec))
	res := post(t, context.Background(), gw+"/v1/completions", `{"model":"m","prompt":"hi"}`)
	got, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(got) != body {
		t.Fatalf("body %q, want %q", got, body)
	}
	r := rec.next(t)
	if !r.OK() || r.OutputTokens != 2 || r.Protocol != exchange.ProtocolJSON {
		t.Errorf("observation: ok=%v err=%q tokens=%d proto=%v", r.OK(), r.Error, r.OutputTokens, r.Protocol)
	}
}

func TestOversizedBodyIs413(t *testing.T) {
	hit := make(chan struct{}, 1)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hit <- struct{}{} }))
	defer up.Close()
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "p", Upstream: up.URL}}, MaxRequestBytes: 1024})
	res := post(t, context.Background(), gw+"/v1/completions", `{"prompt":"`+strings.Repeat("x", 2000)+`"}`)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(b), "max_request_bytes (1024 bytes)") {
		t.Fatalf("status %d body %s, want 413 naming the limit", res.StatusCode, b)
	}
	select {
	case <-hit:
		t.Fatal("oversized request reached the upstream")
	default:
	}
}

func TestClientCancelCancelsUpstream(t *testing.T) {
	upCancelled := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "data: {\"choices\":[{\"text\":\"a\"}]}\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
		close(upCancelled)
	}))
	defer up.Close()
	rec := newRecorder()
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "p", Upstream: up.URL}}}, WithRecorder(rec))
	ctx, cancel := context.WithCancel(context.Background())
	res := post(t, ctx, gw+"/v1/completions", `{"prompt":"x","stream":true}`)
	buf := make([]byte, 64)
	if _, err := res.Body.Read(buf); err != nil {
		t.Fatalf("first chunk: %v", err)
	}
	cancel()
	res.Body.Close()
	select {
	case <-upCancelled:
	case <-time.After(20 * time.Second):
		t.Fatal("upstream did not see the client's cancel")
	}
	r := rec.next(t)
	if r.ErrorKind != exchange.ErrorCancelled {
		t.Errorf("error kind %v (%q), want cancelled", r.ErrorKind, r.Error)
	}
}

// dyingSSEUpstream sends two events and then drops the connection.
func dyingSSEUpstream(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/event-stream")
	for i := 0; i < 2; i++ {
		_, _ = io.WriteString(w, `data: {"id":"x","choices":[{"index":0,"text":"a"}]}`+"\n\n")
	}
	w.(http.Flusher).Flush()
	panic(http.ErrAbortHandler)
}

func TestUpstreamDiesMidStreamSSE(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(dyingSSEUpstream))
	defer up.Close()
	rec := newRecorder()
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "p", Upstream: up.URL}}}, WithRecorder(rec))
	res := post(t, context.Background(), gw+"/v1/completions", `{"prompt":"x","stream":true}`)
	defer res.Body.Close()
	datas, events := readSSE(t, res)
	if len(datas) != 3 {
		t.Fatalf("got %d events %q, want 2 tokens + 1 error", len(datas), datas)
	}
	if events[2] != "error" || !strings.Contains(datas[2], `"error":{"message":"gateway: upstream reset mid-stream`) {
		t.Errorf("last event %q/%q, want an OpenAI error event", events[2], datas[2])
	}
	r := rec.next(t)
	if r.ErrorKind != exchange.ErrorUpstreamReset || r.TokenChunks != 2 {
		t.Errorf("observation kind %v (%q) chunks %d, want upstream_reset after 2", r.ErrorKind, r.Error, r.TokenChunks)
	}
}

func TestUpstreamStallEndsStream(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, `data: {"choices":[{"index":0,"text":"a"}]}`+"\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer up.Close()
	defer close(release)
	rec := newRecorder()
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "p", Upstream: up.URL}}, StreamIdleTimeout: 200 * time.Millisecond}, WithRecorder(rec))
	res := post(t, context.Background(), gw+"/v1/completions", `{"prompt":"x","stream":true}`)
	defer res.Body.Close()
	datas, events := readSSE(t, res)
	if len(datas) != 2 || events[1] != "error" || !strings.Contains(datas[1], "upstream_timeout") {
		t.Fatalf("events %q %q, want token + upstream_timeout error", events, datas)
	}
	// The client is told it timed out; the metrics say the same.
	if r := rec.next(t); r.OK() || r.ErrorKind != exchange.ErrorTimeout {
		t.Errorf("stalled request recorded as %q (%q), want upstream_timeout", r.ErrorKind, r.Error)
	}
}

func TestMalformedSSEPassesThrough(t *testing.T) {
	raw := "data: {not json\n\ndata: {\"choices\":[{\"index\":0,\"text\":\"ok\"}]}\n\n: comment\n\ndata: [DONE]\n\n"
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		// Split mid-event to exercise the held-back partial event.
		_, _ = io.WriteString(w, raw[:7])
		w.(http.Flusher).Flush()
		_, _ = io.WriteString(w, raw[7:])
	}))
	defer up.Close()
	rec := newRecorder()
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "p", Upstream: up.URL}}}, WithRecorder(rec))
	res := post(t, context.Background(), gw+"/v1/completions", `{"prompt":"x","stream":true}`)
	got, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if string(got) != raw {
		t.Fatalf("body %q, want the upstream's bytes %q", got, raw)
	}
	r := rec.next(t)
	if r.ErrorKind != exchange.ErrorMalformed || r.TokenChunks != 1 {
		t.Errorf("observation kind %v chunks %d, want malformed with 1 token chunk", r.ErrorKind, r.TokenChunks)
	}
}

func TestNoRouteAndBadUpstream(t *testing.T) {
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "p", Upstream: "127.0.0.1:1"}}})
	res := post(t, context.Background(), gw+"/v1/completions", `{"prompt":"x"}`)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusBadGateway || !strings.Contains(string(b), "upstream_unavailable") {
		t.Fatalf("status %d body %s, want 502 upstream_unavailable", res.StatusCode, b)
	}
}

func TestConfigErrorsNameFields(t *testing.T) {
	_, err := New(Config{Pools: []Pool{{Name: "", Upstream: "ftp://x"}, {Name: "b", Protocol: "udp", Upstream: "h:1"}},
		Routes: []Route{{Pool: "nope", PathPrefix: "v1"}}, MaxRequestBytes: -1})
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"pools[0].name", "pools[0].upstream", "pools[1].protocol", "routes[0].pool", "routes[0].path_prefix", "max_request_bytes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

func TestHugeSingleEventPassesIntact(t *testing.T) {
	huge := "data: {\"choices\":[{\"index\":0,\"text\":\"" + strings.Repeat("x", 10<<20) + "\"}]}\n\ndata: [DONE]\n\n"
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, huge)
	}))
	defer up.Close()
	rec := newRecorder()
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "p", Upstream: up.URL}}}, WithRecorder(rec))
	res := post(t, context.Background(), gw+"/v1/completions", `{"prompt":"x","stream":true}`)
	got, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil || len(got) != len(huge) || string(got) != huge {
		t.Fatalf("got %d bytes (%v), want the %d-byte stream intact", len(got), err, len(huge))
	}
	if r := rec.next(t); r.ErrorKind != exchange.ErrorEventTooLarge {
		t.Errorf("error kind %v (%q), want event_too_large", r.ErrorKind, r.Error)
	}
}

func TestUpstreamSilentBeforeHeadersIs504(t *testing.T) {
	release := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer up.Close()
	defer close(release)
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "p", Upstream: up.URL}}, StreamIdleTimeout: 100 * time.Millisecond})
	res := post(t, context.Background(), gw+"/v1/completions", `{"prompt":"x"}`)
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusGatewayTimeout || !strings.Contains(string(b), "upstream_timeout") {
		t.Fatalf("status %d body %s, want 504 upstream_timeout", res.StatusCode, b)
	}
}
