package control

import (
	"testing"

	"github.com/llmesh/llmesh/config"
)

// TestClusterHonoursOverride: a pool of several endpoints gets a cluster
// whose hosts of unknown health may be chosen by the filter's override; a
// pool of one is left as it was.
func TestClusterHonoursOverride(t *testing.T) {
	two := &config.Pool{Name: "p", Endpoints: []config.Endpoint{{Host: "10.0.0.1", Port: 1}, {Host: "10.0.0.2", Port: 1}}}
	c, _ := buildCluster("p", two)
	st := c.GetCommonLbConfig().GetOverrideHostStatus().GetStatuses()
	if len(st) != 3 || st[0].String() != "UNKNOWN" {
		t.Fatalf("override_host_status %v, want UNKNOWN, HEALTHY, DEGRADED", st)
	}
	one := &config.Pool{Name: "q", Endpoints: two.Endpoints[:1]}
	if c, _ := buildCluster("q", one); c.GetCommonLbConfig() != nil {
		t.Fatalf("one-endpoint pool got common_lb_config %v", c.GetCommonLbConfig())
	}
}
