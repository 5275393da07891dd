package control

import (
	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"

	"github.com/llmesh/llmesh/config"
)

// honourOverride makes a pool's cluster honour the filter's upstream host
// override (SetUpstreamOverrideHost), for pools of several endpoints where
// the scheduler binds each admission to one of them. Envoy selects an
// override host before the cluster's load balancer runs when the host is
// in the cluster and its health status is in override_host_status; an
// empty set would make Envoy ignore every override. The set is spelled out
// (it is Envoy's default today) so that the dependency is explicit and
// survives a change of default: hosts of unknown health (no health
// checking, the usual case) must be selectable.
func honourOverride(c *cluster.Cluster, p *config.Pool) {
	if len(p.Endpoints) < 2 {
		return
	}
	if c.CommonLbConfig == nil {
		c.CommonLbConfig = &cluster.Cluster_CommonLbConfig{}
	}
	c.CommonLbConfig.OverrideHostStatus = &core.HealthStatusSet{Statuses: []core.HealthStatus{
		core.HealthStatus_UNKNOWN, core.HealthStatus_HEALTHY, core.HealthStatus_DEGRADED,
	}}
}
