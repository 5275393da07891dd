package gateway

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/exchange"
)

// Protocol is how the gateway talks to a pool's upstream.
type Protocol string

const (
	// OpenAI is OpenAI-compatible HTTP (HTTP/1.1 upstream connections).
	OpenAI Protocol = "openai"
	// GRPC is gRPC over cleartext HTTP/2 (h2c with prior knowledge).
	GRPC Protocol = "grpc"
)

// Pool is one upstream the gateway forwards to.
type Pool struct {
	// Name is what routes refer to.
	Name string
	// Protocol picks the upstream transport; empty means OpenAI.
	Protocol Protocol
	// Upstream is the base URL (scheme http, host:port). Request paths are
	// appended to its path.
	Upstream string
	// PassAcceptEncoding forwards the client's Accept-Encoding to an OpenAI
	// upstream. By default the gateway asks for identity: a gzipped stream
	// could only be counted, not observed (no TTFT, tokens or usage).
	PassAcceptEncoding bool
	// ClassPriority writes the request's class priority into the engine
	// priority of its body (OpenAI "priority", llm.v1
	// GenerateRequest.priority) unless the source is trusted for priority,
	// for engines that schedule by it (config engine_priority: class);
	// false removes the client's value instead. An experiment's arm pools
	// follow the pool its route names.
	ClassPriority bool
	// Experiment and Arm name the experiment arm this pool carries (see
	// Route.Experiment); both are empty for an ordinary pool. Requests
	// routed to an arm pool answer with the ArmHeader response header, and
	// their Record's Pool names the arm pool.
	Experiment string
	Arm        string
	// Endpoints are the pool's engine replicas (host:port). A request goes
	// to the endpoint its scheduler lease is bound to (endpoint.go); empty,
	// or a lease naming no listed endpoint, means Upstream.
	Endpoints []string
	// AffinityHeader names the request header whose value is the
	// scheduler's affinity key (scheduler.Request.Affinity); empty means
	// none.
	AffinityHeader string
	// PrefixRouting: the pool's scheduler picks endpoints by prefix
	// (mesh pools[].prefix_routing), so the gateway names each prompt's
	// leading blocks (exchange.RequestMeta.Blocks) for it.
	PrefixRouting bool
	// Resume is what happens to a stream of this pool preempted after it
	// sent bytes to the client; empty means ResumeContinue.
	Resume Resume
	// AcceptUpstreamPick: a request that arrives with an endpoint picked
	// by an endpoint picker in front of the gateway goes there
	// (endpoint.go; mesh pools[].accept_upstream_pick).
	AcceptUpstreamPick bool
}

// Resume is a pool's handling of mid-stream preemption (mesh config
// pools[].preemption.resume).
type Resume string

const (
	// ResumeContinue continues a preempted OpenAI stream with a
	// continuation request and checks that the engine continued (splice.go);
	// streams that cannot be continued end as with ResumeRequeue.
	ResumeContinue Resume = "continue"
	// ResumeRequeue ends a preempted stream that sent bytes with a
	// retryable error event (gRPC: UNAVAILABLE).
	ResumeRequeue Resume = "requeue"
	// ResumeOff: a stream that sent a byte ignores preemption and runs to
	// its end; before its first byte it is requeued as with every mode.
	ResumeOff Resume = "off"
)

// Route sends matching requests to a pool in a class. Routes are tried in
// order; the first match wins.
type Route struct {
	// PathPrefix matches the request path; empty matches every path.
	PathPrefix string
	// Headers must all be present with these exact values; nil matches all.
	Headers map[string]string
	// GRPC restricts the route to gRPC requests (content-type
	// application/grpc) when true, and to non-gRPC requests when false and
	// AnyProtocol is unset.
	GRPC bool
	// AnyProtocol makes the route match gRPC and HTTP requests alike.
	AnyProtocol bool
	// Pool is the target pool's name.
	Pool string
	// Class is the scheduling class for requests of this route; empty
	// leaves the choice to the classifier (or the default class).
	Class string
	// Experiment, when non-nil, splits the route's traffic over the
	// experiment's arms: each request goes to the pool named
	// config.ArmPoolName(Pool, arm) for the arm Experiment.Pick chooses
	// (active arm, else header match, else a weighted draw), which must be
	// defined. nil sends every request to Pool.
	Experiment *config.Experiment
	// Generation lists the request paths that are generation calls on
	// this route (scheduled and measured as generations); other requests
	// are proxied without admission and recorded apart (Record.Passthrough).
	// nil: the defaults (exchange.Generations).
	Generation []string
}

