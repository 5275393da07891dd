package server

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/config/watch"
	"github.com/llmesh/llmesh/scheduler/framed"
	"github.com/llmesh/llmesh/scheduler/server/identity"
)

// Options configure Run.
type Options struct {
	// Mesh is the mesh config; its pools, classes and scheduler settings
	// configure the shared scheduler. Required unless ConfigPath is set.
	Mesh *config.Config
	// ConfigPath, when set, is the mesh config file: Run loads it (when
	// Mesh is nil) and watches it. A changed, valid file is applied live
	// (pools and classes whose settings changed get a new scheduler; open
	// admission streams stay, see Schedulers); an invalid one is logged
	// with the field paths of its problems and the running config stays.
	ConfigPath string
	// Clock drives the scheduler and the capacity watchers; nil means the
	// real clock.
	Clock clock.Clock
	// Log receives one line per notable event; nil discards.
	Log io.Writer
	// Ready, when non-nil, is called with the listening address once the
	// service accepts streams.
	Ready func(addr net.Addr)
	// Admin, when non-nil, serves GET /metrics (Prometheus: Collector's
	// metrics, the process's CPU and memory, the Go runtime's) and GET
	// /healthz over HTTP; nil serves neither.
	Admin net.Listener
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
	// client that connects (unless IdentitiesPath is set).
	Identities *identity.Set
	// IdentitiesPath, when set, is the identities file: Run loads it (when
	// Identities is nil) and reads it again, with the token files it
	// names, when it or one of them changes and at each Hangup
	// (Server.ReplaceIdentities: sessions of an identity removed, or whose
	// token or certificate no longer proves it, are closed). An invalid
	// file is logged with the field paths of its problems and the running
	// identities stay.
	IdentitiesPath string
	// Hangup, when set, reloads the mesh config file and the identities
	// file at each value received (SIGHUP), whether or not they changed.
	Hangup <-chan os.Signal
	// Limits bound what one client can hold (sessions, leases, how long a
	// preempted lease may stay open); zero fields take their defaults.
	Limits Limits
}

// DefaultHandshakeTimeout is Options.HandshakeTimeout's default (gRPC's
// own, 120 s, lets half-open connections pile up).
const DefaultHandshakeTimeout = 5 * time.Second

