package envoy

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	xdstype "github.com/cncf/xds/go/xds/type/v3"
	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/filter"
)

// Type URLs accepted for plugin_config.
const (
	typedStructURL    = "type.googleapis.com/xds.type.v3.TypedStruct"
	udpaTypedStructV1 = "type.googleapis.com/udpa.type.v1.TypedStruct"
	structURL         = "type.googleapis.com/google.protobuf.Struct"
)

// MaxConfigBytes bounds the serialized plugin config; larger ones are
// refused before decoding.
const MaxConfigBytes = config.MaxFileSize

// Settings is the filter-level plugin config, as a JSON object inside a
// google.protobuf.Struct (or the value of an xds.type.v3.TypedStruct):
//
//	{"mesh": {...mesh config...}, "pool": "sim", "listener": "main", "retry_after": "1s"}
//
// Only the filter-facing parts of the mesh config are used: pools (capacity
// and scheduler), classes, default_class, classification, relocation,
// telemetry, scheduler_service and listeners (routes pick pool and class).
type Settings struct {
	// Mesh is the mesh config (same schema as the YAML file); required.
	Mesh json.RawMessage `json:"mesh"`
	// Pool is the pool of requests no route or per-route config names;
	// default: the first pool.
	Pool string `json:"pool,omitempty"`
	// Listener, when set, names the mesh listener whose routes (path and
	// header matches) choose pool and class for requests.
	Listener string `json:"listener,omitempty"`
	// RetryAfter is what preempted, rejected and queue-full replies ask
	// clients to wait (Retry-After, grpc-retry-pushback-ms); default "1s".
	RetryAfter string `json:"retry_after,omitempty"`
}

// RouteSettings is the per-route plugin config (typed_per_filter_config):
// {"pool": "...", "class": "..."}. Both are optional.
type RouteSettings struct {
	Pool  string `json:"pool,omitempty"`
	Class string `json:"class,omitempty"`
}

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

	metrics    *metrics
	rt         *runtime
	classifier *filter.Classifier
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

// decodeAny turns plugin_config into a JSON object.
func decodeAny(a *anypb.Any) (map[string]interface{}, error) {
	if a == nil {
		return nil, errors.New("plugin_config: missing")
	}
	if n := len(a.GetValue()); n > MaxConfigBytes {
		return nil, fmt.Errorf("plugin_config: %d bytes, over the limit of %d", n, MaxConfigBytes)
	}
	var st *structpb.Struct
	switch a.GetTypeUrl() {
	case typedStructURL, udpaTypedStructV1:
		// udpa.type.v1.TypedStruct has the same wire shape as xds's.
		var ts xdstype.TypedStruct
		if err := proto.Unmarshal(a.GetValue(), &ts); err != nil {
			return nil, fmt.Errorf("plugin_config: bad TypedStruct: %v", err)
		}
		st = ts.GetValue()
	case structURL:
		st = &structpb.Struct{}
		if err := proto.Unmarshal(a.GetValue(), st); err != nil {
			return nil, fmt.Errorf("plugin_config: bad Struct: %v", err)
		}
	default:
		return nil, fmt.Errorf("plugin_config: type %q not supported (want xds.type.v3.TypedStruct or google.protobuf.Struct)", a.GetTypeUrl())
	}
	if st == nil {
		return map[string]interface{}{}, nil
	}
	return st.AsMap(), nil
}

// decodeStrict decodes obj into v, rejecting unknown fields with their
// path under prefix.
func decodeStrict(obj map[string]interface{}, allowed []string, prefix string, v interface{}) error {
	var errs []error
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		ok := false
		for _, a := range allowed {
			ok = ok || k == a
		}
		if !ok {
			errs = append(errs, fmt.Errorf("%s%s: unknown field (known: %s)", prefix, k, strings.Join(allowed, ", ")))
		}
	}
	for _, k := range keys {
		if k == "mesh" {
			continue
		}
		if _, isString := obj[k].(string); !isString {
			errs = append(errs, fmt.Errorf("%s%s: must be a string, got %s", prefix, k, jsonKind(obj[k])))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return fmt.Errorf("%s: %v", strings.TrimSuffix(prefix, "."), err)
	}
	return json.Unmarshal(b, v)
}

func jsonKind(v interface{}) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case float64:
		return "a number"
	case []interface{}:
		return "a list"
	case map[string]interface{}:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// compile validates Settings into a FilterConfig (without metrics).
func compile(s Settings) (*FilterConfig, error) {
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
	if fc.classifier, err = filter.NewClassifierFromConfig(mc); err != nil {
		return nil, fmt.Errorf("mesh.classification: %w", err)
	}
	for _, r := range mc.Classification.Rules {
		fc.needBody = fc.needBody || r.Model != ""
	}
	for _, p := range mc.Pools {
		fc.needBody = fc.needBody || p.MaxInflightTokens > 0
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
	obj, err := decodeAny(a)
	if err != nil {
		return nil, err
	}
	var s Settings
	if err := decodeStrict(obj, []string{"mesh", "pool", "listener", "retry_after"}, "", &s); err != nil {
		return nil, err
	}
	return compile(s)
}

// parseRoute decodes a per-route config. It never fails: problems are kept
// in bad so that Merge can fall back to the parent and count them.
func parseRoute(a *anypb.Any) *routeConfig {
	rc := &routeConfig{}
	obj, err := decodeAny(a)
	if err != nil {
		rc.bad = err
		return rc
	}
	var s RouteSettings
	if err := decodeStrict(obj, []string{"pool", "class"}, "", &s); err != nil {
		rc.bad = err
		return rc
	}
	rc.poolName, rc.className = s.Pool, s.Class
	return rc
}
