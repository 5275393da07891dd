package envoyfilter

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/envoyfilter/settings"
	"github.com/llmesh/llmesh/exchange"
)

// MaxConfigBytes bounds the serialized plugin config; larger ones are
// refused before decoding.
const MaxConfigBytes = settings.MaxBytes

// The plugin config's shapes (settings.Filter at filter level,
// settings.Route per route) are the contract with `llmesh control`, in
// envoyfilter/settings. Only the filter-facing parts of the mesh config are
// used: pools (capacity and scheduler), classes, default_class,
// classification, relocation, telemetry, scheduler_service and listeners
// (routes pick pool and class).

// FilterConfig is the compiled, immutable filter-level config one Parse
// produced. Requests share it read-only.
type FilterConfig struct {
	// Mesh is the compiled mesh config.
	Mesh *config.Config
	// Pool is the default pool; never nil.
	Pool *config.Pool
	// Listener is nil when routes are not consulted.
	Listener *config.Listener
	// RetryAfter is the retry hint on retryable local replies.
	RetryAfter time.Duration

	// routes is the Listener's route table; nil without a Listener.
	routes     *exchange.Routes[*config.Pool]
	metrics    *metrics
	rt         *runtime
	classifier *exchange.Classifier
	// needBody: classification rules match on the model, or a pool bounds
	// tokens in flight, so JSON request bodies are read before admission.
	needBody bool
}

// Destroy is called by the SDK when Envoy drops this config. Its stats
// stop taking updates (the SDK would panic on them); goroutines that
// outlive their stream update the newest live config's stats instead.
func (c *FilterConfig) Destroy() {
	if c.metrics != nil {
		c.metrics.requests.set.drop()
	}
}

// Destroy of a merged per-route config leaves the filter-level config,
// which Envoy still holds, alone.
func (m *merged) Destroy() {}

// routeConfig is a per-route config: names from parseRoute, resolved
// against the filter-level config by Merge.
type routeConfig struct {
	poolName, className string
	// bad holds why the route config is ignored, for Merge to count.
	bad error
}

// merged is what a request on a route with per-route config runs with.
type merged struct {
	*FilterConfig
	pool  *config.Pool
	class *config.Class
}

var _ api.Config = (*FilterConfig)(nil)

// compile validates settings into a FilterConfig (without metrics).
func compile(s settings.Filter) (*FilterConfig, error) {
	if len(s.Mesh) == 0 || string(s.Mesh) == "null" {
		return nil, errors.New("mesh: required (the mesh config object)")
	}
	if s.Mesh[0] != '{' {
		return nil, errors.New("mesh: must be an object")
	}
	mc, err := config.Load(s.Mesh)
	if err != nil {
		var ces config.Errors
		if errors.As(err, &ces) {
			errs := make([]error, len(ces))
			for i, e := range ces {
				p := "mesh"
				if e.Path != "" {
					p += "." + e.Path
				}
				// Line numbers of the re-encoded JSON mean nothing to users.
				errs[i] = fmt.Errorf("%s: %s", p, e.Msg)
			}
			return nil, errors.Join(errs...)
		}
		return nil, fmt.Errorf("mesh: %w", err)
	}
	fc := &FilterConfig{Mesh: mc, RetryAfter: time.Second}
	var errs []error
	switch {
	case s.Pool != "":
		if fc.Pool = mc.Pool(s.Pool); fc.Pool == nil {
			errs = append(errs, fmt.Errorf("pool: %q is not a pool of the mesh config (have %s)", s.Pool, poolNames(mc)))
		}
	case len(mc.Pools) > 0:
		fc.Pool = mc.Pools[0]
	default:
		errs = append(errs, errors.New("mesh.pools: at least one pool is required"))
	}
	if s.Listener != "" {
		if fc.Listener = mc.Listener(s.Listener); fc.Listener == nil {
			errs = append(errs, fmt.Errorf("listener: %q is not a listener of the mesh config", s.Listener))
		}
	}
	if s.RetryAfter != "" {
		d, err := time.ParseDuration(s.RetryAfter)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("retry_after: %q is not a duration", s.RetryAfter))
		case d <= 0 || d > time.Hour:
			errs = append(errs, fmt.Errorf("retry_after: %q must be in (0, 1h]", s.RetryAfter))
		default:
			fc.RetryAfter = d
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if fc.classifier, err = exchange.NewClassifierFromConfig(mc); err != nil {
		return nil, fmt.Errorf("mesh.classification: %w", err)
	}
	for _, r := range mc.Classification.Rules {
		fc.needBody = fc.needBody || r.Model != ""
	}
	for _, p := range mc.Pools {
		fc.needBody = fc.needBody || p.MaxInflightTokens > 0 || p.PrefixWeight > 0
	}
	if fc.Listener != nil {
		fc.routes = exchange.NewRoutes(exchange.ListenerRules(fc.Listener, func(p *config.Pool) *config.Pool { return p }), nil, nil, nil)
	}
	return fc, nil
}

func poolNames(mc *config.Config) string {
	names := make([]string, len(mc.Pools))
	for i, p := range mc.Pools {
		names[i] = fmt.Sprintf("%q", p.Name)
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}

// ParseSettings decodes and validates a filter-level plugin config without
// any side effect; errors name the field path. Parser.Parse calls it.
func ParseSettings(a *anypb.Any) (*FilterConfig, error) {
	s, err := settings.DecodeFilter(a)
	if err != nil {
		return nil, err
	}
	return compile(s)
}

// parseRoute decodes a per-route config. It never fails: problems are kept
// in bad so that Merge can fall back to the parent and count them.
func parseRoute(a *anypb.Any) *routeConfig {
	s, err := settings.DecodeRoute(a)
	if err != nil {
		return &routeConfig{bad: err}
	}
	return &routeConfig{poolName: s.Pool, className: s.Class}
}
