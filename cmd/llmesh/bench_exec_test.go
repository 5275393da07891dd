package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/bench/ab"
)

// A real-time exec: A/B starts each build's own sim and gateway per run,
// each with the arm's mesh, and both arms complete every request.
func TestBenchABExecArms(t *testing.T) {
	bins := llmeshCopies(t, 2)
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
		"--a", "exec:"+bins[0]+",mesh="+filepath.Join(meshes, "fifo.yaml"), "--a-name", "fifo",
		"--b", "exec:"+bins[1]+",mesh="+filepath.Join(meshes, "preemptive.yaml"), "--b-name", "preemptive")
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
	if p := res.Provenance; p == nil || p.Builds["A"].Path != bins[0] || p.Builds["B"].Path != bins[1] || p.Builds["A"].SHA256 == "" || len(p.Seeds) != 1 {
		t.Errorf("provenance %+v: want each arm's binary and the seed", p)
	}
	for _, r := range res.Runs {
		if r.Report.Completed != 24 || r.Report.Failed != 0 {
			t.Errorf("arm %s: %d completed, %d failed, want 24 and 0", r.Arm, r.Report.Completed, r.Report.Failed)
		}
	}
}

// A real-time exec: arm needs a mesh that points at the engine it starts,
// and is checked before any run.
func TestBenchABExecRejects(t *testing.T) {
	bins := llmeshCopies(t, 1)
	dir := t.TempDir()
	noSim := filepath.Join(dir, "nosim.yaml")
	mustWrite(t, noSim, []byte("pools: [{name: p, protocol: openai, endpoints: [127.0.0.1:9]}]\n"), 0o644)
	_, _, err := benchMain(t, "ab", "--a", "exec:"+bins[0], "--b", "exec:"+bins[0]+",mesh="+noSim, "--requests", "1", "--rate", "1")
	if exitCodeOf(err) != 2 {
		t.Fatalf("exit %d, want 2: %v", exitCodeOf(err), err)
	}
	for _, want := range []string{"--a: exec:" + bins[0] + ": real time needs the gateway's mesh", "--b: exec: " + noSim + ": no pool points at the simulated engine"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
	_, _, err = benchMain(t, "ab", "--a", "127.0.0.1:1", "--b", "127.0.0.1:1", "--requests", "1", "--rate", "1", "--retries", "-1")
	if exitCodeOf(err) != 2 || !strings.Contains(err.Error(), "--retries: -1 must be in [0, 10]") {
		t.Errorf("--retries -1: exit %d, %v", exitCodeOf(err), err)
	}
}
