package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/scheduler/framed"
	"github.com/llmesh/llmesh/scheduler/server/identity"
)

// Options configure a Service. The process around it (the mesh and
// identities files and their watchers, SIGHUP, the admin HTTP server and
// its registry's process collectors) is wired by the command that runs it
// (cmd/llmesh/schedserve); the service is given what those produce.
type Options struct {
	// Mesh is the mesh config; its pools, classes and scheduler settings
	// configure the shared scheduler. Required; Service.Reload replaces it.
	Mesh *config.Config
	// Clock drives the scheduler and the capacity watchers; nil means the
	// real clock.
	Clock clock.Clock
	// Log receives one line per notable event; nil discards.
	Log io.Writer
	// Ready, when non-nil, is called with the listening address once the
	// service accepts streams.
	Ready func(addr net.Addr)
	// Registry, when non-nil, gets the service's metrics (Collector's, the
	// open sessions, the session messages and, with identities, the
	// refusals) at NewService; nil registers none.
	Registry prometheus.Registerer
	// Keepalive is how the service notices a proxy that vanished without
	// closing its connection (a host that lost power, a partition): after
	// Time without traffic it pings, and a ping not answered within
	// Timeout closes the connection, which ends the proxy's streams and
	// frees its leases. Zero fields mean 10s and 5s (gRPC's own defaults,
	// 2h and 20s, would hold a dead proxy's slots for hours).
	Keepalive keepalive.ServerParameters
	// TLS, when set, serves both transports over TLS with it (mTLS when it
	// requires client certificates: tlsfiles.Server with a client CA);
	// nil serves plaintext, to anyone who can connect.
	TLS *tls.Config
	// HandshakeTimeout bounds how long a new connection may take to finish
	// its TLS handshake and its preface (framed or HTTP/2); one that sends
	// part of them and stalls is closed then. Zero is
	// DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// Identities, when set, is who may use the service and what each
	// identity may use and hold (Server.SetIdentities); nil trusts every
	// client that connects. Service.ReplaceIdentities changes it while
	// serving.
	Identities *identity.Set
	// Limits bound what one client can hold (sessions, leases, how long a
	// preempted lease may stay open); zero fields take their defaults.
	Limits Limits
}

// DefaultHandshakeTimeout is Options.HandshakeTimeout's default (gRPC's
// own, 120 s, lets half-open connections pile up).
const DefaultHandshakeTimeout = 5 * time.Second

// Service is the shared scheduler service for one mesh: one in-process
// scheduler per pool (MeshScheduler) with a capacity watcher for every
// pool with an engine metrics URL, the scheduler API (framed sessions and
// gRPC on one address) and the gRPC health service. Build it with
// NewService, serve it once with Serve, and Close it after Serve returned;
// Reload and ReplaceIdentities may be called from any goroutine until
// Close.
type Service struct {
	o     Options
	log   *logWriter
	ka    keepalive.ServerParameters
	sched *MeshScheduler
	srv   *Server
	g     *grpc.Server
	hs    *health.Server
}

// NewService builds the service for o.Mesh and registers its metrics in
// o.Registry. It serves nothing until Serve.
func NewService(o Options) (*Service, error) {
	if o.Mesh == nil {
		return nil, fmt.Errorf("scheduler server: a mesh config is required")
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = DefaultHandshakeTimeout
	}
	s := &Service{o: o, log: &logWriter{w: o.Log}, ka: o.Keepalive}
	if s.ka.Time <= 0 {
		s.ka.Time = 10 * time.Second
	}
	if s.ka.Timeout <= 0 {
		s.ka.Timeout = 5 * time.Second
	}
	// Envoy filters behind control schedule each experiment arm in a pool
	// of its own, and so does the embedded gateway; MeshConfig serves those
	// pools too.
	sched, err := NewMeshScheduler(o.Mesh, o.Clock)
	if err != nil {
		return nil, fmt.Errorf("scheduler server: %w", err)
	}
	s.sched = sched
	s.g = newGRPC(s.ka, o.HandshakeTimeout, o.TLS != nil)
	s.srv = New(sched, o.Clock)
	s.srv.SetLimits(o.Limits)
	s.srv.SetLog(s.log.printf)
	s.srv.SetIdentities(o.Identities, func() string { return sched.Mesh().DefaultClass.Name })
	s.srv.Register(s.g)
	s.hs = health.NewServer()
	healthpb.RegisterHealthServer(s.g, s.hs)
	if o.Registry != nil {
		if err := s.register(o.Registry); err != nil {
			sched.Close()
			return nil, fmt.Errorf("scheduler server: metrics: %w", err)
		}
	}
	return s, nil
}

