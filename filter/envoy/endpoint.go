package envoy

import (
	"net/netip"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"

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
func (f *streamFilter) routeToLease(dcb api.DecoderFilterCallbacks, l scheduler.Lease) {
	if f.pool == nil || len(f.pool.Endpoints) < 2 {
		return
	}
	ep := scheduler.EndpointOf(l)
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
