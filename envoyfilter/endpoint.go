package envoyfilter

import (
	"net/netip"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"

	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/scheduler"
)

// StatOverrideFailed counts admissions bound to an endpoint that Envoy
// could not be told to use (SetUpstreamOverrideHost failed, or the endpoint
// is a host name: Envoy overrides by IP address only); such a request goes
// where the cluster's load balancer sends it.
const StatOverrideFailed = "llmesh.upstream_override_failed"

// routeToLease tells Envoy to send the request to the endpoint its lease is
// bound to, in strict mode: if that host is gone from the cluster Envoy
// answers 503 rather than sending the request to a replica the scheduler
// did not admit it to. It runs on the admission goroutine while the
// request is held, before Continue.
//
// A pool with one endpoint sets no override: there is nothing to choose.
// The SDK posts an override made off Envoy's worker thread to that thread
// and, in v1.36, with strict dropped (golang_filter.cc,
// Filter::setUpstreamOverrideHost); an admission that waited in the queue
// therefore gets a non-strict override, which Envoy still honours while
// the host is in the cluster with a status in the cluster's
// override_host_status (llmesh control sets it).
//
// A request with an upstream pick goes to the picked endpoint: the
// in-process scheduler bound its lease there (scheduler.Request.Pin); a
// shared scheduler service, whose wire does not carry the pin, may have
// bound it elsewhere, and then the lease counts against that endpoint.
func (f *streamFilter) routeToLease(dcb api.DecoderFilterCallbacks, l scheduler.Lease) {
	if f.pool == nil || len(f.pool.Endpoints) < 2 {
		return
	}
	ep := f.pin
	if ep == "" && l != nil {
		ep = scheduler.EndpointOf(l)
	}
	if ep == "" {
		return
	}
	if _, err := netip.ParseAddrPort(ep); err != nil {
		f.m.overrideFailed.Increment(1)
		return
	}
	if err := dcb.SetUpstreamOverrideHost(ep, true); err != nil {
		f.m.overrideFailed.Increment(1)
		api.LogDebugf("llmesh: upstream override %s: %v", ep, err)
	}
}

// upstreamPick is the endpoint a picker in front of the filter chose for
// the request (exchange.UpstreamPick): Envoy's dynamic metadata envoy.lb
// (set by an ext_proc filter earlier in the chain that received the
// picker's answer), else the x-gateway-destination-endpoint header; ""
// when there is none or the pool does not accept one
// (accept_upstream_pick). An error is the client's answer (400 malformed,
// 503 not one of the pool's endpoints).
func (f *streamFilter) upstreamPick(h exchange.Headers) (string, error) {
	if f.pool == nil || !f.pool.AcceptUpstreamPick {
		return "", nil
	}
	md, err := exchange.PickMetadata(f.cb.StreamInfo().DynamicMetadata().Get(exchange.PickNamespace))
	if err != nil {
		return "", err
	}
	return exchange.UpstreamPick(h, md, f.poolHas)
}

// poolHas reports whether addr is one of the pool's endpoints.
func (f *streamFilter) poolHas(addr string) bool {
	for _, e := range f.pool.Endpoints {
		if e.Address() == addr {
			return true
		}
	}
	return false
}