// ArmHeader is the response header naming the experiment arm that served
// a request (absent for pools without an experiment).
const ArmHeader = "X-Llmesh-Arm"

// Config is the gateway's runtime configuration. The zero value of each
// optional field picks the default documented on it.
type Config struct {
	// Pools are the upstreams; at least one.
	Pools []Pool
	// Routes map requests to pools. With no routes, HTTP requests go to the
	// first OpenAI pool and gRPC requests to the first gRPC pool.
	Routes []Route
	// MaxRequestBytes bounds request bodies (413 / RESOURCE_EXHAUSTED
	// beyond it); 0 means 16 MiB.
	MaxRequestBytes int64
	// StreamIdleTimeout ends an upstream response that sends nothing for
	// this long (the client gets an error event or gRPC UNAVAILABLE); 0
	// means 5 minutes, negative disables it.
	StreamIdleTimeout time.Duration
	// ServerTiming adds a server-timing header (queue time) and trailer
	// (queue, upstream TTFT, TTFT, TPOT, E2E) to responses.
	ServerTiming bool
	// DefaultClass names the class of requests that neither a route nor
	// the classifier placed; empty means "default".
	DefaultClass string
	// PreemptibleClasses lists the classes whose requests may be preempted
	// and so are tracked for continuation; nil means every class.
	PreemptibleClasses map[string]bool
	// MaxHeaderBytes bounds the client-facing request headers, for
	// HTTP/1.1 and h2c alike (net/http advertises it as HTTP/2's
	// SETTINGS_MAX_HEADER_LIST_SIZE); 0 means net/http's 1 MiB. Relocation
	// needs more: prompts arrive in headers before they are moved into the
	// body. Serve reads it once; a reload does not change it.
	MaxHeaderBytes int
	// DropHeaders are request headers never forwarded upstream, such as the
	// classification's trusted marker: a shared secret between the trusted
	// front and the gateway that an engine (or its logs) must not see.
	DropHeaders []string
	// Limits bound what clients can hold (limits.go).
	Limits Limits
}

const (
	defaultMaxRequestBytes   = 16 << 20
	defaultStreamIdleTimeout = 5 * time.Minute
)

// compiledPool is a validated pool with its parsed URL.
type compiledPool struct {
	Pool
	url       *url.URL
	endpoints map[string]*url.URL // by address; nil without Endpoints
}

// compiled is the validated, defaulted form of Config that requests read
// through an atomic pointer.
type compiled struct {
	cfg      Config
	pools    map[string]*compiledPool
	routes   *exchange.Routes[*compiledPool]
	httpPool *compiledPool // default for HTTP requests when no route matches
	grpcPool *compiledPool // default for gRPC requests when no route matches
}