// Run serves the shared scheduler for o.Mesh on l until ctx ends: one
// in-process scheduler per pool (MeshScheduler), a capacity watcher for
// every pool with an engine metrics URL, the config file watcher when
// o.ConfigPath is set, and the gRPC health service (serving once ready).
// All its goroutines end before it returns.
func Run(ctx context.Context, l net.Listener, o Options) error {
	if o.Log == nil {
		o.Log = io.Discard
	}
	var lw logWriter
	lw.w = o.Log
	var (
		watcher *watch.Watcher
		sched   *MeshScheduler
	)
	if o.ConfigPath != "" {
		w, err := watch.New(o.ConfigPath, watch.Options{
			Clock: o.Clock,
			// sched is set before the watcher's goroutine starts.
			OnChange: func(c *config.Config) { reload(sched, c, &lw) },
			OnError: func(err error) {
				lw.printf("scheduler: config change rejected; keeping the running config: %v\n", err)
			},
		})
		if err != nil {
			return fmt.Errorf("scheduler server: %w", err)
		}
		watcher = w
		if o.Mesh == nil {
			o.Mesh = w.Config()
		}
	}
	if o.Mesh == nil {
		return fmt.Errorf("scheduler server: a mesh config is required")
	}
	var idw *identitiesWatch
	if o.IdentitiesPath != "" {
		var err error
		if idw, err = newIdentitiesWatch(o.IdentitiesPath, o.Identities); err != nil {
			return fmt.Errorf("scheduler server: %w", err)
		}
		o.Identities = idw.initial
	}
	// Envoy filters behind control schedule each experiment arm in a pool
	// of its own, and so does the embedded gateway; MeshConfig serves those
	// pools too.
	sched, err := NewMeshScheduler(o.Mesh, o.Clock)
	if err != nil {
		return fmt.Errorf("scheduler server: %w", err)
	}
	defer sched.Close()
	ka := o.Keepalive
	if ka.Time <= 0 {
		ka.Time = 10 * time.Second
	}
	if ka.Timeout <= 0 {
		ka.Timeout = 5 * time.Second
	}
	hto := o.HandshakeTimeout
	if hto <= 0 {
		hto = DefaultHandshakeTimeout
	}
	g := newGRPC(ka, hto, o.TLS != nil)
	srv := New(sched, o.Clock)
	srv.SetLimits(o.Limits)
	srv.SetLog(lw.printf)
	srv.SetIdentities(o.Identities, func() string { return sched.Mesh().DefaultClass.Name })
	srv.Register(g)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(g, hs)

	wctx, stopWatchers := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() {
		stopWatchers()
		wg.Wait()
	}()
	if err := sched.Start(wctx); err != nil {
		return fmt.Errorf("scheduler server: %w", err)
	}
	if watcher != nil {
		startWatch(wctx, &wg, func() []string { return []string{watcher.Path()} }, o.Clock, func() { _, _ = watcher.Reload() }, // reported through OnError
			func(err error) { lw.printf("scheduler: config file: %v\n", err) })
	}
	if idw != nil {
		idw.srv, idw.log = srv, &lw
		startWatch(wctx, &wg, idw.paths, o.Clock, func() { idw.reload(false) },
			func(err error) { lw.printf("scheduler: identities file: %v\n", err) })
	}
	if o.Hangup != nil {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-wctx.Done():
					return
				case <-o.Hangup:
				}
				lw.printf("scheduler: SIGHUP received; still serving, reloading the config file and the identities file\n")
				if watcher != nil {
					_, _ = watcher.Reload() // reported through OnError
				}
				if idw != nil {
					idw.reload(true)
				}
			}
		}()
	}
	for _, p := range sched.Stats() {
		lw.printf("scheduler: pool %s: %s\n", p.Name, describe(sched.Mesh(), p.Name))
	}
	if o.Admin != nil {
		reg := prometheus.NewRegistry()
		reg.MustRegister(NewCollector(sched.Stats), prometheus.NewGaugeFunc(prometheus.GaugeOpts{
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
			// process_cpu_seconds_total and the Go runtime's own: what
			// scheduler bench --service-metrics divides by the admissions.
			collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), collectors.NewGoCollector())
		if r := srv.Refusals(); r != nil {
			reg.MustRegister(r)
		}
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
	// One address serves both transports: framed sessions
	// (scheduler/framed) and gRPC, told apart by a connection's first byte.
	if o.TLS != nil {
		l = tls.NewListener(l, o.TLS)
	}
	mux := framed.NewMux(l, net.KeepAliveConfig{Enable: true, Idle: ka.Time, Interval: ka.Timeout, Count: 1})
	mux.HandshakeTimeout = hto
	muxc := make(chan error, 1)
	go func() {
		muxc <- mux.Serve(ctx, func(c *framed.ServerConn) error { return srv.ServeSession(c) })
	}()
	errc := make(chan error, 1)
	go func() { errc <- g.Serve(mux.Other()) }()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	if o.Ready != nil {
		o.Ready(l.Addr())
	}
	select {
	case err := <-errc:
		mux.Close()
		<-muxc //nolint:errcheck // the mux ends with the listener
		return fmt.Errorf("scheduler server: %w", err)
	case err := <-muxc:
		g.Stop()
		<-errc //nolint:errcheck // Serve's answer to Stop says nothing
		return fmt.Errorf("scheduler server: %w", err)
	case <-ctx.Done():
		hs.Shutdown()
		g.Stop()
		<-errc //nolint:errcheck // Serve's answer to Stop says nothing about the shutdown
		mux.Close()
		<-muxc //nolint:errcheck // the mux ends with the listener
		return nil
	}
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

// startWatch runs watch.Files for paths in a goroutine of wg until ctx
// ends, and returns once the watch is in place (its first reload) or
// failed to start (reported, SIGHUP still reloads): the service serves
// with its watches running.
func startWatch(ctx context.Context, wg *sync.WaitGroup, paths func() []string, clk clock.Clock, reload func(), report func(error)) {
	watching := make(chan struct{})
	var once sync.Once
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := watch.Files(ctx, paths, 0, clk, func() {
			once.Do(func() { close(watching) })
			reload()
		}, report)
		once.Do(func() { close(watching) })
		if err != nil {
			report(fmt.Errorf("not watched (SIGHUP still reloads it): %w", err))
		}
	}()
	<-watching
}

// identitiesWatch reloads the identities file, and the token files it
// names, into a serving Server. reload is called by the file watcher's
// goroutine and the hangup goroutine; mu serialises it and guards last
// and files.
type identitiesWatch struct {
	path    string
	initial *identity.Set
	srv     *Server
	log     *logWriter

	mu    sync.Mutex
	last  [sha256.Size]byte // the Digest of the set last loaded
	files []string          // its token files
}

func newIdentitiesWatch(path string, initial *identity.Set) (*identitiesWatch, error) {
	iw := &identitiesWatch{path: path, initial: initial}
	set, err := identity.Load(path)
	if err != nil {
		return nil, err
	}
	iw.last, iw.files = set.Digest(), set.TokenFiles()
	if iw.initial == nil {
		iw.initial = set
	}
	return iw, nil
}

// paths are the files whose change reloads the identities: the file and
// the token files of the identities last loaded.
func (iw *identitiesWatch) paths() []string {
	iw.mu.Lock()
	defer iw.mu.Unlock()
	return append([]string{iw.path}, iw.files...)
}

// reload reads the identities file and its token files again and puts
// them in place; unless force, only when the file or a token it names
// changed. An invalid file or token file is logged and the running
// identities stay.
func (iw *identitiesWatch) reload(force bool) {
	iw.mu.Lock()
	defer iw.mu.Unlock()
	b, err := os.ReadFile(iw.path)
	if err == nil && len(bytes.TrimSpace(b)) == 0 {
		// Writers truncate before writing: most likely a write in progress.
		err = fmt.Errorf("identities: %s is empty", iw.path)
	}
	if err != nil {
		iw.log.printf("scheduler: identities change rejected; keeping the running identities: %v\n", err)
		return
	}
	set, err := identity.Parse(b, filepath.Dir(iw.path))
	if err != nil {
		iw.log.printf("scheduler: identities change rejected; keeping the running identities: identities: %s: %v\n", iw.path, err)
		return
	}
	if set.Digest() == iw.last && !force {
		return
	}
	iw.last, iw.files = set.Digest(), set.TokenFiles()
	closed, err := iw.srv.ReplaceIdentities(set)
	if err != nil {
		iw.log.printf("scheduler: identities change rejected: %v\n", err)
		return
	}
	iw.log.printf("scheduler: identities reloaded from %s: %d identities; %d session(s) closed\n", iw.path, len(set.All()), closed)
}

// reload applies a changed mesh config; on error the running one stays.
func reload(sched *MeshScheduler, c *config.Config, lw *logWriter) {
	built, err := sched.Apply(c)
	if err != nil {
		lw.printf("scheduler: config change rejected; keeping the running config: %v\n", err)
		return
	}
	lw.printf("scheduler: config reloaded; %d pool(s) rebuilt\n", len(built))
	for _, name := range built {
		lw.printf("scheduler: pool %s: %s\n", name, describe(c, name))
	}
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

// logWriter serialises log lines from Run's and the watcher's goroutines.
type logWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *logWriter) printf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fmt.Fprintf(l.w, format, args...)
}
