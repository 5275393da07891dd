package gateway

import (
	"fmt"
	"net"
	"net/http"
	"net/url"

	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/scheduler"
)

// Endpoints: a pool may list its engine replicas (Pool.Endpoints). The
// scheduler binds each admission to one of them (scheduler.EndpointOf) and
// every upstream attempt of the request (the first, a requeue after
// preemption, a continuation) goes to the endpoint of the lease it holds at
// that moment, so a request requeued onto another replica follows its new
// lease. The pool's transport keeps one connection pool per endpoint
// address. A lease without an endpoint, or with one the pool does not list
// (a shared scheduler configured differently), goes to Pool.Upstream.

// compileEndpoints parses a pool's endpoint addresses; path is the pool's.
func compileEndpoints(path string, p Pool) (map[string]*url.URL, []error) {
	if len(p.Endpoints) == 0 {
		return nil, nil
	}
	var errs []error
	out := make(map[string]*url.URL, len(p.Endpoints))
	for j, addr := range p.Endpoints {
		host, port, err := net.SplitHostPort(addr)
		if err != nil || host == "" || port == "" {
			errs = append(errs, fmt.Errorf("%s.endpoints[%d]: %q must be host:port", path, j, addr))
			continue
		}
		if _, dup := out[addr]; dup {
			errs = append(errs, fmt.Errorf("%s.endpoints[%d]: duplicate endpoint %q", path, j, addr))
			continue
		}
		out[addr] = &url.URL{Scheme: "http", Host: addr}
	}
	return out, errs
}

// upstreamPick is the endpoint a picker in front of the gateway chose for
// the request (exchange.UpstreamPick: the x-gateway-destination-endpoint
// header), "" when there is none or the pool does not accept one; an error
// is the client's answer (400 malformed, 503 not one of the pool's
// endpoints).
func (p *compiledPool) upstreamPick(h http.Header) (string, error) {
	if !p.AcceptUpstreamPick {
		return "", nil
	}
	return exchange.UpstreamPick(h, "", p.hasEndpoint)
}

// hasEndpoint reports whether addr is one of the pool's endpoints (its
// upstream, for a pool of one).
func (p *compiledPool) hasEndpoint(addr string) bool {
	if p.endpoints != nil {
		return p.endpoints[addr] != nil
	}
	return p.url != nil && p.url.Host == addr
}

// routeToLease points req (a shallow copy about to be sent) at the
// endpoint of the exchange's current lease and returns it ("" when req
// goes to the pool's upstream). A request with an upstream pick goes to
// the picked endpoint: the in-process scheduler bound its lease there
// (scheduler.Request.Pin); a shared scheduler service, whose wire does not
// carry the pin, may have bound it elsewhere, and then the lease counts
// against that other endpoint.
func (x *clientExchange) routeToLease(req *http.Request) string {
	v := x.core.View()
	name := v.Request.Pin
	if name == "" && v.Lease != nil {
		name = scheduler.EndpointOf(v.Lease)
	}
	if name == "" || x.pool.endpoints == nil {
		return ""
	}
	u := x.pool.endpoints[name]
	if u == nil {
		return ""
	}
	out := *req.URL
	out.Scheme, out.Host = u.Scheme, u.Host
	req.URL = &out
	req.Host = u.Host
	return u.Host
}
