package config_test

import (
	"testing"

	"github.com/llmesh/llmesh/config"
)

func TestPrefixRouting(t *testing.T) {
	cfg, err := config.Load([]byte(`
listeners: [{name: main, address: 127.0.0.1:8080, routes: [{pool: p}]}]
pools:
  - name: p
    protocol: openai
    endpoints: [h:1, h:2]
    prefix_routing: {weight: 0.5, capacity_blocks: 50000}
`))
	if err != nil {
		t.Fatal(err)
	}
	if p := cfg.Pool("p"); p.PrefixWeight != 0.5 || p.PrefixCapacityBlocks != 50000 {
		t.Errorf("prefix routing: weight %v, capacity %d; want 0.5, 50000", p.PrefixWeight, p.PrefixCapacityBlocks)
	}
	got := errorLines(t, `
listeners: [{name: main, address: 127.0.0.1:8080, routes: [{pool: p}]}]
pools:
  - name: p
    protocol: openai
    endpoints: [h:1, h:2]
    prefix_routing: {weight: -1, capacity_blocks: 0}
`)
	for _, w := range []string{
		`pools[0].prefix_routing.weight: -1 must be above 0 and at most 1e6`,
		`pools[0].prefix_routing.capacity_blocks: 0 must be between 1 and 16777216`,
	} {
		found := false
		for _, g := range got {
			found = found || contains(g, w)
		}
		if !found {
			t.Errorf("missing error %q in:\n%s", w, joinLines(got))
		}
	}
	got = errorLines(t, `
listeners: [{name: main, address: 127.0.0.1:8080, routes: [{pool: p}]}]
pools:
  - name: p
    protocol: openai
    endpoints: [h:1]
    prefix_routing: {wieght: 1, capacity_blocks: 10}
`)
	found := false
	for _, g := range got {
		found = found || contains(g, `pools[0].prefix_routing.wieght: unknown field (did you mean "weight"?)`)
	}
	if !found {
		t.Errorf("a misspelt field is not named with a suggestion:\n%s", joinLines(got))
	}
}

func TestPrefixRoutingKVEvents(t *testing.T) {
	cfg, err := config.Load([]byte(`
listeners: [{name: main, address: 127.0.0.1:8080, routes: [{pool: p}]}]
pools:
  - name: p
    protocol: grpc
    endpoints: [h:1, h:2]
    prefix_routing:
      weight: 0.5
      kv_events:
        topic: kv-events
        endpoints: {"h:1": "tcp://h:5557", "h:2": "tcp://h:5558"}
`))
	if err != nil {
		t.Fatal(err)
	}
	p := cfg.Pool("p")
	if p.PrefixKVEvents == nil || p.PrefixKVEvents.Topic != "kv-events" || p.PrefixKVEvents.Publishers["h:2"] != "tcp://h:5558" || p.PrefixCapacityBlocks != 0 {
		t.Errorf("kv events: %+v, capacity %d", p.PrefixKVEvents, p.PrefixCapacityBlocks)
	}
	got := errorLines(t, `
listeners: [{name: main, address: 127.0.0.1:8080, routes: [{pool: p}]}]
pools:
  - name: p
    protocol: grpc
    endpoints: [h:1, h:2]
    prefix_routing:
      weight: 0.5
      kv_events:
        endpoints: {"h:1": "http://h:5557", "h:3": "tcp://h:5557"}
`)
	for _, w := range []string{
		`pools[0].prefix_routing.kv_events.endpoints.h:1: "http://h:5557" must be tcp://HOST:PORT`,
		`pools[0].prefix_routing.kv_events.endpoints.h:3: "h:3" is not one of the pool's endpoints (h:1, h:2)`,
		`pools[0].prefix_routing.kv_events.endpoints: endpoint "h:2" has no publisher`,
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
