package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/bench/ab"
	"github.com/llmesh/llmesh/bench/compare"
	"github.com/llmesh/llmesh/testkit/proctest"
)

// reserveMissRE finds the derived reserve's target miss share in
// scheduler/tune.go, the constant the patch of issue 30 changes.
var reserveMissRE = regexp.MustCompile(`reserveMiss\s*=\s*[0-9.]+`)

// The patch workflow end to end: a build of this tree with a one-line
// scheduling patch (the derived reserve's reserveMiss 0.1 → 0.02, applied
// with go build -overlay so the tree is untouched) against this tree's own
// build, ten seeds in virtual time at the rate fixed from arm A's
// saturation. The patch delays batch first tokens by about 7% (P99, paired
// over the seeds), so the A/B says worse and the gate on it exits 3.
func TestBenchSimulatePatchedBuild(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIP: builds a patched llmesh (a minute or more); not in -short")
	}
	var b proctest.Builder
	defer b.Close()
	bin := buildPatched(t, &b)
	dir := t.TempDir()
	base := llmeshCopies(t, 1)[0]

	out := filepath.Join(dir, "ab.json")
	md := filepath.Join(dir, "ab.md")
	stdout, stderr, err := benchMain(t, "simulate", "--a", "exec:"+base, "--b", "exec:"+bin, "--policies", "preemptive",
		"--workload", "../../bench/workloads/mixed-priority.yaml", "--seeds", "10", "--loads", "1.0", "--duration", "30s",
		"--primary", "batch=ttft_p99_ms", "--fail-on", "batch.ttft_p99_ms>+5%", "--fail-on", "batch.goodput_rps<-2%",
		"--json", out, "--markdown", md)
	if exitCodeOf(err) != 3 || !strings.Contains(err.Error(), "gate breached: batch.ttft_p99_ms>+5%") {
		t.Fatalf("exit %d (%v), want 3 for the breached TTFT gate\n%s\n%s", exitCodeOf(err), err, stdout, stderr)
	}
	d := readSimAB(t, out)
	if d.Verdict != "worse" || d.Units != 10 || !strings.Contains(d.Rate, "arm A's saturation") {
		t.Errorf("verdict %s over %d units at %v req/s (%s); want worse over 10 at arm A's rate", d.Verdict, d.Units, d.RateRPS, d.Rate)
	}
	for _, m := range d.Metrics {
		if m.Name == "batch.ttft_p99_ms" && m.Status != "worse" {
			t.Errorf("batch.ttft_p99_ms: %s (%s), want worse", m.Status, m.Reason)
		}
	}
	pa, pb := d.Provenance.Builds["A"], d.Provenance.Builds["B"]
	if pa.Path != base || pb.Path != bin || pa.SHA256 == "" || pb.SHA256 == "" || pa.SHA256 == pb.SHA256 {
		t.Errorf("builds A %+v B %+v: want each binary with its own hash", pa, pb)
	}
	summary, err := os.ReadFile(md)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"### A/B verdict: **worse**", "`batch.ttft_p99_ms>+5%` | **breached**", "`batch.goodput_rps<-2%` | pass", "| seeds | 42…51 (10) |"} {
		if !strings.Contains(string(summary), want) {
			t.Errorf("markdown summary lacks %q:\n%s", want, summary)
		}
	}
}

// buildPatched builds llmesh with the planted one-line scheduling patch
// (scheduler/tune.go's reserveMiss 0.1 → 0.02), applied with go build
// -overlay so the tree is untouched, and returns the binary's path.
func buildPatched(t *testing.T, b *proctest.Builder) string {
	t.Helper()
	tune, err := filepath.Abs("../../scheduler/tune.go")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(tune)
	if err != nil {
		t.Fatal(err)
	}
	if m := reserveMissRE.Find(src); m == nil || strings.HasSuffix(string(m), "0.02") {
		t.Fatalf("scheduler/tune.go: reserveMiss is %q; the planted patch sets it to 0.02 (update this test with tune.go)", m)
	}
	dir := t.TempDir()
	patched := filepath.Join(dir, "tune.go")
	mustWrite(t, patched, reserveMissRE.ReplaceAll(src, []byte("reserveMiss = 0.02")), 0o644)
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {tune: patched}})
	if err != nil {
		t.Fatal(err)
	}
	ov := filepath.Join(dir, "overlay.json")
	mustWrite(t, ov, overlay, 0o644)
	return b.Build(t, "llmesh-patched", "-overlay="+ov, ".")
}

