// Package stack starts a simulated engine and the embedded gateway in
// front of it, in this process on loopback, for one run of an A/B arm
// (`llmesh demo`, `llmesh bench ab --a embedded:FILE`).
//
// Start owns two goroutines, the engine's Serve and Config.Gateway (the
// gateway process, which the command hands in: cmd/llmesh runs
// cmd/llmesh/gatewayproc); both end when the context given to Start ends
// or Stop is called, and Stop waits for them.
package stack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"github.com/llmesh/llmesh/sim/server"
)

// Config says what to start.
type Config struct {
	// Sim configures the simulated engine.
	Sim server.Config
	// Mesh renders the gateway's mesh config once the engine listens, from
	// its HTTP and gRPC host:port.
	Mesh func(simHTTP, simGRPC string) ([]byte, error)
	// MeshPath is the file the rendered mesh is written to (the gateway
	// reads its config from a file).
	MeshPath string
	// Drain bounds the gateway's graceful shutdown (0: its default).
	Drain time.Duration
	// Logger receives the gateway's log and a failed engine's error (nil:
	// discarded).
	Logger *slog.Logger
	// Gateway runs the gateway in front of the engine; required.
	Gateway RunGateway
}

// RunGateway serves a gateway as gc says until ctx ends, and returns after
// its shutdown. It is the process wiring of `llmesh gateway`, which the
// command passes in, so that this package imports no command.
type RunGateway func(ctx context.Context, gc GatewayConfig) error

// GatewayConfig is the gateway a stack runs: the mesh file on loopback
// addresses the kernel picks.
type GatewayConfig struct {
	// ConfigPath is the mesh file Start wrote.
	ConfigPath string
	// Listen and Admin are the data and admin addresses to bind.
	Listen, Admin string
	// Drain bounds the graceful shutdown (0: the gateway's default).
	Drain time.Duration
	// Logger receives the gateway's log; never nil.
	Logger *slog.Logger
	// Ready must be called with the bound data address once the gateway
	// listens; Start waits for it.
	Ready func(data net.Addr)
}

// Stack is a running engine and gateway.
type Stack struct {
	// Addr is the gateway's host:port (the OpenAI and gRPC clients both
	// accept it).
	Addr string
	// Sim is the engine, e.g. for its Pace.
	Sim *server.Server

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Start brings up the engine, writes the mesh and starts the gateway; it
// returns once the gateway listens. On error nothing is left running.
func Start(ctx context.Context, cfg Config) (*Stack, error) {
	if cfg.Gateway == nil {
		return nil, errors.New("stack: no Gateway to run")
	}
	logger := cfg.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	sim, err := server.New(cfg.Sim)
	if err != nil {
		return nil, fmt.Errorf("simulated engine: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	s := &Stack{Sim: sim, cancel: cancel}
	fail := func(err error) (*Stack, error) {
		s.Stop()
		return nil, err
	}
	httpLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fail(fmt.Errorf("simulated engine listener: %w", err))
	}
	grpcLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		httpLn.Close()
		return fail(fmt.Errorf("simulated engine gRPC listener: %w", err))
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := sim.Serve(ctx, httpLn, grpcLn); err != nil {
			logger.Error("simulated engine stopped", "err", err)
		}
	}()
	mesh, err := cfg.Mesh(httpLn.Addr().String(), grpcLn.Addr().String())
	if err != nil {
		return fail(err)
	}
	if err := os.WriteFile(cfg.MeshPath, mesh, 0o644); err != nil {
		return fail(err)
	}
	ready := make(chan net.Addr, 1)
	errc := make(chan error, 1)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		errc <- cfg.Gateway(ctx, GatewayConfig{
			ConfigPath: cfg.MeshPath,
			Listen:     "127.0.0.1:0",
			Admin:      "127.0.0.1:0",
			Drain:      cfg.Drain,
			Logger:     logger,
			Ready:      func(data net.Addr) { ready <- data },
		})
	}()
	select {
	case addr := <-ready:
		s.Addr = addr.String()
		return s, nil
	case err := <-errc:
		return fail(fmt.Errorf("gateway: %w", err))
	case <-ctx.Done():
		return fail(ctx.Err())
	}
}

// Stop shuts the gateway and the engine down and waits for them.
func (s *Stack) Stop() {
	s.cancel()
	s.wg.Wait()
}
