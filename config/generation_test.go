package config_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/config"
)

// TestRouteGeneration: a route's generation paths are kept; a bad one is an
// error naming its field path.
func TestRouteGeneration(t *testing.T) {
	src := strings.Replace(minimal, "routes: [{pool: sim}]", "routes: [{pool: sim, generation: [/v1/embeddings, /v1/completions]}]", 1)
	cfg, err := config.Load([]byte(src))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Listener("main").Routes[0].Generation; !slices.Equal(got, []string{"/v1/embeddings", "/v1/completions"}) {
		t.Errorf("generation = %v", got)
	}
	def, err := config.Load([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if got := def.Listener("main").Routes[0].Generation; got != nil {
		t.Errorf("default generation = %v, want nil (the hosts' defaults)", got)
	}
	bad := strings.Replace(minimal, "routes: [{pool: sim}]", "routes: [{pool: sim, generation: [/ok, v1/embeddings]}]", 1)
	lines := errorLines(t, bad)
	if len(lines) != 1 || !strings.Contains(lines[0], `listeners[0].routes[0].generation[1]: "v1/embeddings" must be a request path`) {
		t.Errorf("errors = %q", lines)
	}
}
