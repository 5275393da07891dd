package control

import (
	"bytes"
	"testing"

	golang "github.com/envoyproxy/go-control-plane/contrib/envoy/extensions/filters/http/golang/v3alpha"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/envoyfilter"
	"github.com/llmesh/llmesh/envoyfilter/settings"
	"github.com/llmesh/llmesh/exchange"
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
	_, m, gc := listenerFilter(t, res)
	if gc.GetPluginName() != PluginName || gc.GetLibraryId() != PluginName {
		t.Errorf("plugin %q library %q", gc.GetPluginName(), gc.GetLibraryId())
	}
	if got := m.GetMaxRequestHeadersKb().GetValue(); got != 8192 {
		t.Errorf("max_request_headers_kb = %d, want 8192 for 8 MiB relocation max", got)
	}
	fc, err := envoyfilter.ParseSettings(gc.GetPluginConfig())
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
	// Every per-route config reads back through the filter's decoder and
	// names a pool (and class) of the filter's mesh.
	perRoute := 0
	for _, r := range rc.GetVirtualHosts()[0].GetRoutes() {
		cfgs := []*anypb.Any{r.GetTypedPerFilterConfig()[GolangFilterName]}
		for _, c := range r.GetRoute().GetWeightedClusters().GetClusters() {
			cfgs = append(cfgs, c.GetTypedPerFilterConfig()[GolangFilterName])
		}
		for _, pf := range cfgs {
			if pf == nil {
				continue
			}
			var cpr golang.ConfigsPerRoute
			if err := pf.UnmarshalTo(&cpr); err != nil {
				t.Fatal(err)
			}
			rs, err := settings.DecodeRoute(cpr.GetPluginsConfig()[PluginName].GetConfig())
			if err != nil {
				t.Fatalf("the filter rejects a generated per-route config: %v", err)
			}
			perRoute++
			if fc.Mesh.Pool(rs.Pool) == nil {
				t.Errorf("per-route pool %q missing from the filter's mesh", rs.Pool)
			}
			if rs.Class != "" && fc.Mesh.Class(rs.Class) == nil {
				t.Errorf("per-route class %q missing from the filter's mesh", rs.Class)
			}
		}
	}
	if perRoute == 0 {
		t.Error("no per-route config in the example's routes")
	}
	want := map[string]string{"sim.arm-fifo": "fifo", "sim.arm-preemptive": "preemptive"}
	for pool, policy := range want {
		if p := fc.Mesh.Pool(pool); p == nil || p.Scheduler.Policy != policy {
			t.Errorf("pool %s in the filter: %+v, want policy %s", pool, p, policy)
		}
	}
}

