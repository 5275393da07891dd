package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"testing"
	"time"
)

// TestServerTimingTPOTUsesUsageTokens: TPOT divides by the output tokens
// of the final usage when the stream reports one (docs/architecture.md, Definitions: output tokens),
// not by the token-bearing pieces the stream showed.
func TestServerTimingTPOTUsesUsageTokens(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		// Three text pieces of three tokens each: 3 counted, 9 reported.
		for i := 0; i < 3; i++ {
			_, _ = io.WriteString(w, `data: {"choices":[{"text":" a b c"}]}`+"\n\n")
			f.Flush()
			select {
			case <-time.After(5 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
		_, _ = io.WriteString(w, `data: {"choices":[{"text":"","finish_reason":"length"}],"usage":{"prompt_tokens":1,"completion_tokens":9,"total_tokens":10}}`+"\n\n")
		_, _ = io.WriteString(w, "data: [DONE]\n\n")
	}))
	defer up.Close()
	_, gw := startGateway(t, Config{Pools: []Pool{{Name: "p", Upstream: up.URL}}, ServerTiming: true})
	res := post(t, context.Background(), gw+"/v1/completions", `{"prompt":"x","stream":true}`)
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	if h := res.Header.Get("Server-Timing"); !regexp.MustCompile(`^queue;dur=\d+\.\d{3}$`).MatchString(h) {
		t.Errorf("Server-Timing header %q, want only the queue time", h)
	}
	st := res.Trailer.Get("Server-Timing")
	dur := func(name string) float64 {
		t.Helper()
		m := regexp.MustCompile(`(?:^|, )` + name + `;dur=([0-9.]+)`).FindStringSubmatch(st)
		if m == nil {
			t.Fatalf("Server-Timing trailer %q has no %s", st, name)
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		return v
	}
	ttft, tpot, e2e := dur("ttft"), dur("tpot"), dur("e2e")
	if want := (e2e - ttft) / 8; tpot < want-0.002 || tpot > want+0.002 {
		t.Errorf("tpot %.3f ms, want (e2e %.3f − ttft %.3f) / (9 − 1) = %.3f; trailer %q", tpot, e2e, ttft, want, st)
	}
	if !regexp.MustCompile(`tokens;desc="9"`).MatchString(st) {
		t.Errorf("trailer %q, want tokens;desc=\"9\" from the usage", st)
	}
}