// register puts the service's metrics in reg.
func (s *Service) register(reg prometheus.Registerer) error {
	srv := s.srv
	cs := []prometheus.Collector{NewCollector(s.sched.Stats), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "llmesh_scheduler_service_sessions",
		Help: "Open Session streams: proxies connected to the service (older proxies use a stream per admission instead).",
	}, func() float64 { return float64(srv.Sessions()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "llmesh_scheduler_service_messages_received_total",
			Help: "Session messages received from proxies; each carries one or more leases' messages.",
		}, func() float64 { r, _ := srv.Messages(); return float64(r) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "llmesh_scheduler_service_messages_sent_total",
			Help: "Session messages sent to proxies; each carries one or more leases' answers.",
		}, func() float64 { _, s := srv.Messages(); return float64(s) }),
	}
	if r := srv.Refusals(); r != nil {
		cs = append(cs, r)
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Reload makes c the running mesh config (pools and classes whose
// settings changed get a new scheduler; open admission streams stay, see
// Schedulers) and logs the pools it rebuilt. A config the schedulers
// cannot take is logged and returned; the running one stays.
func (s *Service) Reload(c *config.Config) error {
	built, err := s.sched.Apply(c)
	if err != nil {
		s.log.printf("scheduler: config change rejected; keeping the running config: %v\n", err)
		return err
	}
	s.log.printf("scheduler: config reloaded; %d pool(s) rebuilt\n", len(built))
	for _, name := range built {
		s.log.printf("scheduler: pool %s: %s\n", name, describe(c, name))
	}
	return nil
}

// ReplaceIdentities puts set in place of the running identities and
// answers how many sessions it closed (Server.ReplaceIdentities). The
// service must have been built with identities.
func (s *Service) ReplaceIdentities(set *identity.Set) (closed int, err error) {
	return s.srv.ReplaceIdentities(set)
}

// Mesh is the running mesh config.
func (s *Service) Mesh() *config.Config { return s.sched.Mesh() }

// Close stops the capacity watchers (waiting for them) and closes the
// schedulers. Call it once, after Serve returned (or instead of Serve).
func (s *Service) Close() error { return s.sched.Close() }

// Serve starts the capacity watchers and serves the service on l until
// ctx ends (nil) or l fails (its error). One address serves both
// transports: framed sessions (scheduler/framed) and gRPC, told apart by a
// connection's first byte. Every goroutine it starts has ended when it
// returns, except the capacity watchers, which Close waits for.
func (s *Service) Serve(ctx context.Context, l net.Listener) error {
	if err := s.sched.Start(ctx); err != nil {
		return fmt.Errorf("scheduler server: %w", err)
	}
	for _, p := range s.sched.Stats() {
		s.log.printf("scheduler: pool %s: %s\n", p.Name, describe(s.sched.Mesh(), p.Name))
	}
	if s.o.TLS != nil {
		l = tls.NewListener(l, s.o.TLS)
	}
	mux := framed.NewMux(l, net.KeepAliveConfig{Enable: true, Idle: s.ka.Time, Interval: s.ka.Timeout, Count: 1})
	mux.HandshakeTimeout = s.o.HandshakeTimeout
	muxc := make(chan error, 1)
	go func() {
		muxc <- mux.Serve(ctx, func(c *framed.ServerConn) error { return s.srv.ServeSession(c) })
	}()
	errc := make(chan error, 1)
	go func() { errc <- s.g.Serve(mux.Other()) }()
	s.hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	if s.o.Ready != nil {
		s.o.Ready(l.Addr())
	}
	select {
	case err := <-errc:
		mux.Close()
		<-muxc //nolint:errcheck // the mux ends with the listener
		return fmt.Errorf("scheduler server: %w", err)
	case err := <-muxc:
		s.g.Stop()
		<-errc //nolint:errcheck // Serve's answer to Stop says nothing
		return fmt.Errorf("scheduler server: %w", err)
	case <-ctx.Done():
		s.hs.Shutdown()
		s.g.Stop()
		<-errc //nolint:errcheck // Serve's answer to Stop says nothing about the shutdown
		mux.Close()
		<-muxc //nolint:errcheck // the mux ends with the listener
		return nil
	}
}

// Run serves o's mesh on l until ctx ends: NewService, Serve and Close.
// All its goroutines end before it returns.
func Run(ctx context.Context, l net.Listener, o Options) error {
	s, err := NewService(o)
	if err != nil {
		return err
	}
	defer s.Close()
	return s.Serve(ctx, l)
}

// newGRPC is the service's gRPC server: keepalive ka, handshake timeout
// hto, and, when the listener speaks TLS (for both transports), gRPC told
// of the client's certificate.
func newGRPC(ka keepalive.ServerParameters, hto time.Duration, overTLS bool) *grpc.Server {
	gopts := append(GRPCOptions(), grpc.KeepaliveParams(ka), grpc.ConnectionTimeout(hto))
	if overTLS {
		gopts = append(gopts, grpc.Creds(tlsPassthrough{}))
	}
	return grpc.NewServer(gopts...)
}

// describe says how a pool (or arm pool) of c is scheduled, for the log.
func describe(c *config.Config, pool string) string {
	sc, err := MeshConfig(c)
	if err != nil {
		return err.Error()
	}
	for _, p := range sc.Pools {
		if p.Name == pool {
			return fmt.Sprintf("policy %s, max_inflight %d", p.Policy.Name(), p.MaxInflight)
		}
	}
	return "removed"
}

// logWriter serialises log lines from the service's goroutines and its
// callers' (Reload from a config watcher's).
type logWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *logWriter) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, format, args...)
}
