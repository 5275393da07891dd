package config_test

import (
	"errors"
	"os"
	"testing"

	"github.com/llmesh/llmesh/config"
)

// FuzzLoad checks that no input makes the loader panic, that every failure
// is a config.Errors with messages, and that a loaded config is consistent.
func FuzzLoad(f *testing.F) {
	if b, err := os.ReadFile("../examples/mesh.yaml"); err == nil {
		f.Add(b)
	}
	for _, s := range []string{
		minimal,
		"",
		"{}",
		"listeners: [{name: a, address: ':0', routes: [{pool: p}]}]\npools: [{name: p, protocol: grpc, endpoints: ['h:1']}]",
		"classes: [{name: a, slo: {ttft: -5ms}}]",
		"a: &a [*a]",
		"experiments: [{name: e, pool: p, arms: [{name: a, weight: 1}], active: a}]",
		"relocation: {grpc: [{metadata: x, field: 3}], http: [{header: x}]}",
		"pools: [{name: p, protocol: grpc, endpoints: ['h:1'], engine_priority: class}]\nclasses: [{name: a, priority: 3000000000}]",
		"classification: {priority_header: {name: x, trusted_sources: ['::1', 10.0.0.0/8]}}",
		`{"pools": [{"name": "p", "protocol": "openai", "endpoints": ["[::1]:80"]}]}`,
		"pools: [{name: p, protocol: openai, affinity_header: x-session, endpoints: [h:1, {address: 'h:2', max_inflight: 3, metrics_url: 'http://h:2/m'}], capacity: {metrics: {url_template: 'http://{endpoint}/metrics'}}}]",
		"pools: [{name: p, protocol: openai, endpoints: [{max_inflight: -1}, {address: [x]}, 7]}]",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := config.Load(data)
		if err != nil {
			var es config.Errors
			if !errors.As(err, &es) || len(es) == 0 {
				t.Fatalf("error is not config.Errors: %T %v", err, err)
			}
			for _, e := range es {
				if e.Msg == "" {
					t.Fatalf("empty message in %v", err)
				}
			}
			return
		}
		if cfg.DefaultClass == nil {
			t.Fatal("no default class")
		}
		for _, l := range cfg.Listeners {
			for _, r := range l.Routes {
				if r.Pool == nil {
					t.Fatalf("route %s without pool", r.ID)
				}
			}
		}
		for _, e := range cfg.Experiments {
			if e.Pick(nil, 0.5) == nil {
				t.Fatalf("experiment %s picked no arm", e.Name)
			}
		}
	})
}
