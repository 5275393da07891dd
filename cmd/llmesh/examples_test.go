package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/llmesh/llmesh/bench/workload"
	"github.com/llmesh/llmesh/config"
)

// Every example file the docs point to loads: mesh configs through
// config.LoadFile (bench/meshes after their placeholders are filled in),
// workloads through workload.LoadFile, and the Envoy bootstraps, which only
// Envoy can check fully, at least parse as YAML and name the ports the
// examples' sim commands use.
func TestExampleConfigs(t *testing.T) {
	root := repoRoot(t)
	glob := func(pat string) []string {
		m, err := filepath.Glob(filepath.Join(root, pat))
		if err != nil || len(m) == 0 {
			t.Fatalf("%s: no files (%v)", pat, err)
		}
		return m
	}
	for _, f := range glob("examples/*.yaml") {
		if _, err := config.LoadFile(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	for _, f := range glob("bench/meshes/*.yaml") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte("${LLMESH_SIM0}")) {
			// The trace replay's meshes (scripts/prefix-realtime) take their
			// four engines and listener port from the environment.
			for i := 0; i < 4; i++ {
				t.Setenv(fmt.Sprintf("LLMESH_SIM%d", i), fmt.Sprintf("127.0.0.1:%d", 8000+i))
			}
			t.Setenv("LLMESH_LISTEN_PORT", "8080")
			if _, err := config.LoadFile(f); err != nil {
				t.Errorf("%s: %v", f, err)
			}
			continue
		}
		if _, err := config.Load(resolveMesh(b, "127.0.0.1:8000", "127.0.0.1:9000")); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	for _, f := range append(glob("bench/workloads/*.yaml"), glob("cmd/llmesh/testdata/*workload*.yaml")...) {
		if _, err := workload.LoadFile(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	// The sim commands in the docs and in envoy-static.yaml's header serve
	// HTTP on 8000 and gRPC on 9000; the example configs must send there.
	simCmd := regexp.MustCompile(`llmesh sim --listen 127\.0\.0\.1:8000 --grpc-listen 127\.0\.0\.1:9000`)
	for _, f := range glob("envoy*.yaml") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := yaml.Unmarshal(b, &doc); err != nil {
			t.Errorf("%s: %v", f, err)
		}
		if filepath.Base(f) == "envoy-static.yaml" {
			if !simCmd.Match(b) {
				t.Errorf("%s: header does not start the sim as %s", f, simCmd)
			}
			for _, port := range []string{"port_value: 8000", "port_value: 9000"} {
				if !regexp.MustCompile(regexp.QuoteMeta(port)).Match(b) {
					t.Errorf("%s: no %s", f, port)
				}
			}
		}
	}
	mesh, err := os.ReadFile(filepath.Join(root, "examples", "mesh.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range []string{"127.0.0.1:8000", "127.0.0.1:9000"} {
		if !regexp.MustCompile(regexp.QuoteMeta(ep)).Match(mesh) {
			t.Errorf("examples/mesh.yaml: no endpoint %s", ep)
		}
	}
}
