package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/llmesh/llmesh/bench/ab"
	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/gateway"
	"github.com/llmesh/llmesh/sim/server"
)

// Embedded A/B arms: `--a embedded:FILE` starts, for every run of the arm, a
// fresh simulated engine (the workload's profile and model, real time) and
// the embedded gateway configured by the mesh file FILE in front of it, both
// on random loopback ports, and stops them after the run. In FILE,
// ${LLMESH_SIM} stands for the engine's HTTP host:port and
// ${LLMESH_SIM_GRPC} for its gRPC host:port; the gateway serves the file's
// first listener. bench/meshes has the two policies the demo compares.

// Placeholders an embedded arm's mesh file uses for the engine it starts.
const (
	simHTTPPlaceholder = "${LLMESH_SIM}"
	simGRPCPlaceholder = "${LLMESH_SIM_GRPC}"
)

var _ = addABTargetResolver("embedded", resolveEmbedded)

// embeddedArm is one arm of an embedded A/B.
type embeddedArm struct {
	label string
	path  string
	mesh  []byte // FILE as read, placeholders unresolved
	sim   server.Config
	log   *slog.Logger
}

// resolveEmbedded checks the mesh file and the engine settings now, so that
// a bad file is a usage error before any run starts.
func resolveEmbedded(arg, label string, w *workload.Workload, stderr io.Writer) (ab.Target, error) {
	if arg == "" {
		return nil, errors.New("embedded: want embedded:MESH-FILE")
	}
	mesh, err := os.ReadFile(arg)
	if err != nil {
		return nil, fmt.Errorf("embedded: %w", err)
	}
	if !bytes.Contains(mesh, []byte(simHTTPPlaceholder)) && !bytes.Contains(mesh, []byte(simGRPCPlaceholder)) {
		return nil, fmt.Errorf("embedded: %s: no pool points at the simulated engine: use %s (HTTP host:port) or %s (gRPC host:port) in its endpoints", arg, simHTTPPlaceholder, simGRPCPlaceholder)
	}
	if _, err := config.Load(resolveMesh(mesh, "127.0.0.1:1", "127.0.0.1:2")); err != nil {
		return nil, fmt.Errorf("embedded: %s: %w", arg, err)
	}
	if label == "" {
		label = strings.TrimSuffix(filepath.Base(arg), filepath.Ext(arg))
	}
	arm := &embeddedArm{label: label, path: arg, mesh: mesh,
		log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelError}))}
	if w != nil {
		arm.sim = server.Config{Profile: w.Spec.Profile, ServedModelName: w.Spec.Model, Seed: uint64(w.Spec.Seed),
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
		if _, err := server.New(arm.sim); err != nil {
			return nil, fmt.Errorf("embedded: simulated engine for the workload: %w", err)
		}
	}
	return ab.Func{Label: label, Start: arm.start}, nil
}

// resolveMesh substitutes the engine's addresses into the mesh file.
func resolveMesh(mesh []byte, httpAddr, grpcAddr string) []byte {
	m := bytes.ReplaceAll(mesh, []byte(simGRPCPlaceholder), []byte(grpcAddr))
	return bytes.ReplaceAll(m, []byte(simHTTPPlaceholder), []byte(httpAddr))
}

// start brings up the engine and the gateway for one run and returns the
// gateway's host:port (which the OpenAI and gRPC clients both accept) and a
// stop function that shuts both down and waits for them.
func (a *embeddedArm) start(ctx context.Context) (string, func(), error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	dir, err := os.MkdirTemp("", "llmesh-ab-*")
	if err != nil {
		cancel()
		return "", nil, fmt.Errorf("%s: %w", a.label, err)
	}
	stop := func() {
		cancel()
		wg.Wait()
		_ = os.RemoveAll(dir)
	}
	fail := func(err error) (string, func(), error) {
		stop()
		return "", nil, fmt.Errorf("%s: %w", a.label, err)
	}
	srv, err := server.New(a.sim)
	if err != nil {
		return fail(fmt.Errorf("simulated engine: %w", err))
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
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := srv.Serve(ctx, httpLn, grpcLn); err != nil {
			a.log.Error("simulated engine stopped", "arm", a.label, "err", err)
		}
	}()
	path := filepath.Join(dir, "mesh.yaml")
	if err := os.WriteFile(path, resolveMesh(a.mesh, httpLn.Addr().String(), grpcLn.Addr().String()), 0o600); err != nil {
		return fail(err)
	}
	ready := make(chan net.Addr, 1)
	errc := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		errc <- gateway.Run(ctx, gateway.RunConfig{
			ConfigPath: path,
			Listen:     "127.0.0.1:0",
			Admin:      "127.0.0.1:0",
			Drain:      2 * time.Second, // a run's requests have ended by the time it is released
			Logger:     a.log,
			Ready:      func(data, _ net.Addr) { ready <- data },
		})
	}()
	select {
	case addr := <-ready:
		return addr.String(), stop, nil
	case err := <-errc:
		return fail(fmt.Errorf("gateway with %s: %w", a.path, err))
	case <-ctx.Done():
		return fail(ctx.Err())
	}
}
