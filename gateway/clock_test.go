package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/exchange"
)

// TestStallOnInjectedClock: the stream idle timeout runs on the gateway's
// clock (WithClock), so a stalled upstream is ended by advancing a fake
// clock past the timeout, without a wall-clock wait, and the Record's
// times are the fake clock's.
func TestStallOnInjectedClock(t *testing.T) {
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
	fake := clock.NewFake(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	rec := newRecorder()
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "p", Upstream: up.URL}}, StreamIdleTimeout: time.Hour},
		WithRecorder(rec), WithClock(fake))
	res := post(t, context.Background(), gw+"/v1/completions", `{"prompt":"x","stream":true}`)
	defer res.Body.Close()
	// The first event is through: the upstream is silent from now on.
	buf := make([]byte, 256)
	n, err := res.Body.Read(buf)
	if err != nil || !strings.Contains(string(buf[:n]), `"text":"a"`) {
		t.Fatalf("first read %q, %v", buf[:n], err)
	}
	if fake.Timers() == 0 {
		t.Fatal("no idle timer on the injected clock")
	}
	fake.Advance(59 * time.Minute)
	fake.Advance(time.Minute)
	rest, _ := io.ReadAll(res.Body)
	if !strings.Contains(string(rest), "upstream_timeout") {
		t.Fatalf("after the fake hour: %q, want an upstream_timeout error event", rest)
	}
	r := rec.next(t)
	if r.ErrorKind != exchange.ErrorTimeout {
		t.Errorf("recorded %q (%q), want upstream_timeout", r.ErrorKind, r.Error)
	}
	if r.E2E != time.Hour {
		t.Errorf("e2e %v on the fake clock, want 1h", r.E2E)
	}
}
