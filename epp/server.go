package epp

import (
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/exchange/relocate"
	"github.com/llmesh/llmesh/scheduler"
)

// DefaultMaxBodyBytes bounds a request body the picker accumulates.
const DefaultMaxBodyBytes = 16 << 20

// Config configures a Server.
type Config struct {
	// Mesh is the compiled mesh config: its pools' endpoints are what the
	// picker picks from, its listener's routes choose the pool, its
	// classification the class. Required.
	Mesh *config.Config
	// Listener names the mesh listener whose routes are used; "" means
	// the first.
	Listener string
	// Admitter admits requests (the in-process scheduler built from Mesh,
	// scheduler/pools.NewMesh). Required.
	Admitter scheduler.Admitter
	// Stats, when set, reports the pools' endpoints; a drained endpoint is
	// not ready, and a subset pick goes to the least loaded ready endpoint
	// of the subset when the scheduler's own pick is outside it. nil:
	// every endpoint of the mesh is ready.
	Stats func() []scheduler.PoolStats
	// Classifier classifies requests; nil builds one from Mesh.
	Classifier *exchange.Classifier
	// MaxBodyBytes bounds the request body; 0 means DefaultMaxBodyBytes.
	MaxBodyBytes int64
	// FailOpen picks an endpoint without admission when the scheduler is
	// unavailable or closed (round robin over the ready endpoints) instead
	// of answering 503.
	FailOpen bool
	// BodyMode is the request and response body mode assumed for streams
	// whose first message carries no protocol_config (Envoy sends it from
	// v1.34 on); the zero value (NONE) means FULL_DUPLEX_STREAMED, the mode
	// the inference extension's gateways use.
	BodyMode filterv3.ProcessingMode_BodySendMode
	// OnRelocated is called once per prompt the picker moved from a
	// header or gRPC metadata into the body (the mesh's relocation), with
	// its kind (relocate.KindGRPC, relocate.KindHTTP) and size; nil does
	// nothing. It runs on the stream's goroutine.
	OnRelocated relocate.OnRelocated
	// Clock measures and timestamps; nil means the real clock.
	Clock clock.Clock
	// Logger logs rejected streams at debug level; nil means slog's default.
	Logger *slog.Logger
	// OnDone, when set, gets every request's record once its lease is
	// released (or its stream ended without one). It runs on the stream's
	// goroutine.
	OnDone func(Record)
}

// Record is what the picker learned about one request.
type Record struct {
	Pool, Class string
	// Model is the request body's model ("" when not parsed).
	Model string
	// Endpoint is the picked endpoint; Served the one the data plane
	// reported as serving it ("" when it did not say).
	Endpoint, Served string
	// Admitted is false when the request got a reply from the picker
	// itself (Status is then that reply's status) or picked fail-open.
	Admitted bool
	Status   int
	Outcome  scheduler.Outcome
	// Preemptions counts the scheduler's preemptions of the request: a
	// requeue before the pick went out, and the preemption that ended it.
	Preemptions int
	// Observation is the stream observer's measurement of the response.
	Observation exchange.Observation
}

// Server is the ext_proc server. Register it with Register.
type Server struct {
	extprocv3.UnimplementedExternalProcessorServer

	cfg    Config
	clk    clock.Clock
	log    *slog.Logger
	routes *exchange.Routes[*poolInfo]
	cls    *exchange.Classifier
	// reloc relocates prompts per the mesh's relocation section; nil
	// when it has no rule.
	reloc  *relocate.Relocator
	pools  map[string]*poolInfo
	health *health.Server
	seq    atomic.Uint64
	rr     atomic.Uint64
	// xcfg is every stream's lifecycle configuration: the picker
	// classifies itself (the objective header) and hands the core its
	// class as the route class; the core records nothing (OnDone reports).
	xcfg exchange.ExchangeConfig
	// misuses counts lifecycle calls a stream's state refused
	// (exchange.ExchangeConfig.Misuse), each a picker bug; tests require
	// none.
	misuses atomic.Int64
	// preempted counts requests stopped by a preemption after their pick.
	preempted atomic.Int64
}

var _ extprocv3.ExternalProcessorServer = (*Server)(nil)

// poolInfo is one mesh pool as the picker sees it.
type poolInfo struct {
	pool      *config.Pool
	endpoints []string                 // ip:port, configuration order
	live      atomic.Pointer[[]string] // set by SetEndpoints (endpoints.go); nil: endpoints
}

