package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

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
	var b proctest.Builder
	defer b.Close()
	bin := b.Build(t, "llmesh-patched", "-overlay="+ov, ".")
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
