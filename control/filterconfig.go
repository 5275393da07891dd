package control

import (
	"fmt"
	"slices"

	xdstype "github.com/cncf/xds/go/xds/type/v3"
	golang "github.com/envoyproxy/go-control-plane/contrib/envoy/extensions/filters/http/golang/v3alpha"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
	"gopkg.in/yaml.v3"

	"github.com/llmesh/llmesh/config"
)

// The llmesh Envoy filter's identity and the shape of its configs. They are
// what cmd/llmesh-filter registers and filter/envoy parses:
//
//	filter level: {"mesh": {...mesh config...}, "pool": "<default pool>"}
//	per route:    {"pool": "<pool>", "class": "<class>"}
const (
	// PluginName is the name the filter registers with the SDK.
	PluginName = "llmesh"
	// GolangFilterName is the HTTP filter name of Envoy's golang filter, the
	// key of typed_per_filter_config.
	GolangFilterName = "envoy.filters.http.golang"
	// DefaultLibraryPath is where Envoy finds llmesh-filter.so unless
	// BuildOptions says otherwise.
	DefaultLibraryPath = "/etc/envoy/llmesh-filter.so"
	// settingsTypeURL labels the TypedStruct; the filter ignores it, humans
	// reading a config dump do not.
	settingsTypeURL = "type.googleapis.com/llmesh.filter.Settings"
	routeTypeURL    = "type.googleapis.com/llmesh.filter.RouteSettings"
)

// armPoolName is the name of the pool (and Envoy cluster) that carries one
// experiment arm's traffic with the arm's scheduler config.
func armPoolName(pool, arm string) string { return config.ArmPoolName(pool, arm) }

// envoyMesh returns the mesh config the Envoy filter gets: the source with
// every experiment arm turned into a pool of its own (same endpoints and
// capacity, the arm's scheduler), because the filter schedules per pool and
// picks the pool from the per-route config. The admin address is dropped:
// it is the control plane's, not Envoy's.
func envoyMesh(cfg *config.Config) (*config.Mesh, error) {
	m := *cfg.Source
	m.Admin = config.AdminSpec{}
	m.Pools = slices.Clone(cfg.Source.Pools)
	names := map[string]bool{}
	for _, p := range m.Pools {
		names[p.Name] = true
	}
	for _, e := range cfg.Experiments {
		var base config.PoolSpec
		for _, p := range cfg.Source.Pools {
			if p.Name == e.Pool.Name {
				base = p
			}
		}
		for _, a := range e.Arms {
			p := base
			p.Name = armPoolName(e.Pool.Name, a.Name)
			if names[p.Name] {
				return nil, fmt.Errorf("control: experiment %q arm %q needs pool name %q, which is already taken", e.Name, a.Name, p.Name)
			}
			names[p.Name] = true
			p.Scheduler = schedulerSpec(a.Scheduler)
			m.Pools = append(m.Pools, p)
		}
	}
	return &m, nil
}

// schedulerSpec writes a compiled scheduler config back in source form.
func schedulerSpec(s config.SchedulerConfig) config.SchedulerSpec {
	minLower, maxPer, target := s.Preemption.MinLowerInflight, s.Preemption.MaxPerRequest, s.Preemption.Target
	return config.SchedulerSpec{
		Policy:      s.Policy,
		BatchWindow: s.BatchWindow.String(),
		Aging:       s.Aging.String(),
		Preemption: config.PreemptionSpec{
			MinLowerInflight: &minLower,
			MinRunTime:       s.Preemption.MinRunTime.String(),
			MaxPerRequest:    &maxPer,
			Target:           &target,
		},
	}
}

// meshStruct converts a mesh config to a protobuf Struct by way of its YAML
// form, so that the filter reads exactly the schema of the file.
func meshStruct(m *config.Mesh) (*structpb.Value, error) {
	b, err := yaml.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("control: encode mesh: %w", err)
	}
	var generic map[string]any
	if err := yaml.Unmarshal(b, &generic); err != nil {
		return nil, fmt.Errorf("control: encode mesh: %w", err)
	}
	v, err := structpb.NewValue(normalize(generic))
	if err != nil {
		return nil, fmt.Errorf("control: encode mesh: %w", err)
	}
	return v, nil
}

// normalize turns yaml.v3's generic values into ones structpb accepts.
func normalize(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			t[k] = normalize(e)
		}
		return t
	case []any:
		for i, e := range t {
			t[i] = normalize(e)
		}
		return t
	case int:
		return float64(t)
	case uint64:
		return float64(t)
	case int64:
		return float64(t)
	}
	return v
}

// filterConfig is the golang filter's HTTP filter config for one listener.
func filterConfig(cfg *config.Config, mesh *structpb.Value, l *config.Listener, opts BuildOptions) (*anypb.Any, error) {
	settings := map[string]*structpb.Value{"mesh": mesh}
	if len(l.Routes) > 0 {
		settings["pool"] = structpb.NewStringValue(l.Routes[0].Pool.Name)
	}
	ts, err := newAny(&xdstype.TypedStruct{TypeUrl: settingsTypeURL, Value: &structpb.Struct{Fields: settings}})
	if err != nil {
		return nil, err
	}
	return newAny(&golang.Config{
		LibraryId:    PluginName,
		LibraryPath:  opts.libraryPath(),
		PluginName:   PluginName,
		PluginConfig: ts,
	})
}

// routeFilterConfig is a per-route golang filter config choosing the pool
// (and the class, when the route fixes it).
func routeFilterConfig(pool string, class *config.Class) (*anypb.Any, error) {
	fields := map[string]*structpb.Value{"pool": structpb.NewStringValue(pool)}
	if class != nil {
		fields["class"] = structpb.NewStringValue(class.Name)
	}
	ts, err := newAny(&xdstype.TypedStruct{TypeUrl: routeTypeURL, Value: &structpb.Struct{Fields: fields}})
	if err != nil {
		return nil, err
	}
	return newAny(&golang.ConfigsPerRoute{
		PluginsConfig: map[string]*golang.RouterPlugin{
			PluginName: {Override: &golang.RouterPlugin_Config{Config: ts}},
		},
	})
}
