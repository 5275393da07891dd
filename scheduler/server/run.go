package server

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/capacity"
	"github.com/llmesh/llmesh/scheduler/policy"
)

// Options configure Run.
type Options struct {
	// Mesh is the mesh config; its pools, classes and scheduler settings
	// configure the shared scheduler. Required.
	Mesh *config.Config
	// Clock drives the scheduler and the capacity watchers; nil means the
	// real clock.
	Clock clock.Clock
	// Log receives one line per notable event; nil discards.
	Log io.Writer
	// Ready, when non-nil, is called with the listening address once the
	// service accepts streams.
	Ready func(addr net.Addr)
	// Admin, when non-nil, serves GET /metrics (Prometheus, see Collector)
	// and GET /healthz over HTTP; nil serves neither.
	Admin net.Listener
}

// Run serves the shared scheduler for o.Mesh on l until ctx ends: one
// in-process scheduler, a capacity watcher for every pool with an engine
// metrics URL, and the gRPC health service (serving once ready). All its
// goroutines end before it returns.
func Run(ctx context.Context, l net.Listener, o Options) error {
	if o.Mesh == nil {
		return fmt.Errorf("scheduler server: a mesh config is required")
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	cfg, err := policy.FromMesh(o.Mesh)
	if err != nil {
		return fmt.Errorf("scheduler server: %w", err)
	}
	// Envoy filters behind control schedule each experiment arm in a pool
	// of its own; serve those pools too.
	if cfg, err = scheduler.WithArmPools(cfg, o.Mesh, policy.Lookup); err != nil {
		return fmt.Errorf("scheduler server: %w", err)
	}
	sched, err := scheduler.New(cfg, o.Clock)
	if err != nil {
		return fmt.Errorf("scheduler server: %w", err)
	}
	defer sched.Close()
	watchers, err := capacity.FromMesh(o.Mesh, sched, o.Clock, nil)
	if err != nil {
		return fmt.Errorf("scheduler server: %w", err)
	}
	g := grpc.NewServer()
	New(sched, o.Clock).Register(g)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)

	wctx, stopWatchers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, w := range watchers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = w.Run(wctx)
		}()
	}
	defer func() {
		stopWatchers()
		wg.Wait()
	}()
	for _, p := range cfg.Pools {
		fmt.Fprintf(o.Log, "scheduler: pool %s: policy %s, max_inflight %d\n", p.Name, p.Policy.Name(), p.MaxInflight)
	}
	if o.Admin != nil {
		reg := prometheus.NewRegistry()
		reg.MustRegister(NewCollector(sched.Stats))
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		hsrv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = hsrv.Serve(o.Admin)
		}()
		defer hsrv.Close() // runs before the WaitGroup wait above
	}
	errc := make(chan error, 1)
	go func() { errc <- g.Serve(l) }()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	if o.Ready != nil {
		o.Ready(l.Addr())
	}
	select {
	case err := <-errc:
		return fmt.Errorf("scheduler server: %w", err)
	case <-ctx.Done():
		hs.Shutdown()
		g.Stop()
		<-errc //nolint:errcheck // Serve's answer to Stop says nothing about the shutdown
		return nil
	}
}
