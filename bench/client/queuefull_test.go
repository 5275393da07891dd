package client

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/sim/simtest"
)

// TestQueueFullApartFromEngine429: an engine's 429 (the sim's fault) is
// "rejected"; llmesh's own queue-full replies (the gateway's OpenAI error
// body, the Envoy filter's local reply) are "queue_full".
func TestQueueFullApartFromEngine429(t *testing.T) {
	s := simtest.Start(t)
	c, err := New(workload.ProtocolCompletions, s.HTTPURL, 0)
	if err != nil {
		t.Fatal(err)
	}
	rec := do(t, c, Request{ID: "1", Model: s.Model, PromptTokens: 3, MaxTokens: 2, Stream: true, Headers: map[string]string{"x-llmesh-sim-fault": "429"}})
	c.Close()
	if rec.Status != result.StatusRejected || rec.Code != 429 {
		t.Errorf("engine 429: %s %d %q", rec.Status, rec.Code, rec.Error)
	}
	for name, h := range map[string]http.HandlerFunc{
		// The gateway's writeHTTPError for scheduler.ErrQueueFull.
		"gateway": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(429)
			_, _ = w.Write([]byte(`{"error":{"message":"scheduler: queue full: batch at 2","type":"queue_full","code":429}}`))
		},
		// The Envoy filter's local reply.
		"envoy": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("X-Llmesh-Reply", "llmesh_queue_full")
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(429)
			_, _ = w.Write([]byte("queue full; retry later\n"))
		},
	} {
		srv := httptest.NewServer(h)
		c, err := New(workload.ProtocolCompletions, srv.URL, 0)
		if err != nil {
			t.Fatal(err)
		}
		rec := do(t, c, Request{ID: "1", Model: "m", PromptTokens: 3, MaxTokens: 2, Stream: true})
		c.Close()
		srv.Close()
		if rec.Status != result.StatusQueueFull {
			t.Errorf("%s queue full: %s %q", name, rec.Status, rec.Error)
		}
	}
}
