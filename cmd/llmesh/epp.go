package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"

	"github.com/llmesh/llmesh/cmd/llmesh/internal/flag"
	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/epp"
	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/internal/tlsfiles"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/client"
	"github.com/llmesh/llmesh/scheduler/pools"
	"github.com/llmesh/llmesh/scheduler/server"
	"github.com/llmesh/llmesh/telemetry"
)

// eppBodyModes are --body-mode's values.
var eppBodyModes = map[string]filterv3.ProcessingMode_BodySendMode{
	"full_duplex": filterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
	"buffered":    filterv3.ProcessingMode_BUFFERED,
	"streamed":    filterv3.ProcessingMode_STREAMED,
}

// runEPP is `llmesh epp`: the endpoint picker of the Gateway API Inference
// Extension over Envoy ext_proc (docs/epp.md).
func runEPP(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("epp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "mesh config file: pools (their endpoints are the picks), classes, classification (required)")
	listen := fs.String("listen", "", "gRPC address host:port of the ext_proc and health services (required)")
	listener := fs.String("listener", "", "listener of the mesh config whose routes choose the pool (default: the first)")
	certFile := fs.String("tls-cert", "", "serve TLS with this PEM certificate (with --tls-key)")
	keyFile := fs.String("tls-key", "", "PEM private key of --tls-cert")
	insecure := fs.Bool("insecure", false, "allow plaintext on a --listen address beyond loopback (logged as a warning)")
	failOpen := fs.Bool("fail-open", false, "pick without admission (round robin) when the scheduler is unavailable, instead of 503")
	maxBody := fs.Int64("max-body", 0, "request body limit in bytes (0: 16 MiB); larger bodies get 413")
	bodyMode := fs.String("body-mode", "full_duplex", "body mode of streams whose first message has no protocol_config: full_duplex|buffered|streamed")
	admin := fs.String("admin", "", "address serving /metrics (the request metrics of the other hosts, per class, and the pools' gauges) and /healthz; empty: none")
	drain := fs.Duration("drain", 10*time.Second, "how long open streams may finish at shutdown")
	verbose := fs.Bool("v", false, "log at debug level")
	inferencePool := fs.String("inference-pool", "", "take the endpoints of the mesh pool of this name (or of the mesh's only pool) from this Kubernetes InferencePool's ready pods; empty: the mesh file's endpoints")
	namespace := fs.String("namespace", "", "namespace of --inference-pool (default: the pod's own namespace in a cluster, else \"default\")")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file for --inference-pool (default: the in-cluster config)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return withExitCode(exitUsage, err)
	}
	var errs []error
	if fs.NArg() > 0 {
		errs = append(errs, fmt.Errorf("unexpected arguments: %q", fs.Args()))
	}
	if *configPath == "" {
		errs = append(errs, errors.New("--config: required"))
	}
	if *listen == "" {
		errs = append(errs, errors.New("--listen: required"))
	} else if _, _, err := net.SplitHostPort(*listen); err != nil {
		errs = append(errs, fmt.Errorf("--listen: %q: %v", *listen, err))
	} else if *certFile == "" {
		warn, err := tlsfiles.Plaintext("--listen", *listen, "--tls-cert and --tls-key", *insecure)
		if err != nil {
			errs = append(errs, err)
		} else if warn != "" {
			fmt.Fprintln(stderr, warn)
		}
	}
	if (*certFile == "") != (*keyFile == "") {
		errs = append(errs, errors.New("--tls-cert and --tls-key: give both or neither"))
	}
	if *maxBody < 0 {
		errs = append(errs, fmt.Errorf("--max-body: %d must not be negative", *maxBody))
	}
	mode, ok := eppBodyModes[*bodyMode]
	if !ok {
		errs = append(errs, fmt.Errorf("--body-mode: %q is not one of full_duplex, buffered, streamed", *bodyMode))
	}
	if *admin != "" {
		if _, _, err := net.SplitHostPort(*admin); err != nil {
			errs = append(errs, fmt.Errorf("--admin: %q: %v", *admin, err))
		}
	}
	if *drain < 0 {
		errs = append(errs, fmt.Errorf("--drain: %v must not be negative", *drain))
	}
	if *inferencePool == "" && (*namespace != "" || *kubeconfig != "") {
		errs = append(errs, errors.New("--namespace and --kubeconfig: only with --inference-pool"))
	}
	if err := errors.Join(errs...); err != nil {
		return withExitCode(exitUsage, err)
	}
	mesh, err := config.LoadFile(*configPath)
	if err != nil {
		return meshError(*configPath, err)
	}
	var kube *eppKube
	if *inferencePool != "" {
		if kube, err = newEPPKube(ctx, *inferencePool, *namespace, *kubeconfig, mesh, stderr); err != nil {
			return err
		}
	}
	// A buffered body comes in one message: room for the largest allowed.
	limit := *maxBody
	if limit == 0 {
		limit = epp.DefaultMaxBodyBytes
	}
	opts := []grpc.ServerOption{grpc.MaxRecvMsgSize(int(min(limit+1<<20, 1<<30)))}
	if *certFile != "" {
		cfg, err := tlsfiles.Server(*certFile, *keyFile, "")
		if err != nil {
			return withExitCode(exitUsage, fmt.Errorf("--tls-cert/--tls-key: %w", err))
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(cfg)))
	}
	level := slog.LevelInfo
	if *verbose {
		level = slog.LevelDebug
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	sched, err := pools.NewMesh(mesh, nil)
	if err != nil {
		return withExitCode(exitUsage, fmt.Errorf("scheduler: %w", err))
	}
	defer sched.Close()
	if err := sched.Start(ctx); err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	var adm scheduler.Admitter = sched.Set
	if ss := mesh.SchedulerService; ss != nil {
		// The shared service orders requests across pickers and proxies;
		// the in-process scheduler takes over while it is unreachable when
		// the config says fail_open (as in the gateway).
		// Dialled as the gateway and the Envoy filter dial it: TLS (mTLS
		// with a certificate) and the bearer token of scheduler_service.
		tlsCfg, err := ss.ServiceTLS()
		if err != nil {
			return withExitCode(exitUsage, err)
		}
		token, err := ss.ServiceToken()
		if err != nil {
			return withExitCode(exitUsage, err)
		}
		c, err := client.New(ss.Address, client.Options{FailOpen: ss.FailOpen, Fallback: sched.Set, Timeout: ss.Timeout,
			Transport: ss.Transport, ReportDelay: client.ReportDelayOf(ss.ReportDelay), TLS: tlsCfg, Token: token})
		if err != nil {
			return withExitCode(exitUsage, fmt.Errorf("scheduler_service: %w", err))
		}
		defer c.Close()
		adm = c
	}
	ecfg := epp.Config{Mesh: mesh, Listener: *listener, Admitter: adm, Stats: sched.Stats,
		MaxBodyBytes: *maxBody, FailOpen: *failOpen, BodyMode: mode, Logger: log}
	if *admin != "" {
		stop, err := eppAdmin(ctx, *admin, mesh, sched.Stats, &ecfg, stdout)
		if err != nil {
			return err
		}
		defer stop()
	}
	srv, err := epp.New(ecfg)
	if err != nil {
		return withExitCode(exitUsage, err)
	}
	if kube != nil {
		stopKube, err := kube.start(ctx, sched, srv)
		if err != nil {
			return err
		}
		defer stopKube()
	}
	lis, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("--listen: %w", err)
	}
	g := grpc.NewServer(opts...)
	srv.Register(g)
	served := make(chan error, 1)
	go func() { served <- g.Serve(lis) }()
	scheme := "plaintext"
	if *certFile != "" {
		scheme = "TLS"
	}
	fmt.Fprintf(stdout, "epp listening on %s (%s)\n", lis.Addr(), scheme)
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	// Readiness goes NOT_SERVING first, then open streams get --drain.
	srv.Shutdown()
	stopped := make(chan struct{})
	go func() { g.GracefulStop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(*drain):
		g.Stop()
		<-stopped
	}
	<-served
	return nil
}

