package envoyfilter

import (
	"errors"
	"fmt"
	"sync"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/exchange"
	"github.com/llmesh/llmesh/exchange/relocate"
	"github.com/llmesh/llmesh/scheduler"
)

// Name is the plugin name the filter registers under; envoy.yaml's
// plugin_name must match it.
const Name = "llmesh"

// Recorder receives each finished request's observation, for histograms
// (the SDK has none) and traces. It is called on an Envoy worker thread and
// must not block.
type Recorder = exchange.Recorder

// Env is what the process hosting the filter provides. Every field is
// optional.
type Env struct {
	// Clock measures the streams; nil means clock.Real.
	Clock clock.Clock
	// NewAdmitter builds the scheduler for a compiled config. It is called
	// at most once per config, on the first request that needs it (never
	// during Parse, which must do no IO), and may return a shared
	// instance. nil means requests are measured but never queued.
	NewAdmitter func(*config.Config) (scheduler.Admitter, error)
	// Recorder receives every config's observations; when nil,
	// NewRecorder is asked per config.
	Recorder Recorder
	// NewRecorder builds the recorder for a compiled config, at most once
	// per config and lazily like NewAdmitter; it may return nil. With both
	// nil only Envoy stats and dynamic metadata are recorded.
	NewRecorder func(*config.Config) (Recorder, error)
}

// Plugin is the filter factory and config parser registered with the SDK:
//
//	p := envoy.New(env)
//	http.RegisterHttpFilterFactoryAndConfigParser(envoy.Name, p.Factory, p)
type Plugin struct {
	env   Env
	stats statRegistry
}

var _ api.StreamFilterConfigParser = (*Plugin)(nil)

// New returns a Plugin using env.
func New(env Env) *Plugin {
	if env.Clock == nil {
		env.Clock = clock.Real{}
	}
	return &Plugin{env: env}
}

// Parse decodes plugin_config. For the filter-level config (callbacks not
// nil) errors name the field path and reject the config; Envoy stats are
// defined here. A per-route config (callbacks nil) never fails, because an
// error there can abort Envoy: problems are kept and counted by Merge,
// which falls back to the parent config.
func (p *Plugin) Parse(a *anypb.Any, callbacks api.ConfigCallbackHandler) (interface{}, error) {
	if callbacks == nil {
		return parseRoute(a), nil
	}
	fc, err := ParseSettings(a)
	if err != nil {
		return nil, err
	}
	fc.metrics = defineMetrics(&p.stats, callbacks)
	fc.rt = &runtime{env: &p.env}
	if len(fc.Mesh.Relocation.GRPC)+len(fc.Mesh.Relocation.HTTP) > 0 {
		r, err := relocate.FromConfig(fc.Mesh.Relocation)
		if err != nil {
			return nil, fmt.Errorf("mesh.%w", err)
		}
		fc.rt.reloc = r
	}
	return fc, nil
}

// Merge applies a per-route config to its parent. It never fails: an
// invalid route config, or one naming an unknown pool or class, is ignored
// (the parent applies), counted in llmesh.config_route_errors and logged.
func (p *Plugin) Merge(parent, child interface{}) interface{} {
	var base *merged
	switch v := parent.(type) {
	case *FilterConfig:
		base = &merged{FilterConfig: v, pool: v.Pool}
	case *merged:
		base = v
	default:
		// A parent that is not ours cannot happen with one plugin name;
		// keep the child as is rather than crash.
		return child
	}
	switch c := child.(type) {
	case *routeConfig:
		out := *base
		var errs []error
		if c.bad != nil {
			errs = append(errs, c.bad)
		} else {
			if c.poolName != "" {
				if pl := base.Mesh.Pool(c.poolName); pl != nil {
					out.pool = pl
				} else {
					errs = append(errs, fmt.Errorf("pool: %q is not a pool of the mesh config", c.poolName))
				}
			}
			if c.className != "" {
				if cl := base.Mesh.Class(c.className); cl != nil {
					out.class = cl
				} else {
					errs = append(errs, fmt.Errorf("class: %q is not a class of the mesh config", c.className))
				}
			}
		}
		if len(errs) > 0 {
			base.metrics.routeConfigErrors.Increment(1)
			api.LogWarnf("llmesh: per-route config ignored: %v", errors.Join(errs...))
			return base
		}
		return &out
	case *FilterConfig:
		// A full config at route level replaces the parent.
		return &merged{FilterConfig: c, pool: c.Pool}
	case *merged:
		return c
	}
	return base
}

// Factory creates the filter of one request. config is what Parse or Merge
// returned.
func (p *Plugin) Factory(cfg interface{}, cb api.FilterCallbackHandler) api.StreamFilter {
	var m merged
	switch v := cfg.(type) {
	case *FilterConfig:
		m = merged{FilterConfig: v, pool: v.Pool}
	case *merged:
		m = *v
	default:
		// Only a route config without any filter-level config gets here:
		// nothing to schedule against, so measure nothing and pass through.
		return &api.PassThroughStreamFilter{}
	}
	return newStreamFilter(&m, cb, p.env.Clock)
}

// runtime holds what a FilterConfig builds lazily and shares between its
// requests.
type runtime struct {
	env   *Env
	reloc *relocate.Relocator

	once   sync.Once
	adm    scheduler.Admitter
	admErr error

	recOnce sync.Once
	rec     Recorder
}

// admitter returns the config's scheduler, building it on first use; nil
// without error when the process provides none.
func (r *runtime) admitter(mc *config.Config) (scheduler.Admitter, error) {
	if r.env.NewAdmitter == nil {
		return nil, nil
	}
	r.once.Do(func() { r.adm, r.admErr = r.env.NewAdmitter(mc) })
	return r.adm, r.admErr
}

// recorder returns the config's recorder, or nil. A failure to build one
// is logged once and the config runs without (measurement must not stop
// traffic).
func (r *runtime) recorder(mc *config.Config) Recorder {
	if r.env.Recorder != nil {
		return r.env.Recorder
	}
	if r.env.NewRecorder == nil {
		return nil
	}
	r.recOnce.Do(func() {
		rec, err := r.env.NewRecorder(mc)
		if err != nil {
			api.LogErrorf("llmesh: telemetry disabled: %v", err)
			return
		}
		r.rec = rec
	})
	return r.rec
}
