package control

import (
	"testing"

	golang "github.com/envoyproxy/go-control-plane/contrib/envoy/extensions/filters/http/golang/v3alpha"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/llmesh/llmesh/filter/envoy"
)

// TestFilterAcceptsGeneratedConfig feeds the generated golang filter config
// to the llmesh Envoy filter's own parser, so control and filter cannot
// drift apart on the plugin config's shape.
func TestFilterAcceptsGeneratedConfig(t *testing.T) {
	cfg := loadExample(t)
	res, err := Build(cfg, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var gc golang.Config
	var m hcm.HttpConnectionManager
	ln := res[resource.ListenerType][0].(*listener.Listener)
	if err := ln.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&m); err != nil {
		t.Fatal(err)
	}
	if err := m.GetHttpFilters()[0].GetTypedConfig().UnmarshalTo(&gc); err != nil {
		t.Fatal(err)
	}
	if gc.GetPluginName() != PluginName || gc.GetLibraryId() != PluginName {
		t.Errorf("plugin %q library %q", gc.GetPluginName(), gc.GetLibraryId())
	}
	if got := m.GetMaxRequestHeadersKb().GetValue(); got != 8192 {
		t.Errorf("max_request_headers_kb = %d, want 8192 for 8 MiB relocation max", got)
	}
	fc, err := envoy.ParseSettings(gc.GetPluginConfig())
	if err != nil {
		t.Fatalf("the filter rejects the generated config: %v", err)
	}
	// Every pool a per-route config names exists in the filter's mesh, with
	// the arm's scheduler.
	rc := res[resource.RouteType][0].(*route.RouteConfiguration)
	pools := map[string]bool{}
	for _, r := range rc.GetVirtualHosts()[0].GetRoutes() {
		pools[r.GetRoute().GetCluster()] = true
		for _, c := range r.GetRoute().GetWeightedClusters().GetClusters() {
			pools[c.GetName()] = true
		}
	}
	delete(pools, "")
	for name := range pools {
		if fc.Mesh.Pool(name) == nil {
			t.Errorf("route pool %q missing from the filter's mesh", name)
		}
	}
	want := map[string]string{"sim.arm-fifo": "fifo", "sim.arm-preemptive": "preemptive"}
	for pool, policy := range want {
		if p := fc.Mesh.Pool(pool); p == nil || p.Scheduler.Policy != policy {
			t.Errorf("pool %s in the filter: %+v, want policy %s", pool, p, policy)
		}
	}
}