// eppAdmin serves /metrics and /healthz on addr: every request's
// observation recorded as the other hosts record theirs (telemetry), and
// the scheduler's pool gauges. It sets cfg.OnDone; stop ends the server.
func eppAdmin(ctx context.Context, addr string, mesh *config.Config, stats func() []scheduler.PoolStats,
	cfg *epp.Config, stdout io.Writer) (stop func(), err error) {
	topts := telemetry.OptionsFromConfig(mesh.Telemetry)
	topts.Prometheus = true
	for _, c := range mesh.Classes {
		topts.Recorder.Classes = append(topts.Recorder.Classes, exchange.Class{Name: c.Name, Priority: c.Priority, TTFT: c.TTFT, TPOT: c.TPOT, Preemptible: c.Preemptible})
	}
	tele, err := telemetry.New(ctx, topts)
	if err != nil {
		return nil, fmt.Errorf("telemetry: %w", err)
	}
	if reg := tele.Registry(); reg != nil {
		reg.MustRegister(server.NewCollector(stats))
	}
	rec := tele.Recorder
	cfg.OnRelocated = func(kind string, n int) { rec.Relocated(kind, int64(n)) }
	cfg.OnDone = func(r epp.Record) {
		if r.Admitted {
			rec.Record(r.Observation, r.Class, r.Model)
		}
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		_ = tele.Shutdown(context.Background())
		return nil, fmt.Errorf("--admin: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", tele.PrometheusHandler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = hs.Serve(lis) }()
	fmt.Fprintf(stdout, "epp admin on http://%s/metrics\n", lis.Addr())
	return func() {
		_ = hs.Close()
		<-done
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tele.Shutdown(sctx)
	}, nil
}
