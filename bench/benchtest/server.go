// Package benchtest is a minimal, fast streaming target for testing and
// measuring the harness itself: an OpenAI-compatible SSE endpoint and an
// llm.v1 gRPC service that emit one token per chunk with configurable
// delays and faults, doing as little work as possible so that what is
// measured is the harness, not the server.
package benchtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/llmesh/llmesh/api/llmv1"
)

// FaultHeader selects a fault per request: "429", "503" (with Retry-After),
// "500", "error-event" (an SSE error event after the first token),
// "drop-after=N" (end the stream after N tokens without [DONE]),
// "invalid" (a malformed SSE event). gRPC reads it from metadata: "429"
// maps to RESOURCE_EXHAUSTED, "503" to UNAVAILABLE with
// grpc-retry-pushback-ms, "drop-after=N" to an INTERNAL error after N.
const FaultHeader = "x-benchtest-fault"

// Config shapes the responses.
type Config struct {
	// TTFT is the delay before the first token; ITL the delay between
	// tokens. Zero sends as fast as possible.
	TTFT, ITL time.Duration
	// EngineTimes adds llmesh_engine ground truth (arrival and first-token
	// times on the server's clock) to the last event / trailers.
	EngineTimes bool
}

// Handler serves /v1/completions and /v1/chat/completions.
func Handler(cfg Config) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		arrival := time.Now()
		var req struct {
			MaxTokens int  `json:"max_tokens"`
			Stream    bool `json:"stream"`
		}
		if err := json.NewDecoder(io.LimitReader(r.Body, 64<<20)).Decode(&req); err != nil {
			http.Error(w, `{"error":{"message":"bad json"}}`, http.StatusBadRequest)
			return
		}
		chat := strings.HasSuffix(r.URL.Path, "/chat/completions")
		fault := r.Header.Get(FaultHeader)
		switch fault {
		case "429":
			http.Error(w, `{"error":{"message":"queue full"}}`, http.StatusTooManyRequests)
			return
		case "503":
			w.Header().Set("Retry-After", "1")
			http.Error(w, `{"error":{"message":"preempted"}}`, http.StatusServiceUnavailable)
			return
		case "500":
			http.Error(w, `{"error":{"message":"boom"}}`, http.StatusInternalServerError)
			return
		}
		dropAfter := -1
		if n, ok := strings.CutPrefix(fault, "drop-after="); ok {
			dropAfter, _ = strconv.Atoi(n)
		}
		n := max(1, req.MaxTokens)
		if !sleep(r.Context(), cfg.TTFT) {
			return
		}
		var first time.Time
		if !req.Stream {
			first = time.Now()
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"choices":[{"text":"%s","message":{"content":"x"}}],"usage":{"completion_tokens":%d}%s}`,
				strings.Repeat(" t", n), n, engine(cfg, arrival, first))
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(http.StatusOK)
		f, _ := w.(http.Flusher)
		ev := []byte(`data: {"choices":[{"index":0,"text":" t"}]}` + "\n\n")
		if chat {
			ev = []byte(`data: {"choices":[{"index":0,"delta":{"content":" t"}}]}` + "\n\n")
			w.Write([]byte(`data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}` + "\n\n"))
		}
		for i := 0; i < n; i++ {
			if i == dropAfter {
				return
			}
			if i > 0 && !sleep(r.Context(), cfg.ITL) {
				return
			}
			if i == 0 {
				first = time.Now()
			}
			w.Write(ev)
			if fault == "error-event" {
				w.Write([]byte(`data: {"error":{"message":"upstream failed","type":"server_error"}}` + "\n\n"))
				return
			}
			if fault == "invalid" {
				w.Write([]byte("data: {not json\n\n"))
				return
			}
			if f != nil {
				f.Flush()
			}
		}
		fmt.Fprintf(w, `data: {"choices":[],"usage":{"completion_tokens":%d}%s}`+"\n\ndata: [DONE]\n\n", n, engine(cfg, arrival, first))
	})
}

// sleep waits d unless ctx ends first; false means it ended.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func engine(cfg Config, arrival, first time.Time) string {
	if !cfg.EngineTimes {
		return ""
	}
	return fmt.Sprintf(`,"llmesh_engine":{"arrival_ns":%d,"first_scheduled_ns":%d,"first_token_ns":%d,"finish_ns":%d,"preemptions":0}`,
		arrival.UnixNano(), arrival.UnixNano(), first.UnixNano(), time.Now().UnixNano())
}

// GRPC is an llm.v1 Generation service.
type GRPC struct {
	llmv1.UnimplementedGenerationServer
	Config Config
}

// Generate streams MaxTokens one-token responses.
func (g *GRPC) Generate(req *llmv1.GenerateRequest, s llmv1.Generation_GenerateServer) error {
	arrival := time.Now()
	md, _ := metadata.FromIncomingContext(s.Context())
	fault := ""
	if v := md.Get(FaultHeader); len(v) > 0 {
		fault = v[0]
	}
	switch fault {
	case "429":
		return status.Error(codes.ResourceExhausted, "queue full")
	case "503":
		s.SetTrailer(metadata.Pairs("grpc-retry-pushback-ms", "1000"))
		return status.Error(codes.Unavailable, "preempted")
	}
	dropAfter := -1
	if n, ok := strings.CutPrefix(fault, "drop-after="); ok {
		dropAfter, _ = strconv.Atoi(n)
	}
	n := max(1, int(req.MaxTokens))
	if !sleep(s.Context(), g.Config.TTFT) {
		return s.Context().Err()
	}
	var first time.Time
	msg := &llmv1.GenerateResponse{TokenIds: []uint32{7}, Text: " t"}
	for i := 0; i < n; i++ {
		if i == dropAfter {
			return status.Error(codes.Internal, "stream dropped")
		}
		if i > 0 && !sleep(s.Context(), g.Config.ITL) {
			return s.Context().Err()
		}
		if i == 0 {
			first = time.Now()
		}
		if i == n-1 {
			msg = &llmv1.GenerateResponse{TokenIds: []uint32{7}, Text: " t", FinishReason: "length",
				Usage: &llmv1.Usage{CompletionTokens: uint32(n)}}
		}
		if err := s.Send(msg); err != nil {
			return err
		}
	}
	if g.Config.EngineTimes {
		s.SetTrailer(metadata.Pairs(
			"llmesh-engine-arrival-ns", strconv.FormatInt(arrival.UnixNano(), 10),
			"llmesh-engine-first-token-ns", strconv.FormatInt(first.UnixNano(), 10),
			"llmesh-engine-finish-ns", strconv.FormatInt(time.Now().UnixNano(), 10),
			"llmesh-engine-preemptions", "0"))
	}
	return nil
}

// Servers are a running HTTP and gRPC target on loopback.
type Servers struct {
	// HTTPURL is the base URL (http://127.0.0.1:port).
	HTTPURL string
	// GRPCAddr is host:port of the gRPC server.
	GRPCAddr string
}

// Start runs both servers on 127.0.0.1:0 until the test ends.
func Start(t testing.TB, cfg Config) *Servers {
	t.Helper()
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: Handler(cfg), ReadHeaderTimeout: 10 * time.Second}
	gs := grpc.NewServer()
	llmv1.RegisterGenerationServer(gs, &GRPC{Config: cfg})
	hdone, gdone := make(chan struct{}), make(chan struct{})
	go func() { defer close(hdone); _ = hs.Serve(hl) }()
	go func() { defer close(gdone); _ = gs.Serve(gl) }()
	t.Cleanup(func() {
		_ = hs.Close()
		gs.Stop()
		<-hdone
		<-gdone
	})
	return &Servers{HTTPURL: "http://" + hl.Addr().String(), GRPCAddr: gl.Addr().String()}
}