// TestFilterReadsMeshFields: settings that exist only in the mesh file
// (preemption target, the priority header's trusted marker, relocation
// limits) reach the Envoy filter unchanged, including an arm's override in
// the arm's own pool.
func TestFilterReadsMeshFields(t *testing.T) {
	cfg, err := config.Load([]byte(`
listeners:
  - name: main
    address: 127.0.0.1:10000
    routes: [{pool: gpu}]
pools:
  - name: gpu
    protocol: grpc
    endpoints: [127.0.0.1:9000]
    scheduler: {policy: preemptive, preemption: {target: 0.75}}
classes:
  - {name: interactive, priority: 0, slo: {ttft: 300ms}}
  - {name: batch, priority: 10, preemptible: true}
default_class: batch
classification:
  priority_header:
    name: x-llmesh-class
    trusted_marker: {header: x-edge-verified, value: edge-7f0c}
relocation:
  grpc: [{metadata: x-prompt-raw, field: 2, max: 20971520}]
  http: [{header: x-prompt, threshold: 1024, max: 2048}]
  max_message: 41943040
  max_body: 4096
experiments:
  - name: ab
    pool: gpu
    arms: [{name: eager, scheduler: {preemption: {target: 0.5}}}, {name: base}]
`))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Build(cfg, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, _, gc := listenerFilter(t, res)
	fc, err := envoyfilter.ParseSettings(gc.GetPluginConfig())
	if err != nil {
		t.Fatalf("the filter rejects the generated config: %v", err)
	}
	fm := fc.Mesh
	for pool, want := range map[string]float64{"gpu": 0.75, "gpu.arm-eager": 0.5, "gpu.arm-base": 0.75} {
		if p := fm.Pool(pool); p == nil || p.Scheduler.Preemption.Target != want {
			t.Errorf("pool %s in the filter: %+v, want preemption target %v", pool, p, want)
		}
	}
	c := fm.Classification
	if c.TrustedMarkerHeader != "x-edge-verified" || !c.Marked("edge-7f0c") {
		t.Errorf("trusted marker in the filter: header %q, marked %v", c.TrustedMarkerHeader, c.Marked("edge-7f0c"))
	}
	if r := fm.Relocation; r.MaxMessage != 40<<20 || r.MaxBody != 4096 {
		t.Errorf("relocation limits in the filter: max_message %d max_body %d", r.MaxMessage, r.MaxBody)
	}
}

// TestXDSCarriesNoSecrets: the API keys and the trusted marker reach the
// Envoy filter as SHA-256 hashes only, and the filter still honours the
// key and the marker a request carries.
func TestXDSCarriesNoSecrets(t *testing.T) {
	cfg, err := config.Load([]byte(`
listeners:
  - name: main
    address: 127.0.0.1:10000
    routes: [{pool: gpu}]
pools:
  - {name: gpu, protocol: openai, endpoints: [127.0.0.1:9000]}
classes:
  - {name: premium, priority: 0}
  - {name: batch, priority: 10}
default_class: batch
classification:
  api_keys: {sk-live-4f9a2c: premium}
  priority_header:
    name: x-llmesh-class
    trusted_marker: {header: x-edge-verified, value: edge-marker-77d1}
`))
	if err != nil {
		t.Fatal(err)
	}
	res, err := Build(cfg, BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ln, _, gc := listenerFilter(t, res)
	wire, err := proto.Marshal(ln)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"sk-live-4f9a2c", "edge-marker-77d1"} {
		if bytes.Contains(wire, []byte(secret)) {
			t.Errorf("the Listener pushed over xDS contains the secret %q", secret)
		}
	}
	fc, err := envoyfilter.ParseSettings(gc.GetPluginConfig())
	if err != nil {
		t.Fatalf("the filter rejects the generated config: %v", err)
	}
	c := fc.Mesh.Classification
	if !c.Marked("edge-marker-77d1") || c.Marked("edge-marker-77d2") || c.Marked(config.HashedSecret("edge-marker-77d1")) {
		t.Error("the filter does not honour exactly the marker from its hash")
	}
	cl, err := exchange.NewClassifierFromConfig(fc.Mesh)
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]string{"Bearer sk-live-4f9a2c": "premium", "Bearer sk-live-4f9a2d": "batch"} {
		got := cl.Classify(exchange.RequestInfo{Path: "/v1/completions", Headers: exchange.HeaderFunc(func(name string) string {
			if name == "authorization" {
				return key
			}
			return ""
		})})
		if got.Name != want {
			t.Errorf("%s: class %s (%s), want %s", key, got.Name, got.Reason, want)
		}
	}
}

// listenerFilter decodes the first listener of res: the listener, its
// HTTP connection manager and its golang filter's config.
func listenerFilter(t *testing.T, res Resources) (*listener.Listener, *hcm.HttpConnectionManager, *golang.Config) {
	t.Helper()
	var gc golang.Config
	var m hcm.HttpConnectionManager
	ln := res[resource.ListenerType][0].(*listener.Listener)
	if err := ln.GetFilterChains()[0].GetFilters()[0].GetTypedConfig().UnmarshalTo(&m); err != nil {
		t.Fatal(err)
	}
	if err := m.GetHttpFilters()[0].GetTypedConfig().UnmarshalTo(&gc); err != nil {
		t.Fatal(err)
	}
	return ln, &m, &gc
}
