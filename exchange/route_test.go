package exchange

import (
	"testing"
	"time"

	"github.com/llmesh/llmesh/config"
)

func headerMap(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

// TestRoutesSelect is the route → pool → class table every host selects
// by: first match wins, the protocol rule, defaults per protocol, an
// experiment's arms, and "no pool" as no route.
func TestRoutesSelect(t *testing.T) {
	cfg, err := config.Load([]byte(`
pools:
  - {name: p, protocol: openai, endpoints: [127.0.0.1:1]}
experiments:
  - name: ab
    pool: p
    arms:
      - {name: a, weight: 50, headers: {x-arm: a}}
      - {name: b, weight: 50}
`))
	if err != nil {
		t.Fatal(err)
	}
	exp := cfg.Experiment("ab")
	armA := exp.Arms[0]
	rules := []RouteRule[string]{
		{Match: config.RouteMatch{PathPrefix: "/v1/", Headers: map[string]string{"x-lane": "batch"}}, Pool: "http", Class: "batch",
			Generation: []string{"/v1/batch"}},
		{Match: config.RouteMatch{PathPrefix: "/exp/"}, Pool: "p", Experiment: exp, Arms: map[*config.Arm]string{armA: "p-a"}},
		{Match: config.RouteMatch{PathPrefix: "/v1/"}, Pool: "http"},
		{Match: config.RouteMatch{PathPrefix: "/any/", AnyProtocol: true}, Pool: "any", Class: "any"},
		{Match: config.RouteMatch{PathPrefix: "/", GRPC: true}, Pool: "grpc"},
		{Match: config.RouteMatch{PathPrefix: "/none/"}, Pool: ""},
	}
	withDefaults := NewRoutes(rules, "http-default", "grpc-default", func() float64 { return 0.9 })
	noDefaults := NewRoutes(rules, "", "", func() float64 { return 0.9 })
	tests := []struct {
		name    string
		table   *Routes[string]
		path    string
		headers map[string]string
		grpc    bool
		want    Selection[string]
		ok      bool
		gen     string // a path the selection counts as a generation
	}{
		{"headers and class", withDefaults, "/v1/chat/completions", map[string]string{"x-lane": "batch"}, false,
			Selection[string]{Pool: "http", Class: "batch", Matched: true}, true, "/v1/batch"},
		{"first match wins", withDefaults, "/v1/chat/completions", map[string]string{"x-lane": "other"}, false,
			Selection[string]{Pool: "http", Matched: true}, true, "/v1/chat/completions"},
		{"grpc skips http routes", withDefaults, "/v1/chat/completions", nil, true,
			Selection[string]{Pool: "grpc", Matched: true}, true, MethodLLMV1},
		{"any protocol", withDefaults, "/any/x", nil, true, Selection[string]{Pool: "any", Class: "any", Matched: true}, true, ""},
		{"http default", withDefaults, "/health", nil, false, Selection[string]{Pool: "http-default"}, true, "/v1/completions"},
		{"no default", noDefaults, "/health", nil, false, Selection[string]{}, false, ""},
		{"arm by header", withDefaults, "/exp/x", map[string]string{"x-arm": "a"}, false,
			Selection[string]{Pool: "p-a", Matched: true}, true, ""},
		{"arm without a pool", withDefaults, "/exp/x", nil, false, Selection[string]{Matched: true}, false, ""},
		{"route without a pool", withDefaults, "/none/x", nil, false, Selection[string]{Matched: true}, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := tt.table.Select(tt.path, headerMap(tt.headers), tt.grpc)
			if ok != tt.ok || got.Pool != tt.want.Pool || got.Class != tt.want.Class || got.Matched != tt.want.Matched {
				t.Fatalf("Select(%q, %v, grpc %v) = %+v, %v; want %+v, %v", tt.path, tt.headers, tt.grpc, got, ok, tt.want, tt.ok)
			}
			if tt.gen != "" && !got.Generations.Match("POST", tt.gen) {
				t.Errorf("%s is not a generation of the selection", tt.gen)
			}
		})
	}
	// The weighted draw picks arm b (0.9 lies in its half), which has no
	// pool here; a draw in a's half reaches a's pool.
	low := NewRoutes(rules, "", "", func() float64 { return 0.1 })
	if got, ok := low.Select("/exp/x", nil, false); !ok || got.Pool != "p-a" {
		t.Errorf("draw 0.1: %+v, %v; want arm a's pool p-a", got, ok)
	}
}

// TestListenerRules routes examples/mesh.yaml's listener as the Envoy
// filter and the endpoint picker do: pools and classes of the mesh, the
// protocol rule, no route for what no route takes, and an experiment's
// route to its pool (Envoy's weighted clusters split it).
func TestListenerRules(t *testing.T) {
	cfg, err := config.LoadFile("../examples/mesh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	l := cfg.Listener("main")
	var pools []string
	table := NewRoutes(ListenerRules(l, func(p *config.Pool) *config.Pool { pools = append(pools, p.Name); return p }), nil, nil, nil)
	if len(pools) != len(l.Routes) {
		t.Fatalf("pool mapped %d times for %d routes", len(pools), len(l.Routes))
	}
	tests := []struct {
		path    string
		headers map[string]string
		grpc    bool
		pool    string // "" no route
		class   string
	}{
		{"/v1/chat/completions", map[string]string{"x-llmesh-lane": "batch"}, false, "sim", "batch"},
		{"/v1/chat/completions", nil, false, "sim", ""},
		{"/vllm.grpc.engine.VllmEngine/Generate", nil, true, "sim-grpc", ""},
		// A route to a gRPC pool takes gRPC requests only, one to an
		// OpenAI pool the rest, in every host.
		{"/v1/chat/completions", nil, true, "sim-grpc", ""},
		{"/health", nil, false, "", ""},
		// The openai route's pool carries experiment policy-ab.
		{"/v1/x", map[string]string{"x-llmesh-arm": "fifo"}, false, "sim", ""},
	}
	for _, tt := range tests {
		got, ok := table.Select(tt.path, headerMap(tt.headers), tt.grpc)
		name := ""
		if ok {
			name = got.Pool.Name
		}
		if name != tt.pool || got.Class != tt.class {
			t.Errorf("Select(%q, %v, grpc %v) = pool %q class %q, want %q %q", tt.path, tt.headers, tt.grpc, name, got.Class, tt.pool, tt.class)
		}
	}
	if got := ListenerRules[*config.Pool](nil, nil); got != nil {
		t.Errorf("rules of no listener = %v", got)
	}
}

// TestAffinityFromHead: the core reads the affinity key from the pool's
// affinity header, for every host.
func TestAffinityFromHead(t *testing.T) {
	for _, tt := range []struct {
		header  string
		headers Headers
		want    string
	}{
		{"X-Session", MapHeaders{"x-session": "k1"}, "k1"},
		{"", MapHeaders{"x-session": "k1"}, ""},
		{"x-session", MapHeaders{}, ""},
		{"x-session", nil, ""},
	} {
		var x Exchange
		x.Start(&ExchangeConfig{}, RequestHead{Path: "/v1/completions", Headers: tt.headers, AffinityHeader: tt.header,
			Received: time.Unix(1, 0)})
		if got := x.View().Request.Affinity; got != tt.want {
			t.Errorf("affinity header %q over %v = %q, want %q", tt.header, tt.headers, got, tt.want)
		}
		x.End(time.Unix(2, 0), EndRefused, nil)
	}
}
