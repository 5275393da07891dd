package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"time"

	"github.com/llmesh/llmesh/cmd/llmesh/demo/stack"
	"github.com/llmesh/llmesh/cmd/llmesh/gatewayproc"
	"github.com/llmesh/llmesh/cmd/llmesh/internal/flag"
	"github.com/llmesh/llmesh/internal/adminapi"
)

// runGateway is `llmesh gateway`: the embedded data plane, from a mesh
// config file (watched and reloaded) or from quick flags.
func runGateway(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var rc gatewayproc.Config
	fs.StringVar(&rc.ConfigPath, "config", "", "mesh config file (watched; valid changes are applied live)")
	fs.StringVar(&rc.Listener, "listener", "", "listener of the mesh config to serve (default: the first)")
	fs.StringVar(&rc.Listen, "listen", "", "data-plane address host:port (overrides the config's listener address)")
	fs.StringVar(&rc.Upstream, "upstream", "", "OpenAI-compatible engine URL, e.g. http://127.0.0.1:8000 (without --config)")
	fs.StringVar(&rc.GRPCUpstream, "grpc-upstream", "", "gRPC engine address host:port for gRPC requests (without --config)")
	fs.StringVar(&rc.Admin, "admin", "", "admin address serving /healthz, /readyz, /metrics")
	fs.StringVar(&rc.Policy, "policy", "", "scheduling policy without --config: fifo|priority|preemptive|edf (default: unscheduled unless --max-inflight)")
	fs.IntVar(&rc.MaxInflight, "max-inflight", 0, "pool capacity without --config (0: 64 when --policy is set)")
	fs.DurationVar(&rc.Drain, "drain", 10*time.Second, "how long in-flight requests may finish at shutdown")
	fs.Int64Var(&rc.MaxRequestBytes, "max-body", 0, "request body limit in bytes (0: 16 MiB)")
	fs.DurationVar(&rc.StreamIdleTimeout, "idle-timeout", 0, "end upstream streams silent this long (0: 5m, negative: never)")
	fs.BoolVar(&rc.ServerTiming, "server-timing", false, "add server-timing header/trailer without --config")
	verbose := fs.Bool("v", false, "log at debug level")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return withExitCode(2, err)
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments: %q", fs.Args()))
	}
	if rc.Drain < 0 {
		errs = append(errs, fmt.Errorf("--drain: %v must not be negative", rc.Drain))
	}
	if rc.MaxRequestBytes < 0 {
		errs = append(errs, fmt.Errorf("--max-body: %d must not be negative", rc.MaxRequestBytes))
	}
	if rc.ConfigPath != "" && (rc.Upstream != "" || rc.GRPCUpstream != "" || rc.Policy != "" || rc.MaxInflight != 0) {
		errs = append(errs, errors.New("--config: --upstream, --grpc-upstream, --policy and --max-inflight are quick-mode flags; set them in the config"))
	}
	if rc.ConfigPath == "" {
		if rc.Upstream == "" && rc.GRPCUpstream == "" {
			errs = append(errs, errors.New("--upstream: required without --config"))
		}
		if rc.Listen == "" {
			errs = append(errs, errors.New("--listen: required without --config"))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return withExitCode(2, err)
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	rc.Logger = slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	rc.Ready = func(data, admin net.Addr) {
		if admin != nil {
			fmt.Fprintf(stdout, "gateway listening on %s (admin %s)\n", data, admin)
			return
		}
		fmt.Fprintf(stdout, "gateway listening on %s\n", data)
	}
	rc.AdminToken = os.Getenv(adminapi.TokenEnv)
	// SIGHUP reloads the config file now (hangup.go).
	hup, stop := hangups()
	defer stop()
	rc.Hangup = hup
	return gatewayproc.Run(ctx, rc)
}

// stackGateway runs the gateway of an in-process stack (`llmesh demo`,
// `llmesh bench ab --a embedded:FILE`).
func stackGateway(ctx context.Context, gc stack.GatewayConfig) error {
	return gatewayproc.Run(ctx, gatewayproc.Config{ConfigPath: gc.ConfigPath, Listen: gc.Listen, Admin: gc.Admin,
		Drain: gc.Drain, Logger: gc.Logger, Ready: func(data, _ net.Addr) { gc.Ready(data) }})
}
