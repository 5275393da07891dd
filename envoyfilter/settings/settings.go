// Package settings is the contract between `llmesh control`, which writes
// the Envoy filter's plugin configs, and the filter (envoyfilter), which
// reads them: the two shapes, their type URLs, and one encoder and one
// strict decoder for each, so that neither side can drift from the other.
// It has no heavy imports: the .so links it.
//
//	filter level: {"mesh": {...mesh config...}, "pool": "sim", "listener": "main", "retry_after": "1s"}
//	per route:    {"pool": "sim.arm-a", "class": "batch"}
//
// Both travel as the value of an xds.type.v3.TypedStruct (what control
// writes; udpa.type.v1.TypedStruct and a bare google.protobuf.Struct are
// read too).
package settings

import (
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	xdstype "github.com/cncf/xds/go/xds/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"
)

const (
	// PluginName is the name the filter registers with the SDK and the
	// plugin_name (and library_id) of every golang filter config.
	PluginName = "llmesh"
	// FilterTypeURL and RouteTypeURL label the TypedStructs; the filter
	// ignores them, humans reading a config dump do not.
	FilterTypeURL = "type.googleapis.com/llmesh.filter.Settings"
	RouteTypeURL  = "type.googleapis.com/llmesh.filter.RouteSettings"
	// MaxBytes bounds a serialized plugin config (the mesh config file's
	// limit); larger ones are refused before decoding.
	MaxBytes = 4 << 20
)

// Type URLs a decoder accepts.
const (
	typedStructURL    = "type.googleapis.com/xds.type.v3.TypedStruct"
	udpaTypedStructV1 = "type.googleapis.com/udpa.type.v1.TypedStruct"
	structURL         = "type.googleapis.com/google.protobuf.Struct"
)

// Filter is the filter-level plugin config.
type Filter struct {
	// Mesh is the mesh config as a JSON object (the YAML file's schema);
	// required.
	Mesh json.RawMessage `json:"mesh"`
	// Pool is the pool of requests no route or per-route config names;
	// empty means the mesh's first pool.
	Pool string `json:"pool,omitempty"`
	// Listener, when set, names the mesh listener whose routes (path and
	// header matches) choose pool and class for requests.
	Listener string `json:"listener,omitempty"`
	// RetryAfter is what preempted, rejected and queue-full replies ask
	// clients to wait (Retry-After, grpc-retry-pushback-ms), a Go duration;
	// empty means "1s".
	RetryAfter string `json:"retry_after,omitempty"`
}

// Route is the per-route plugin config (typed_per_filter_config); both
// fields are optional.
type Route struct {
	Pool  string `json:"pool,omitempty"`
	Class string `json:"class,omitempty"`
}

var (
	filterFields = []string{"mesh", "pool", "listener", "retry_after"}
	routeFields  = []string{"pool", "class"}
)

// Any encodes f as a TypedStruct labelled FilterTypeURL, deterministically.
func (f Filter) Any() (*anypb.Any, error) {
	fields := map[string]any{}
	if len(f.Mesh) > 0 {
		var mesh any
		if err := json.Unmarshal(f.Mesh, &mesh); err != nil {
			return nil, fmt.Errorf("settings: mesh: %w", err)
		}
		fields["mesh"] = mesh
	}
	strs(fields, "pool", f.Pool, "listener", f.Listener, "retry_after", f.RetryAfter)
	return typedStruct(FilterTypeURL, fields)
}

// Any encodes r as a TypedStruct labelled RouteTypeURL.
func (r Route) Any() (*anypb.Any, error) {
	fields := map[string]any{}
	strs(fields, "pool", r.Pool, "class", r.Class)
	return typedStruct(RouteTypeURL, fields)
}

func strs(m map[string]any, kv ...string) {
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			m[kv[i]] = kv[i+1]
		}
	}
}

func typedStruct(url string, fields map[string]any) (*anypb.Any, error) {
	st, err := structpb.NewStruct(fields)
	if err != nil {
		return nil, fmt.Errorf("settings: %w", err)
	}
	// Deterministic: the same settings give the same bytes, so control's
	// snapshots hash the same for the same config.
	a := &anypb.Any{}
	if err := anypb.MarshalFrom(a, &xdstype.TypedStruct{TypeUrl: url, Value: st}, proto.MarshalOptions{Deterministic: true}); err != nil {
		return nil, fmt.Errorf("settings: %w", err)
	}
	return a, nil
}

// DecodeFilter decodes a filter-level plugin config strictly: unknown
// fields and non-string values are errors naming the field. It checks the
// shape only; what the mesh says is the filter's to validate.
func DecodeFilter(a *anypb.Any) (Filter, error) {
	var f Filter
	obj, err := decodeAny(a)
	if err != nil {
		return f, err
	}
	err = decodeStrict(obj, filterFields, &f)
	return f, err
}

// DecodeRoute decodes a per-route plugin config as DecodeFilter does.
func DecodeRoute(a *anypb.Any) (Route, error) {
	var r Route
	obj, err := decodeAny(a)
	if err != nil {
		return r, err
	}
	err = decodeStrict(obj, routeFields, &r)
	return r, err
}

// decodeAny turns plugin_config into a JSON object.
func decodeAny(a *anypb.Any) (map[string]any, error) {
	if a == nil {
		return nil, errors.New("plugin_config: missing")
	}
	if n := len(a.GetValue()); n > MaxBytes {
		return nil, fmt.Errorf("plugin_config: %d bytes, over the limit of %d", n, MaxBytes)
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
		return map[string]any{}, nil
	}
	return st.AsMap(), nil
}

// decodeStrict decodes obj into v, rejecting unknown fields and
// non-string values of fields other than mesh, each error naming its
// field.
func decodeStrict(obj map[string]any, allowed []string, v any) error {
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
			errs = append(errs, fmt.Errorf("%s: unknown field (known: %s)", k, strings.Join(allowed, ", ")))
		}
	}
	for _, k := range keys {
		if k == "mesh" {
			continue
		}
		if _, isString := obj[k].(string); !isString {
			errs = append(errs, fmt.Errorf("%s: must be a string, got %s", k, jsonKind(obj[k])))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	b, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case float64:
		return "a number"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}
