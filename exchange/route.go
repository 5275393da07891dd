package exchange

import (
	"math/rand/v2"

	"github.com/llmesh/llmesh/config"
)

// Routes is a host's compiled route table: the one route → pool → class
// selection every host runs (the gateway, the Envoy filter and the endpoint
// picker). P is the host's own compiled pool; its zero value means "no
// pool". A Routes is immutable after NewRoutes; share it between requests.
type Routes[P comparable] struct {
	rules      []compiledRule[P]
	http, grpc P
	draw       func() float64
}

// RouteRule is one route of a table, in the order routes are tried.
type RouteRule[P comparable] struct {
	// Match is the rule the route matches requests by
	// (config.RouteMatch.Matches).
	Match config.RouteMatch
	// Pool serves the route's requests.
	Pool P
	// Class is the class the route fixes, "" to leave it to the
	// classifier.
	Class string
	// Generation lists the route's generation paths (newGenerations); nil
	// means defaultGenerationPaths.
	Generation []string
	// Experiment, when non-nil, splits the route's traffic over Arms: the
	// arm config.Experiment.Pick chooses serves the request. nil sends
	// every request to Pool.
	Experiment *config.Experiment
	Arms       map[*config.Arm]P
}

type compiledRule[P comparable] struct {
	RouteRule[P]
	gen *Generations
}

// Selection is what a table chose for one request.
type Selection[P comparable] struct {
	// Pool serves the request; never the zero P in a selection Select
	// returned with ok.
	Pool P
	// Class is the class the route fixes, "" when none (or no route
	// matched and a default pool serves the request).
	Class string
	// Generations says which of the route's requests are generations (nil:
	// the defaults).
	Generations *Generations
	// Matched: a route matched (else a default pool serves the request).
	Matched bool
}

// NewRoutes compiles rules into a table. httpPool and grpcPool serve the
// HTTP and gRPC requests no route takes; the zero P leaves them
// unrouted. draw returns a uniform number in [0, 1) for an experiment's
// weighted arm choice; nil means math/rand/v2's Float64.
func NewRoutes[P comparable](rules []RouteRule[P], httpPool, grpcPool P, draw func() float64) *Routes[P] {
	t := &Routes[P]{rules: make([]compiledRule[P], len(rules)), http: httpPool, grpc: grpcPool, draw: draw}
	if t.draw == nil {
		t.draw = rand.Float64
	}
	for i, r := range rules {
		t.rules[i] = compiledRule[P]{RouteRule: r, gen: newGenerations(r.Generation)}
	}
	return t
}

// Select chooses the route of a request with this path, headers (header
// returns a header's value, "" when absent) and protocol (grpc: a gRPC
// request): the first route that matches, its experiment's arm when it
// has one; else the default pool of the request's protocol. ok is false
// when nothing serves the request (no route matched and no default pool,
// or the chosen pool or arm is the zero P).
func (t *Routes[P]) Select(path string, header func(name string) string, grpc bool) (s Selection[P], ok bool) {
	var zero P
	for i := range t.rules {
		r := &t.rules[i]
		if !r.Match.Matches(path, header, grpc) {
			continue
		}
		s = Selection[P]{Pool: r.Pool, Class: r.Class, Generations: r.gen, Matched: true}
		if r.Experiment != nil {
			s.Pool = r.Arms[r.Experiment.Pick(header, t.draw())]
		}
		return s, s.Pool != zero
	}
	s.Pool = t.http
	if grpc {
		s.Pool = t.grpc
	}
	return s, s.Pool != zero
}

// ListenerRules are the routes of a mesh listener with each route's pool
// mapped to the host's (pool returns the zero P for a pool the host does
// not serve). Experiments are left out: hosts behind the mesh's control
// plane get an experiment's split from Envoy's weighted clusters, whose
// per-route config names the arm's pool.
func ListenerRules[P comparable](l *config.Listener, pool func(*config.Pool) P) []RouteRule[P] {
	if l == nil {
		return nil
	}
	out := make([]RouteRule[P], 0, len(l.Routes))
	for _, r := range l.Routes {
		rule := RouteRule[P]{Match: r.Match(), Generation: r.Generation}
		if r.Pool != nil {
			rule.Pool = pool(r.Pool)
		}
		if r.Class != nil {
			rule.Class = r.Class.Name
		}
		out = append(out, rule)
	}
	return out
}

// affinity is the request's affinity key for the scheduler: the value of
// the pool's affinity header (name), "" when the pool has none.
func affinity(name string, h Headers) string {
	if name == "" || h == nil {
		return ""
	}
	return h.Get(name)
}
