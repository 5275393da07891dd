package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/bench/ab"
	"github.com/llmesh/llmesh/config"
)

// The shipped mesh files load once their placeholders are filled in.
func TestBenchMeshFilesLoad(t *testing.T) {
	for _, f := range []string{"fifo.yaml", "preemptive.yaml"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "bench", "meshes", f))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := config.Load(resolveMesh(b, "127.0.0.1:8000", "127.0.0.1:8001")); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// An embedded A/B starts a simulated engine and a gateway per run with each
// arm's mesh config, and both arms complete every request through the
// gateway.
func TestBenchABEmbedded(t *testing.T) {
	dir := t.TempDir()
	wl := filepath.Join(dir, "w.yaml")
	mustWrite(t, wl, []byte(`
model: llama3-8b-h200
profile: llama3-8b-h200
requests: 24
max_schedule_lag_p99: 1s
arrival: {process: constant, rate: 40}
classes:
  - {name: interactive, priority: 0, share: 1, prompt_tokens: {value: 16}, output_tokens: {value: 4}, headers: {x-llmesh-class: interactive}}
  - {name: batch, priority: 10, share: 1, prompt_tokens: {value: 32}, output_tokens: {value: 4}, headers: {x-llmesh-class: batch}}
`), 0o644)
	js := filepath.Join(dir, "ab.json")
	meshes := filepath.Join("..", "..", "bench", "meshes")
	out, errOut, err := benchMain(t, "ab", "--workload", wl, "--repeats", "1", "--quiet", "--json", js,
		"--a", "embedded:"+filepath.Join(meshes, "fifo.yaml"), "--b", "embedded:"+filepath.Join(meshes, "preemptive.yaml"))
	if err != nil {
		t.Fatalf("%v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	if !strings.Contains(out, "verdict: B (preemptive) vs A (fifo)") {
		t.Errorf("no verdict line naming the arms:\n%s", out)
	}
	b, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var res ab.Result
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Runs) != 2 {
		t.Fatalf("%d runs, want 2", len(res.Runs))
	}
	targets := map[string]bool{}
	for _, r := range res.Runs {
		if r.Report.Completed != 24 || r.Report.Failed != 0 {
			t.Errorf("arm %s: %d completed, %d failed, want 24 and 0", r.Arm, r.Report.Completed, r.Report.Failed)
		}
		targets[r.Report.Target] = true
	}
	if len(targets) != 2 {
		t.Errorf("both runs went to %v; each run should get its own gateway", targets)
	}
}

func TestBenchABEmbeddedBadMesh(t *testing.T) {
	dir := t.TempDir()
	noSim := filepath.Join(dir, "nosim.yaml")
	mustWrite(t, noSim, []byte("pools: [{name: p, endpoints: [127.0.0.1:9]}]\n"), 0o644)
	bad := filepath.Join(dir, "bad.yaml")
	mustWrite(t, bad, []byte("pools: [{name: p, endpoints: [${LLMESH_SIM}], scheduler: {policy: nosuch}}]\n"), 0o644)
	_, _, err := benchMain(t, "ab", "--a", "embedded:"+noSim, "--b", "embedded:"+bad, "--requests", "1", "--rate", "1")
	if exitCodeOf(err) != 2 {
		t.Errorf("exit %d, want 2: %v", exitCodeOf(err), err)
	}
	for _, want := range []string{"--a: embedded: " + noSim + ": no pool points at the simulated engine", "--b: embedded: " + bad + ":", "nosuch"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}
