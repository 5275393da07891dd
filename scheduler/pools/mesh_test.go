package pools_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/scheduler/pools"
	"github.com/llmesh/llmesh/testkit/wait"
)

// A pool's capacity learned from its engine applies to its experiment's arm
// pools too (they share the engine), and dropping the metrics URL in a
// reload restores the static capacity.
func TestMeshSchedulerLearnsCapacityForArms(t *testing.T) {
	// An engine whose KV cache is full with 3 running: the rule lowers the
	// limit to what runs.
	engine := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, "vllm:num_requests_running 3\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0.99\n")
	}))
	defer engine.Close()
	mesh := func(metrics string) *config.Config {
		c, err := config.Load([]byte(`
pools:
  - name: gpu
    protocol: openai
    endpoints: [127.0.0.1:1]
    capacity: {max_inflight: 8` + metrics + `}
classes:
  - {name: default}
experiments:
  - name: ab
    pool: gpu
    arms: [{name: a}, {name: b, scheduler: {policy: edf}}]
`))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	ms, err := pools.NewMesh(mesh(`, metrics: {url: "`+engine.URL+`/metrics", interval: 20ms}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := ms.Start(ctx); err != nil {
		t.Fatal(err)
	}
	limits := func() map[string]int {
		out := map[string]int{}
		for _, ps := range ms.Stats() {
			out[ps.Name] = ps.Limit
		}
		return out
	}
	want := func(n int) {
		t.Helper()
		wait.UntilNil(t, fmt.Sprintf("limit %d for the pool and both arms", n), func() error {
			if l := limits(); l["gpu"] != n || l["gpu.arm-a"] != n || l["gpu.arm-b"] != n {
				return fmt.Errorf("limits %v", l)
			}
			return nil
		})
	}
	want(3)
	built, err := ms.Apply(mesh(""))
	if err != nil {
		t.Fatal(err)
	}
	if len(built) != 0 {
		t.Errorf("rebuilt %v; only the metrics source changed", built)
	}
	want(8)
}
