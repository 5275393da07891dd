package demo

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/llmesh/llmesh/bench/workloads"
	"github.com/llmesh/llmesh/config"
)

// TestBenchMeshFilesMatchDemo keeps bench/meshes (the mesh files users
// pass to `llmesh bench ab --a embedded:FILE`) the same configuration the
// demo runs with the standard workload, so the two A/B paths compare the
// same thing: the scheduling parts of the loaded configs are equal.
func TestBenchMeshFilesMatchDemo(t *testing.T) {
	w, err := workloads.LoadStandard()
	if err != nil {
		t.Fatal(err)
	}
	for _, policy := range []string{"fifo", "preemptive"} {
		rendered, err := meshYAML(w, "127.0.0.1:1", policy, 64, Bounds{}) // the demo's default --max-inflight
		if err != nil {
			t.Fatal(err)
		}
		file, err := os.ReadFile(filepath.Join("..", "..", "..", "bench", "meshes", policy+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		want, err := config.Load(rendered)
		if err != nil {
			t.Fatalf("demo mesh for %s: %v", policy, err)
		}
		// bench ab substitutes the engine's address for ${LLMESH_SIM}.
		got, err := config.Load(bytes.ReplaceAll(file, []byte("${LLMESH_SIM}"), []byte("127.0.0.1:1")))
		if err != nil {
			t.Fatalf("bench/meshes/%s.yaml: %v", policy, err)
		}
		// What an A/B compares: routes, pools (capacity, scheduler),
		// classes and classification. Names, telemetry and the admin
		// listener may differ.
		type scheduling struct {
			Routes         any
			Pools          any
			Classes        any
			DefaultClass   string
			Classification any
		}
		part := func(c *config.Config) scheduling {
			return scheduling{c.Source.Listeners[0].Routes, c.Source.Pools, c.Source.Classes, c.Source.DefaultClass, c.Source.Classification}
		}
		if diff := cmp.Diff(part(want), part(got)); diff != "" {
			t.Errorf("bench/meshes/%s.yaml differs from the demo's mesh (-demo +file):\n%s", policy, diff)
		}
	}
}