// The patch workflow in real time: `bench ab --a exec:BASE --b
// exec:PATCHED` with two different binaries, each arm starting its own
// build's sim and gateway per run on loopback. On a loaded host the runs
// may be invalid (schedule lag), so the verdict may be inconclusive; what
// must hold is that both builds ran, the report names each with its own
// hash, and the verdict is one of the enum's values. Building the two
// binaries takes minutes on a loaded 2-core host (the A/B itself seconds),
// so the test runs only with LLMESH_AB_BUILDS=1 and not in -short
// (docs/bench.md, "Gate a merge").
func TestBenchABPatchedBuild(t *testing.T) {
	if testing.Short() || os.Getenv("LLMESH_AB_BUILDS") != "1" {
		t.Skip("SKIP: builds two llmesh binaries (minutes) and runs them in real time; set LLMESH_AB_BUILDS=1, not in -short")
	}
	start := time.Now()
	var b proctest.Builder
	defer b.Close()
	base := b.Build(t, "llmesh-base", ".")
	patched := buildPatched(t, &b)
	built := time.Since(start)

	dir := t.TempDir()
	wl := filepath.Join(dir, "w.yaml")
	mustWrite(t, wl, []byte(`
model: llama3-8b-h200
profile: llama3-8b-h200
requests: 24
max_schedule_lag_p99: 1s
arrival: {process: constant, rate: 40}
primary: interactive=ttft_p99_ms
classes:
  - {name: interactive, priority: 0, share: 1, prompt_tokens: {value: 16}, output_tokens: {value: 4}, headers: {x-llmesh-class: interactive}}
  - {name: batch, priority: 10, share: 1, prompt_tokens: {value: 32}, output_tokens: {value: 4}, headers: {x-llmesh-class: batch}}
`), 0o644)
	mesh := filepath.Join("..", "..", "bench", "meshes", "preemptive.yaml")
	js := filepath.Join(dir, "ab.json")
	out, errOut, err := benchMain(t, "ab", "--workload", wl, "--repeats", "2", "--retries", "0", "--quiet", "--json", js,
		"--a", "exec:"+base+",mesh="+mesh, "--b", "exec:"+patched+",mesh="+mesh)
	// An invalid run exits 4 and still writes the report; anything else
	// is a failure to run the builds.
	if err != nil && exitCodeOf(err) != 4 {
		t.Fatalf("exit %d: %v\nstdout:\n%s\nstderr:\n%s", exitCodeOf(err), err, out, errOut)
	}
	data, rerr := os.ReadFile(js)
	if rerr != nil {
		t.Fatalf("%v (bench ab: %v)", rerr, err)
	}
	var res ab.Result
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains([]compare.Status{compare.Better, compare.Worse, compare.Mixed, compare.NoDifference, compare.Inconclusive}, res.Status) {
		t.Errorf("verdict %q is not one of the enum's values", res.Status)
	}
	if len(res.Runs) != 4 {
		t.Errorf("%d runs, want 4 (2 repeats × 2 arms)", len(res.Runs))
	}
	for _, r := range res.Runs {
		if r.Report == nil || r.Report.Completed == 0 {
			t.Errorf("arm %s seed %d: nothing completed: the build's sim and gateway did not serve", r.Arm, r.Seed)
		}
	}
	p := res.Provenance
	if p == nil {
		t.Fatal("no provenance")
	}
	pa, pb := p.Builds["A"], p.Builds["B"]
	if pa.Path != base || pb.Path != patched || pa.SHA256 == "" || pb.SHA256 == "" || pa.SHA256 == pb.SHA256 {
		t.Errorf("builds A %+v B %+v: want each binary with its own hash", pa, pb)
	}
	if res.Primary["interactive"] != "ttft_p99_ms" || res.PrimaryFrom != "workload "+wl {
		t.Errorf("primary %v from %q, want the workload's interactive=ttft_p99_ms", res.Primary, res.PrimaryFrom)
	}
	for _, want := range []string{base, patched, "Primary metrics: interactive.ttft_p99_ms (from workload " + wl + ")"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q:\n%s", want, out)
		}
	}
	t.Logf("builds %v, A/B %v, verdict %s", built.Round(time.Second), time.Since(start).Round(time.Second)-built.Round(time.Second), res.Status)
}
