package envoy_test

import (
	"testing"

	golang "github.com/envoyproxy/go-control-plane/contrib/envoy/extensions/filters/http/golang/v3alpha"
	"google.golang.org/protobuf/proto"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/control"
	"github.com/llmesh/llmesh/envoyfilter"
	"github.com/llmesh/llmesh/testkit/fakesdk"
)

// TestControlConfigAcceptedByFilter: the golang filter configs that
// `llmesh control` serves (filter level and per route) are accepted by the
// filter's parser, and every per-route config names a pool and class the
// filter knows. This is the contract between control and the .so.
func TestControlConfigAcceptedByFilter(t *testing.T) {
	mesh := `listeners:
  - name: main
    address: 127.0.0.1:10000
    routes:
      - {match: {path_prefix: /llm.v1.Generation/}, pool: sim-grpc, class: interactive}
      - {match: {path_prefix: /}, pool: sim}
pools:
  - {name: sim, protocol: openai, endpoints: ["127.0.0.1:8000"], capacity: {max_inflight: 4}, scheduler: {policy: preemptive}}
  - {name: sim-grpc, protocol: grpc, endpoints: ["127.0.0.1:9000"], capacity: {max_inflight: 4}, scheduler: {policy: fifo}}
classes:
  - {name: interactive, priority: 0, slo: {ttft: 500ms}}
  - {name: batch, priority: 10, preemptible: true}
default_class: batch
classification: {tenants: {gold: interactive}}
relocation:
  grpc: [{metadata: x-llmesh-prompt, field: 2}]
experiments:
  - name: ab
    pool: sim
    arms:
      - {name: a, weight: 1, scheduler: {policy: fifo}}
      - {name: b, weight: 1, scheduler: {policy: preemptive}}
`
	cfg, err := config.Load([]byte(mesh))
	if err != nil {
		t.Fatal(err)
	}
	res, err := control.Build(cfg, control.BuildOptions{LibraryPath: "/etc/envoy/llmesh-filter.so"})
	if err != nil {
		t.Fatal(err)
	}
	fakesdk.InstallCAPI()
	plugin := envoyfilter.New(envoyfilter.Env{})
	cb := fakesdk.NewConfigCallbacks()
	var parent interface{}
	var routes []interface{}
	for _, rs := range res {
		for _, r := range rs {
			validateDeep(t, proto.Clone(r).ProtoReflect(), "resource", func(path string, inner proto.Message) {
				switch c := inner.(type) {
				case *golang.Config:
					p, err := plugin.Parse(c.GetPluginConfig(), cb)
					if err != nil {
						t.Fatalf("%s: filter rejects control's config: %v", path, err)
					}
					parent = p
				case *golang.ConfigsPerRoute:
					for name, rp := range c.GetPluginsConfig() {
						if name != envoyfilter.Name {
							t.Errorf("%s: per-route config for plugin %q", path, name)
						}
						rc, _ := plugin.Parse(rp.GetConfig(), nil)
						routes = append(routes, rc)
					}
				}
			})
		}
	}
	if parent == nil || len(routes) == 0 {
		t.Fatalf("control served %v filter config and %d per-route configs", parent != nil, len(routes))
	}
	for _, rc := range routes {
		plugin.Merge(parent, rc)
	}
	if n, _ := cb.Counter(envoyfilter.StatRouteConfigErrors); n != 0 {
		t.Errorf("%d of control's %d per-route configs were rejected by Merge", n, len(routes))
	}
}