// New validates cfg and returns a Server. Errors name the field.
func New(cfg Config) (*Server, error) {
	var errs []error
	if cfg.Mesh == nil {
		errs = append(errs, errors.New("epp: Mesh: required"))
	}
	if cfg.Admitter == nil {
		errs = append(errs, errors.New("epp: Admitter: required"))
	}
	if cfg.MaxBodyBytes < 0 {
		errs = append(errs, fmt.Errorf("epp: MaxBodyBytes: %d must not be negative", cfg.MaxBodyBytes))
	}
	switch cfg.BodyMode {
	case filterv3.ProcessingMode_NONE, filterv3.ProcessingMode_BUFFERED, filterv3.ProcessingMode_STREAMED,
		filterv3.ProcessingMode_FULL_DUPLEX_STREAMED:
	default:
		errs = append(errs, fmt.Errorf("epp: BodyMode: %v is not supported (BUFFERED, STREAMED or FULL_DUPLEX_STREAMED)", cfg.BodyMode))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, clk: cfg.Clock, log: cfg.Logger, cls: cfg.Classifier, pools: map[string]*poolInfo{}}
	if s.clk == nil {
		s.clk = clock.Real{}
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	if s.cfg.MaxBodyBytes == 0 {
		s.cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if s.cfg.BodyMode == filterv3.ProcessingMode_NONE {
		s.cfg.BodyMode = filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
	}
	s.xcfg.Misuse = func(call string, st exchange.State) {
		s.misuses.Add(1)
		s.log.Error("epp: request lifecycle call refused", "call", call, "state", st.String())
	}
	m := cfg.Mesh
	var listener *config.Listener
	switch {
	case cfg.Listener != "":
		if listener = m.Listener(cfg.Listener); listener == nil {
			return nil, fmt.Errorf("epp: Listener: no listener named %q in the mesh config", cfg.Listener)
		}
	case len(m.Listeners) > 0:
		listener = m.Listeners[0]
	}
	if len(m.Pools) == 0 {
		return nil, errors.New("epp: Mesh: pools: at least one pool is required")
	}
	for i, p := range m.Pools {
		if len(p.Endpoints) == 0 {
			return nil, fmt.Errorf("epp: pools[%d].endpoints: pool %q has no endpoint to pick", i, p.Name)
		}
		pi := &poolInfo{pool: p}
		for _, e := range p.Endpoints {
			pi.endpoints = append(pi.endpoints, e.Address())
		}
		s.pools[p.Name] = pi
	}
	// The listener's routes choose the pool; without a listener every
	// request goes to the first pool.
	if listener != nil {
		s.routes = exchange.NewRoutes(exchange.ListenerRules(listener, func(p *config.Pool) *poolInfo { return s.pools[p.Name] }), nil, nil, nil)
	} else {
		first := s.pools[m.Pools[0].Name]
		s.routes = exchange.NewRoutes(nil, first, first, nil)
	}
	if s.cls == nil {
		c, err := exchange.NewClassifierFromConfig(m)
		if err != nil {
			return nil, fmt.Errorf("epp: classification: %w", err)
		}
		s.cls = c
	}
	// The core classifies with the class the picker decided as the route
	// class (which wins over every other source), so its class is the
	// picker's; it needs the classifier for the engine-priority guard's
	// decision (who may set a priority).
	s.xcfg.Classifier = s.cls
	if m.Relocation.Enabled() {
		rel, err := relocate.FromConfig(m.Relocation)
		if err != nil {
			return nil, fmt.Errorf("epp: %w", err)
		}
		s.reloc = rel
		// A relocated llm.v1 message may be as large as the relocation
		// allows; the guard checks it up to that size, as in the Envoy
		// filter host.
		s.xcfg.GuardMaxMessage = m.Relocation.MaxMessage
	}
	s.health = health.NewServer()
	for _, name := range HealthServices {
		s.health.SetServingStatus(name, healthpb.HealthCheckResponse_SERVING)
	}
	return s, nil
}

// HealthServices are the gRPC health services the picker answers, as the
// endpoint picker protocol names them ("" is the server as a whole).
var HealthServices = []string{"", "liveness", "readiness", extprocv3.ExternalProcessor_ServiceDesc.ServiceName}

// Register registers the ext_proc service and the gRPC health service on g.
func (s *Server) Register(g *grpc.Server) {
	extprocv3.RegisterExternalProcessorServer(g, s)
	healthpb.RegisterHealthServer(g, s.health)
}

// Shutdown marks the picker not ready (readiness and ext_proc health say
// NOT_SERVING; liveness stays SERVING), so gateways stop sending new
// requests before the server stops.
func (s *Server) Shutdown() {
	for _, name := range HealthServices {
		if name != "liveness" {
			s.health.SetServingStatus(name, healthpb.HealthCheckResponse_NOT_SERVING)
		}
	}
}

// Process implements the ext_proc service: one stream per HTTP request.
func (s *Server) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	st := newStream(s, srv)
	return st.run()
}

// route resolves the pool of a request (exchange.Routes.Select): the
// listener's route, or the first pool when the mesh has no listener.
// routeClass is the route's class.
func (s *Server) route(path string, header func(string) string, grpcReq bool) (pi *poolInfo, routeClass string, ok bool) {
	r, ok := s.routes.Select(path, header, grpcReq)
	return r.Pool, r.Class, ok
}

// ready returns the ready endpoints of pi among want (all of pi's when
// want is nil) and each one's load (in flight / limit; 0 without Stats).
func (s *Server) ready(pi *poolInfo, want []string) (eps []string, load []float64) {
	var stats []scheduler.EndpointStats
	if s.cfg.Stats != nil {
		for _, ps := range s.cfg.Stats() {
			if ps.Name == pi.pool.Name {
				stats = ps.Endpoints
				break
			}
		}
	}
	in := func(ep string) bool {
		if want == nil {
			return true
		}
		for _, w := range want {
			if w == ep {
				return true
			}
		}
		return false
	}
	for _, ep := range pi.current() {
		if !in(ep) {
			continue
		}
		l := 0.0
		drained := false
		for _, es := range stats {
			if es.Name == ep {
				drained = es.Drained
				if es.Limit > 0 {
					l = float64(es.InFlight) / float64(es.Limit)
				}
			}
		}
		if drained {
			continue
		}
		eps = append(eps, ep)
		load = append(load, l)
	}
	return eps, load
}

func (s *Server) nextID() string { return "epp-" + strconv.FormatUint(s.seq.Add(1), 10) }

func (s *Server) now() time.Time { return s.clk.Now() }
