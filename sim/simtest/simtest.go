// Package simtest starts a real simulated engine on loopback for other
// packages' tests:
//
//	s := simtest.Start(t, simtest.WithTimeScale(50))
//	resp, err := http.Post(s.HTTPURL+"/v1/completions", ...)
//	conn, err := grpc.NewClient(s.GRPCAddr, ...)
//
// Both listeners take random 127.0.0.1 ports. Start returns once /health
// answers; the server stops, and its goroutines end, in t.Cleanup.
// StartRecorder puts a proxy in front that keeps every request body the
// engine receives.
package simtest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/sim"
	"github.com/llmesh/llmesh/sim/server"
)

// DefaultTimeScale is how much faster than real time a test sim runs unless
// WithTimeScale says otherwise: engine steps of 7-60 ms take 0.7-6 ms.
const DefaultTimeScale = 10

// Sim is a running simulated engine.
type Sim struct {
	// HTTPURL is the OpenAI-compatible base URL, e.g. http://127.0.0.1:41234
	// (append /v1/completions, /v1/chat/completions, /metrics, ...).
	HTTPURL string
	// GRPCAddr is host:port of the gRPC listener serving llm.v1.Generation
	// and vllm.grpc.engine.VllmEngine.
	GRPCAddr string
	// Model is the served model name.
	Model string
	// Server is the server itself (for its Config).
	Server *server.Server
	// Clock is the engine clock: ground-truth timestamps are on it.
	Clock clock.Clock
}

type options struct {
	scale float64
	cfg   server.Config
}

// Option adjusts a test sim.
type Option func(*options)

// WithTimeScale runs the engine clock x times faster than real time (1:
// real time). Higher values make tests faster but coarser: real scheduling
// and network delays count x times in engine time.
func WithTimeScale(x float64) Option { return func(o *options) { o.scale = x } }

// WithProfile selects a built-in profile.
func WithProfile(name string) Option { return func(o *options) { o.cfg.Profile = name } }

// WithEngine sizes the engine (max seqs, batched tokens, KV cache, policy).
func WithEngine(c sim.Config) Option { return func(o *options) { o.cfg.Engine = c } }

// WithSeed seeds synthetic tokens and fault draws.
func WithSeed(seed uint64) Option { return func(o *options) { o.cfg.Seed = seed } }

// WithFaults injects random faults at rate, drawn from kinds (see
// server.ParseFaults).
func WithFaults(rate float64, kinds ...string) Option {
	return func(o *options) { o.cfg.FaultRate, o.cfg.FaultKinds = rate, kinds }
}

// WithConfig edits the whole server configuration last; its Clock is
// replaced by the scaled clock unless set.
func WithConfig(f func(*server.Config)) Option { return func(o *options) { f(&o.cfg) } }

// Start starts a simulated engine on loopback and stops it when the test
// ends. It fails the test if the sim does not come up.
func Start(t testing.TB, opts ...Option) *Sim {
	t.Helper()
	o := options{scale: DefaultTimeScale}
	for _, f := range opts {
		f(&o)
	}
	if o.cfg.Clock == nil {
		o.cfg.Clock = clock.NewScaled(o.scale)
	}
	srv, err := server.New(o.cfg)
	if err != nil {
		t.Fatalf("simtest: %v", err)
	}
	hl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("simtest: %v", err)
	}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		hl.Close()
		t.Fatalf("simtest: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, hl, gl) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("simtest: serve: %v", err)
		}
	})
	s := &Sim{HTTPURL: "http://" + hl.Addr().String(), GRPCAddr: gl.Addr().String(), Model: srv.Config().ServedModelName, Server: srv, Clock: o.cfg.Clock}
	if err := waitHealthy(s.HTTPURL, 30*time.Second); err != nil {
		t.Fatalf("simtest: %v", err)
	}
	return s
}

func waitHealthy(base string, limit time.Duration) error {
	c := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(limit)
	for {
		resp, err := c.Get(base + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("sim at %s not healthy after %v: %v", base, limit, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
