package control

import (
	"encoding/json"
	"fmt"
	"slices"

	golang "github.com/envoyproxy/go-control-plane/contrib/envoy/extensions/filters/http/golang/v3alpha"
	"google.golang.org/protobuf/types/known/anypb"
	"gopkg.in/yaml.v3"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/envoyfilter/settings"
)

// The llmesh Envoy filter's identity. The shape of its configs is
// envoyfilter/settings, the contract cmd/llmesh-filter's parser reads:
//
//	filter level: settings.Filter{Mesh: <mesh config>, Pool: <default pool>}
//	per route:    settings.Route{Pool: <pool>, Class: <class>}
const (
	// PluginName is the name the filter registers with the SDK.
	PluginName = settings.PluginName
	// GolangFilterName is the HTTP filter name of Envoy's golang filter, the
	// key of typed_per_filter_config.
	GolangFilterName = "envoy.filters.http.golang"
	// DefaultLibraryPath is where Envoy finds llmesh-filter.so unless
	// BuildOptions says otherwise.
	DefaultLibraryPath = "/etc/envoy/llmesh-filter.so"
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
	// Secrets leave as hashes (config.HashedSecret): the filter compares a
	// request's API key and trusted marker by their SHA-256, so an xDS
	// client (or anyone reading Envoy's config dump) learns no key.
	if keys := cfg.Source.Classification.APIKeys; len(keys) > 0 {
		m.Classification.APIKeys = make(map[string]string, len(keys))
		for k, c := range keys {
			m.Classification.APIKeys[config.HashedSecret(k)] = c
		}
	}
	if tm := cfg.Source.Classification.PriorityHeader.TrustedMarker; tm != nil {
		hashed := *tm
		hashed.Value = config.HashedSecret(tm.Value)
		m.Classification.PriorityHeader.TrustedMarker = &hashed
	}
	m.Pools = slices.Clone(cfg.Source.Pools)
	names := map[string]bool{}
	for _, p := range m.Pools {
		names[p.Name] = true
	}
	for _, ap := range cfg.ArmPools() {
		var p config.PoolSpec
		for _, sp := range cfg.Source.Pools {
			if sp.Name == ap.Experiment.Pool.Name {
				p = sp
			}
		}
		p.Name = ap.Pool.Name
		if names[p.Name] {
			return nil, fmt.Errorf("control: experiment %q arm %q needs pool name %q, which is already taken", ap.Experiment.Name, ap.Arm.Name, p.Name)
		}
		names[p.Name] = true
		p.Scheduler = schedulerSpec(ap.Pool.Scheduler)
		m.Pools = append(m.Pools, p)
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

// meshJSON encodes a mesh config as JSON by way of its YAML form, so that
// the filter reads exactly the schema of the file.
func meshJSON(m *config.Mesh) (json.RawMessage, error) {
	b, err := yaml.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("control: encode mesh: %w", err)
	}
	var generic map[string]any
	if err := yaml.Unmarshal(b, &generic); err != nil {
		return nil, fmt.Errorf("control: encode mesh: %w", err)
	}
	js, err := json.Marshal(normalize(generic))
	if err != nil {
		return nil, fmt.Errorf("control: encode mesh: %w", err)
	}
	return js, nil
}

// normalize turns yaml.v3's generic values into JSON's (numbers are
// float64, as a protobuf Struct holds them).
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
func filterConfig(mesh json.RawMessage, l *config.Listener, opts BuildOptions) (*anypb.Any, error) {
	fs := settings.Filter{Mesh: mesh}
	if len(l.Routes) > 0 {
		fs.Pool = l.Routes[0].Pool.Name
	}
	ts, err := fs.Any()
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
	rs := settings.Route{Pool: pool}
	if class != nil {
		rs.Class = class.Name
	}
	ts, err := rs.Any()
	if err != nil {
		return nil, err
	}
	return newAny(&golang.ConfigsPerRoute{
		PluginsConfig: map[string]*golang.RouterPlugin{
			PluginName: {Override: &golang.RouterPlugin_Config{Config: ts}},
		},
	})
}
