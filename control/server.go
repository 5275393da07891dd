package control

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	clusterservice "github.com/envoyproxy/go-control-plane/envoy/service/cluster/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	endpointservice "github.com/envoyproxy/go-control-plane/envoy/service/endpoint/v3"
	listenerservice "github.com/envoyproxy/go-control-plane/envoy/service/listener/v3"
	routeservice "github.com/envoyproxy/go-control-plane/envoy/service/route/v3"
	cache "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	xdslog "github.com/envoyproxy/go-control-plane/pkg/log"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/keepalive"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/config"
)

// Options configure a Server.
type Options struct {
	// Build tunes the generated resources.
	Build BuildOptions
	// TLS, when set, serves xDS over TLS with it (set ClientCAs and
	// ClientAuth for mTLS; see internal/tlsfiles.Server). nil serves plaintext.
	TLS *tls.Config
	// Logger receives reloads, rejected changes and NACKs; nil discards.
	Logger *slog.Logger
	// AdminToken, when not empty, is required ("Authorization: Bearer
	// <token>") of admin requests that change state (adminapi.Guard).
	AdminToken string
	// Clock stamps node status; nil is the wall clock.
	Clock clock.Clock
	// HandshakeTimeout bounds how long a new xDS connection may take to
	// finish its TLS handshake and HTTP/2 preface; one that sends part of
	// them and stalls is closed then. 0 is DefaultHandshakeTimeout (gRPC's
	// own default, 120 s, lets half-open connections pile up).
	HandshakeTimeout time.Duration
}

// DefaultHandshakeTimeout is Options.HandshakeTimeout's default.
const DefaultHandshakeTimeout = 5 * time.Second

// Server is the xDS control plane: it serves one snapshot to every Envoy
// node over ADS (and the per-type xDS services), rebuilding it when the
// mesh config is reloaded or the active experiment arm changes. Watching
// the mesh config file is its command's (cmd/llmesh/controlproc).
type Server struct {
	opts  Options
	log   *slog.Logger
	cache cache.SnapshotCache
	nodes *nodeTracker

	// mu guards everything below; publish holds it while building so that
	// versions are assigned in order.
	mu        sync.Mutex
	seq       int
	version   string
	file      *config.Config // the last config Reload was given (New's at first), before arm overrides
	cfg       *config.Config // file config with arm overrides applied
	snap      *cache.Snapshot
	overrides map[string]string // experiment → active arm set through the admin API
	lastErr   string            // the last rejected change, "" after a good one
	lastErrAt time.Time
	rejected  int
}

// meshNode is the one snapshot key: every node gets the same resources.
type meshNode struct{}

func (meshNode) ID(*core.Node) string { return "llmesh" }

// New builds the first snapshot from cfg, the mesh config (a file's, as
// loaded). An invalid initial config is an error (there is no last good
// one to serve).
func New(cfg *config.Config, opts Options) (*Server, error) {
	if cfg == nil {
		return nil, errors.New("control: a mesh config is required")
	}
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		opts:      opts,
		log:       log,
		cache:     cache.NewSnapshotCache(true, meshNode{}, xdsLogger(log)),
		nodes:     newNodeTracker(opts.Clock, log),
		overrides: map[string]string{},
	}
	if err := s.publish(cfg); err != nil {
		return nil, err
	}
	return s, nil
}

// Reload makes cfg (a changed mesh config file's) the served config, with
// the active-arm switches applied, and publishes a new version. A config
// that does not build is rejected (Reject) and returned; the last good
// snapshot stays.
func (s *Server) Reload(cfg *config.Config) error {
	if err := s.publish(cfg); err != nil {
		s.Reject(err)
		return err
	}
	return nil
}

// Reject records a config change that was not applied (a file that could
// not be read or loaded, or one Reload could not build): it is logged,
// counted and shown by GET /version until a later change is applied.
func (s *Server) Reject(err error) {
	s.mu.Lock()
	s.lastErr, s.lastErrAt = err.Error(), s.opts.Clock.Now()
	s.rejected++
	v := s.version
	s.mu.Unlock()
	s.log.Warn("config change rejected; still serving the last good snapshot", "version", v, "error", err)
}

// publish applies the admin overrides to a file config, builds, checks
// and installs a new snapshot version. On error nothing changes.
func (s *Server) publish(fileCfg *config.Config) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.file = fileCfg
	cfg, lapsed := fileCfg.WithActiveArms(s.overrides)
	for exp, err := range lapsed {
		// The file no longer has this experiment or arm: the switch lapses
		// rather than blocking every later change.
		s.log.Warn("dropping the active-arm switch", "experiment", exp, "arm", s.overrides[exp], "error", err)
		delete(s.overrides, exp)
	}
	return s.install(cfg)
}

