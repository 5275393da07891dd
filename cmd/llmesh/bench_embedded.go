package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/llmesh/llmesh/bench/ab"
	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/cmd/llmesh/demo/stack"
	"github.com/llmesh/llmesh/config"
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
	dir, err := os.MkdirTemp("", "llmesh-ab-*")
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", a.label, err)
	}
	st, err := stack.Start(ctx, stack.Config{
		Sim: a.sim,
		Mesh: func(simHTTP, simGRPC string) ([]byte, error) {
			return resolveMesh(a.mesh, simHTTP, simGRPC), nil
		},
		MeshPath: filepath.Join(dir, "mesh.yaml"),
		Drain:    2 * time.Second, // a run's requests have ended by the time it is released
		Logger:   a.log,
		Gateway:  stackGateway,
	})
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, fmt.Errorf("%s: %s: %w", a.label, a.path, err)
	}
	return st.Addr, func() {
		st.Stop()
		_ = os.RemoveAll(dir)
	}, nil
}
