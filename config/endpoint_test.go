package config_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"

	"github.com/llmesh/llmesh/config"
)

const endpointsMesh = `
listeners:
  - {name: main, address: 127.0.0.1:8080, routes: [{pool: sim}]}
pools:
  - name: sim
    protocol: openai
    affinity_header: X-Session-Id
    capacity:
      max_inflight: 8
      metrics: {url_template: "http://{endpoint}/metrics"}
    endpoints:
      - 127.0.0.1:8001
      - address: 127.0.0.1:8002
        max_inflight: 3
      - address: 127.0.0.1:8003
        metrics_url: http://127.0.0.1:9003/metrics
`

func TestEndpointForms(t *testing.T) {
	cfg, err := config.Load([]byte(endpointsMesh))
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Pool("sim")
	want := []config.Endpoint{
		{Host: "127.0.0.1", Port: 8001, MetricsURL: "http://127.0.0.1:8001/metrics"},
		{Host: "127.0.0.1", Port: 8002, MaxInflight: 3, MetricsURL: "http://127.0.0.1:8002/metrics"},
		{Host: "127.0.0.1", Port: 8003, MetricsURL: "http://127.0.0.1:9003/metrics"},
	}
	if diff := cmp.Diff(want, p.Endpoints); diff != "" {
		t.Errorf("endpoints (-want +got):\n%s", diff)
	}
	if p.AffinityHeader != "x-session-id" {
		t.Errorf("affinity header %q", p.AffinityHeader)
	}
	if p.Metrics == nil || p.Metrics.URL != "" || p.Metrics.Interval == 0 {
		t.Errorf("metrics %+v: want per-endpoint scraping with the default interval", p.Metrics)
	}
	if got := p.Endpoints[0].Address(); got != "127.0.0.1:8001" {
		t.Errorf("Address() = %q", got)
	}
}

// TestEndpointRoundTrip: the filter config carries the mesh as YAML; the
// address-only form stays a plain string and the object form survives.
func TestEndpointRoundTrip(t *testing.T) {
	m, err := config.Parse([]byte(endpointsMesh))
	if err != nil {
		t.Fatal(err)
	}
	b, err := yaml.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	back, err := config.Parse(b)
	if err != nil {
		t.Fatalf("re-parse: %v\n%s", err, b)
	}
	if diff := cmp.Diff(m.Pools[0].Endpoints, back.Pools[0].Endpoints); diff != "" {
		t.Errorf("round trip (-want +got):\n%s", diff)
	}
	var raw struct {
		Pools []struct {
			Endpoints []any `yaml:"endpoints"`
		} `yaml:"pools"`
	}
	if err := yaml.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	if _, ok := raw.Pools[0].Endpoints[0].(string); !ok {
		t.Errorf("address-only endpoint marshalled as %T, want a string", raw.Pools[0].Endpoints[0])
	}
}

func TestEndpointErrorsNameTheField(t *testing.T) {
	got := errorLines(t, `
pools:
  - name: p
    protocol: openai
    capacity: {metrics: {url: "http://x:1/metrics", url_template: "http://x/metrics"}}
    endpoints:
      - h:1
      - {address: "h:1"}
      - {max_inflight: -2}
      - {address: nope, metrics_url: "ftp://x"}
      - {adress: "h:3"}
      - [h:4]
`)
	// The strict decoding's problems first, then the compiler's, except
	// about the endpoints the decoding refused (config.Load says why).
	want := []string{
		`pools[0].endpoints[4].adress: unknown field (did you mean "address"?) (line 11)`,
		`pools[0].endpoints[5]: must be a mapping, got a list (line 12)`,
		`pools[0].capacity.metrics.url_template: "http://x/metrics" must contain {endpoint}`,
		"pools[0].capacity.metrics.url_template: set url (one engine for the pool) or url_template (one per endpoint), not both",
		`pools[0].endpoints[1]: duplicate endpoint "h:1" (also endpoints[0])`,
		"pools[0].endpoints[2].address: is required",
		`pools[0].endpoints[3].address: "nope" must be host:port`,
		`pools[0].endpoints[3].metrics_url: "ftp://x" must be an http(s) URL`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("errors (-want +got):\n%s", diff)
	}
	got = errorLines(t, `
listeners: [{name: main, address: 127.0.0.1:8080, routes: [{pool: p}]}]
pools:
  - name: p
    protocol: openai
    affinity_header: "bad header"
    capacity: {metrics: {url: "http://x:1/metrics", url_template: "http://x/metrics"}}
    endpoints:
      - h:1
      - {address: "h:1"}
      - {max_inflight: -2}
      - {address: nope, metrics_url: "ftp://x"}
`)
	for _, w := range []string{
		`pools[0].capacity.metrics.url_template: "http://x/metrics" must contain {endpoint}`,
		`pools[0].capacity.metrics.url_template: set url (one engine for the pool) or url_template (one per endpoint), not both`,
		`pools[0].endpoints[1]: duplicate endpoint "h:1" (also endpoints[0])`,
		`pools[0].endpoints[2].address: is required`,
		`pools[0].endpoints[3].address: "nope" must be host:port`,
		`pools[0].endpoints[3].metrics_url: "ftp://x" must be an http(s) URL`,
		`pools[0].affinity_header: "bad header" is not a valid header name`,
	} {
		found := false
		for _, g := range got {
			found = found || contains(g, w)
		}
		if !found {
			t.Errorf("missing error %q in:\n%s", w, joinLines(got))
		}
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func joinLines(ls []string) string { return strings.Join(ls, "\n") }
