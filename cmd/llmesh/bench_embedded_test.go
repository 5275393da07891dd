package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
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

// bench ab judges like bench compare: paired over the repeats, with the
// enum at the JSON's top-level verdict, gates on the paired judgement, and
// the provenance in the table and the HTML page. A bad --primary is a usage
// error before any run.
func TestBenchABPairedVerdict(t *testing.T) {
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
	fifo := "embedded:" + filepath.Join("..", "..", "bench", "meshes", "fifo.yaml")
	_, _, err := benchMain(t, "ab", "--workload", wl, "--quiet", "--a", fifo, "--b", fifo, "--primary", "nosuch=ttft_p99_ms", "--primary", "batch=speed")
	if exitCodeOf(err) != 2 || !strings.Contains(err.Error(), `no class "nosuch" in the workload`) || !strings.Contains(err.Error(), `metric "speed" is not one of`) {
		t.Fatalf("bad --primary: exit %d %v", exitCodeOf(err), err)
	}
	js, page := filepath.Join(dir, "ab.json"), filepath.Join(dir, "ab.html")
	out, errOut, err := benchMain(t, "ab", "--workload", wl, "--repeats", "3", "--quiet", "--json", js, "--html", page,
		"--a", fifo, "--b", fifo, "--primary", "interactive=ttft_p99_ms", "--fail-on", "interactive.ttft_p99_ms>+1000%")
	var doc struct {
		Verdict string `json:"verdict"`
		Summary string `json:"summary"`
		Valid   bool   `json:"valid"`
		Paired  *struct {
			Metrics []struct {
				Name    string `json:"name"`
				Primary bool   `json:"primary"`
				Units   int    `json:"units"`
			} `json:"metrics"`
		} `json:"paired"`
		Gates []struct {
			Breached bool `json:"breached"`
		} `json:"gates"`
	}
	data, rerr := os.ReadFile(js)
	if rerr != nil {
		t.Fatalf("%v (exit %d %v)\n%s", rerr, exitCodeOf(err), err, errOut)
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	if !doc.Valid {
		// A loaded host can make a run late: then no verdict, exit 4.
		if exitCodeOf(err) != 4 || doc.Verdict != "inconclusive" || doc.Paired != nil {
			t.Fatalf("invalid A/B: exit %d, verdict %q; want 4 and inconclusive", exitCodeOf(err), doc.Verdict)
		}
		t.Skipf("SKIP: a run was invalid on this host: %s", doc.Summary)
	}
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, out, errOut)
	}
	if !slices.Contains([]string{"better", "worse", "mixed", "no_difference", "inconclusive"}, doc.Verdict) || !strings.Contains(doc.Summary, "verdict: B") {
		t.Errorf("verdict %q, summary %q: want the enum and the per-request line", doc.Verdict, doc.Summary)
	}
	if doc.Paired == nil || len(doc.Paired.Metrics) != 8 || doc.Paired.Metrics[0].Units != 3 || len(doc.Gates) != 1 || doc.Gates[0].Breached {
		t.Fatalf("paired %+v gates %+v: want 8 metrics over 3 units and one passed gate", doc.Paired, doc.Gates)
	}
	for _, want := range []string{"Paired over the 3 repeats", "**interactive.ttft_p99_ms**", "`interactive.ttft_p99_ms>+1000%` | pass", "provenance:\n  build A: ", "  seeds: "} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`id="paired"`, `id="provenance"`, "build self"} {
		if !strings.Contains(string(html), want) {
			t.Errorf("HTML page lacks %q", want)
		}
	}
}
