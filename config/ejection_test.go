package config_test

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy"
)

// TestPoolEjection: pools[].ejection reaches the scheduler's pool config
// (absent: the scheduler's defaults), and a bad value is refused naming
// the field.
func TestPoolEjection(t *testing.T) {
	cfg, err := config.Load([]byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	if got := cfg.Pools[0].Ejection; got != (config.Ejection{}) {
		t.Errorf("default ejection %+v, want the zero value (the scheduler's defaults)", got)
	}
	cfg, err = config.Load([]byte(minimal + "    ejection: {failures: 3, base: 500ms, max: 10s}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := config.Ejection{Failures: 3, Base: 500 * time.Millisecond, Max: 10 * time.Second}
	if got := cfg.Pools[0].Ejection; got != want {
		t.Errorf("ejection %+v, want %+v", got, want)
	}
	sc, err := scheduler.FromMesh(cfg, policy.Lookup)
	if err != nil {
		t.Fatal(err)
	}
	if got := sc.Pools[0].Ejection; got != (scheduler.Ejection{Base: 500 * time.Millisecond, Max: 10 * time.Second, Burst: 3}) {
		t.Errorf("scheduler ejection %+v", got)
	}
	for _, tc := range []struct{ src, want string }{
		{"    ejection: {failures: 0}\n", `pools[0].ejection.failures: 0 must be between 1 and 1000 (leave it out for the default, 5)`},
		{"    ejection: {failures: -2}\n", `pools[0].ejection.failures: -2 must be between 1 and 1000 (leave it out for the default, 5)`},
		{"    ejection: {base: 0s}\n", `pools[0].ejection.base: "0s" must be positive`},
		{"    ejection: {base: soon}\n", `pools[0].ejection.base: "soon" is not a duration (use Go syntax such as "250ms" or "1m30s")`},
		{"    ejection: {base: 5s, max: 1s}\n", `pools[0].ejection.max: "1s" must be at least base (5s)`},
		{"    ejection: {max: -1s}\n", `pools[0].ejection.max: "-1s" must be positive`},
	} {
		if diff := cmp.Diff([]string{tc.want}, errorLines(t, minimal+tc.src)); diff != "" {
			t.Errorf("%s errors (-want +got):\n%s", tc.src, diff)
		}
	}
}