// compile validates cfg, applies defaults and returns the runtime form.
// Errors name the field path and the bad value, all at once. draw is the
// uniform [0, 1) source of weighted arm choices (nil: math/rand/v2).
func compile(cfg Config, draw func() float64) (*compiled, error) {
	var errs []error
	c := &compiled{cfg: cfg, pools: map[string]*compiledPool{}}
	rules := make([]exchange.RouteRule[*compiledPool], 0, len(cfg.Routes))
	if len(cfg.Pools) == 0 {
		errs = append(errs, errors.New("pools: at least one pool is required"))
	}
	for i, p := range cfg.Pools {
		path := fmt.Sprintf("pools[%d]", i)
		if p.Name == "" {
			errs = append(errs, fmt.Errorf("%s.name: must not be empty", path))
		} else if _, dup := c.pools[p.Name]; dup {
			errs = append(errs, fmt.Errorf("%s.name: %q is defined twice", path, p.Name))
		}
		switch p.Protocol {
		case "":
			p.Protocol = OpenAI
		case OpenAI, GRPC:
		default:
			errs = append(errs, fmt.Errorf("%s.protocol: %q must be openai or grpc", path, p.Protocol))
		}
		switch p.Resume {
		case "":
			p.Resume = ResumeContinue
		case ResumeContinue, ResumeRequeue, ResumeOff:
		default:
			errs = append(errs, fmt.Errorf("%s.resume: %q must be continue, requeue or off", path, p.Resume))
		}
		u, err := parseUpstream(p.Upstream)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s.upstream: %w", path, err))
			continue
		}
		eps, epErrs := compileEndpoints(path, p)
		errs = append(errs, epErrs...)
		cp := &compiledPool{Pool: p, url: u, endpoints: eps}
		c.pools[p.Name] = cp
		if p.Protocol == GRPC && c.grpcPool == nil {
			c.grpcPool = cp
		}
		if p.Protocol == OpenAI && c.httpPool == nil {
			c.httpPool = cp
		}
	}
	for i, r := range cfg.Routes {
		if _, ok := c.pools[r.Pool]; !ok {
			errs = append(errs, fmt.Errorf("routes[%d].pool: %q is not a defined pool", i, r.Pool))
		}
		if r.PathPrefix != "" && !strings.HasPrefix(r.PathPrefix, "/") {
			errs = append(errs, fmt.Errorf("routes[%d].path_prefix: %q must start with /", i, r.PathPrefix))
		}
		rule := exchange.RouteRule[*compiledPool]{Pool: c.pools[r.Pool], Class: r.Class, Generation: r.Generation,
			Match: config.RouteMatch{PathPrefix: r.PathPrefix, Headers: r.Headers, GRPC: r.GRPC, AnyProtocol: r.AnyProtocol}}
		for k, p := range r.Generation {
			if !strings.HasPrefix(p, "/") {
				errs = append(errs, fmt.Errorf("routes[%d].generation[%d]: %q must start with /", i, k, p))
			}
		}
		if e := r.Experiment; e != nil {
			if len(e.Arms) == 0 {
				errs = append(errs, fmt.Errorf("routes[%d].experiment: %q has no arms", i, e.Name))
			}
			rule.Experiment, rule.Arms = e, map[*config.Arm]*compiledPool{}
			for _, a := range e.Arms {
				name := config.ArmPoolName(r.Pool, a.Name)
				p, ok := c.pools[name]
				if !ok {
					errs = append(errs, fmt.Errorf("routes[%d].experiment: arm %q needs pool %q, which is not defined", i, a.Name, name))
					continue
				}
				rule.Arms[a] = p
			}
		}
		rules = append(rules, rule)
	}
	if cfg.MaxHeaderBytes < 0 {
		errs = append(errs, fmt.Errorf("max_header_bytes: %d must not be negative", cfg.MaxHeaderBytes))
	}
	if cfg.MaxRequestBytes < 0 {
		errs = append(errs, fmt.Errorf("max_request_bytes: %d must not be negative", cfg.MaxRequestBytes))
	}
	if c.cfg.MaxRequestBytes == 0 {
		c.cfg.MaxRequestBytes = defaultMaxRequestBytes
	}
	if c.cfg.DefaultClass == "" {
		c.cfg.DefaultClass = "default"
	}
	if c.cfg.StreamIdleTimeout == 0 {
		c.cfg.StreamIdleTimeout = defaultStreamIdleTimeout
	}
	errs = append(errs, validateLimits(cfg.Limits)...)
	c.cfg.Limits = cfg.Limits.withDefaults()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("gateway config: %w", err)
	}
	c.routes = exchange.NewRoutes(rules, c.httpPool, c.grpcPool, draw)
	return c, nil
}

func parseUpstream(s string) (*url.URL, error) {
	if s == "" {
		return nil, errors.New("must not be empty")
	}
	if !strings.Contains(s, "://") {
		s = "http://" + s
	}
	u, err := url.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("%q is not a URL: %w", s, err)
	}
	if u.Scheme != "http" {
		return nil, fmt.Errorf("%q: scheme must be http (cleartext upstreams only)", s)
	}
	if u.Host == "" {
		return nil, fmt.Errorf("%q: host must not be empty", s)
	}
	return u, nil
}

// match picks the route for a request (exchange.Routes.Select); ok is
// false when nothing matches and no default pool serves the request's
// protocol.
func (c *compiled) match(path string, header func(string) string, isGRPC bool) (pool *compiledPool, class string, gen *exchange.Generations, ok bool) {
	s, ok := c.routes.Select(path, header, isGRPC)
	return s.Pool, s.Class, s.Generations, ok
}