// install builds and sets a snapshot for cfg; s.mu is held.
func (s *Server) install(cfg *config.Config) error {
	res, err := Build(cfg, s.opts.Build)
	if err != nil {
		return err
	}
	version := strconv.Itoa(s.seq+1) + "-" + Hash(res)
	snap, err := NewSnapshot(version, res)
	if err != nil {
		return err
	}
	if err := s.cache.SetSnapshot(context.Background(), meshNode{}.ID(nil), snap); err != nil {
		return fmt.Errorf("control: set snapshot: %w", err)
	}
	s.seq++
	s.version, s.cfg, s.snap = version, cfg, snap
	s.lastErr = ""
	s.log.Info("serving snapshot", "version", version)
	return nil
}

// Version is the version of the snapshot being served.
func (s *Server) Version() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.version
}

// Config is the config the served snapshot was built from (file config
// with active-arm switches applied).
func (s *Server) Config() *config.Config {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cfg
}

// Nodes reports every node's per-type ACK/NACK state.
func (s *Server) Nodes() []NodeStatus { return s.nodes.snapshot() }

// SetActiveArm makes arm of experiment exp take all traffic ("" sends
// traffic by headers and weights again, overriding the file's active
// field) and publishes a new version, which it returns. The switch
// survives file reloads until ClearActiveArm or until the file drops the
// experiment or arm.
func (s *Server) SetActiveArm(exp, arm string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	next, err := s.cfg.WithActiveArm(exp, arm)
	if err != nil {
		return "", err
	}
	if err := s.install(next); err != nil {
		return "", err
	}
	s.overrides[exp] = arm
	return s.version, nil
}

// ClearActiveArm drops the admin switch of exp, so the file's active field
// applies again, and publishes a new version.
func (s *Server) ClearActiveArm(exp string) (string, error) {
	s.mu.Lock()
	if _, ok := s.overrides[exp]; !ok {
		v := s.version
		s.mu.Unlock()
		return v, nil
	}
	delete(s.overrides, exp)
	file := s.file
	s.mu.Unlock()
	if err := s.publish(file); err != nil {
		return "", err
	}
	return s.Version(), nil
}

// Serve runs the xDS gRPC server on xdsLn until ctx ends (nil) or the
// listener fails (its error). It closes the listener and returns after the
// server has stopped. The admin API (AdminHandler) is served by the
// caller.
func (s *Server) Serve(ctx context.Context, xdsLn net.Listener) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	var gopts []grpc.ServerOption
	if s.opts.TLS != nil {
		gopts = append(gopts, grpc.Creds(credentials.NewTLS(s.opts.TLS)))
	}
	hto := s.opts.HandshakeTimeout
	if hto <= 0 {
		hto = DefaultHandshakeTimeout
	}
	gopts = append(gopts,
		grpc.ConnectionTimeout(hto),
		grpc.KeepaliveParams(keepalive.ServerParameters{Time: 30 * time.Second, Timeout: 5 * time.Second}),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 5 * time.Second, PermitWithoutStream: true}),
	)
	gs := grpc.NewServer(gopts...)
	xds := serverv3.NewServer(ctx, s.cache, s.nodes)
	discovery.RegisterAggregatedDiscoveryServiceServer(gs, xds)
	listenerservice.RegisterListenerDiscoveryServiceServer(gs, xds)
	routeservice.RegisterRouteDiscoveryServiceServer(gs, xds)
	clusterservice.RegisterClusterDiscoveryServiceServer(gs, xds)
	endpointservice.RegisterEndpointDiscoveryServiceServer(gs, xds)

	errc := make(chan error, 1)
	go func() { errc <- gs.Serve(xdsLn) }()
	select {
	case <-ctx.Done():
		// Stop, not GracefulStop: xDS streams never end on their own.
		gs.Stop()
		<-errc //nolint:errcheck // Serve's answer to Stop says nothing
		return nil
	case err := <-errc:
		gs.Stop()
		if err == nil || errors.Is(err, grpc.ErrServerStopped) {
			return nil
		}
		return fmt.Errorf("control: xds: %w", err)
	}
}

// xdsLogger routes go-control-plane's warnings and errors to log (its
// debug and info lines are per-request noise).
func xdsLogger(log *slog.Logger) xdslog.Logger {
	return xdslog.LoggerFuncs{
		WarnFunc:  func(f string, a ...any) { log.Warn("xds: " + fmt.Sprintf(f, a...)) },
		ErrorFunc: func(f string, a ...any) { log.Error("xds: " + fmt.Sprintf(f, a...)) },
	}
}
