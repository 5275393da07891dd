package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// bench calibrate runs A/A comparisons with arm B's seeds offset and
// comparisons against a planted change, and reports the verdict rates. A
// planted change that starves the engine (two running sequences) must be
// detected; the counts must add up.
func TestBenchCalibrate(t *testing.T) {
	llmeshCopies(t, 0)
	dir := t.TempDir()
	wf := filepath.Join(dir, "w.yaml")
	mustWrite(t, wf, []byte(tinySimWorkload), 0o644)
	js := filepath.Join(dir, "cal.json")
	out, errOut, err := benchMain(t, "calibrate", "--workload", wf, "--rate", "3", "--duration", "10s", "--pool", "6", "--seeds", "3",
		"--comparisons", "20", "--planted-comparisons", "10", "--planted", "--max-num-seqs=2", "--json", js)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	data, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var o calibrateOutput
	if err := json.Unmarshal(data, &o); err != nil {
		t.Fatal(err)
	}
	if o.AA.Comparisons != 20 || o.AA.Better+o.AA.Worse > 20 || o.AA.Rate != float64(o.AA.Better+o.AA.Worse)/20 || o.RateRPS != 3 {
		t.Errorf("A/A %+v at %v req/s", o.AA, o.RateRPS)
	}
	if p := o.Planted; p == nil || p.Comparisons != 10 || p.Rate < 0.8 || !(p.PoolChange > 0.5) || p.Flags != "--max-num-seqs=2" {
		t.Errorf("planted %+v: want the starved engine detected", p)
	}
	if o.Provenance == nil || len(o.Provenance.Seeds) != 6 || o.Provenance.Seeds[0] != 3 {
		t.Errorf("provenance %+v", o.Provenance)
	}
	for _, want := range []string{"A/A (B seed = A seed + 100000): 20 comparisons", "planted (--max-num-seqs=2 on B, same seeds): 10 comparisons", "wall time"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestBenchCalibrateRejects(t *testing.T) {
	var err error
	_, _, err = benchMain(t, "calibrate", "--pool", "1001")
	if exitCodeOf(err) != 2 || !strings.Contains(err.Error(), "--pool: 1001 must be in [--seeds, 1000]") {
		t.Errorf("--pool 1001: exit %d, %v", exitCodeOf(err), err)
	}
	_, _, err = benchMain(t, "calibrate", "--pool", "5", "--seeds", "10", "--offset", "2", "--policy", "nosuch", "--planted", "hop=3ms", "--primary", "x", "--load", "0")
	if exitCodeOf(err) != 2 {
		t.Fatalf("exit %d: %v", exitCodeOf(err), err)
	}
	for _, want := range []string{"--pool: 5 must be in [--seeds", "--offset: 2 must be at least --pool", `--policy: "nosuch" is neither`, `--planted: "hop=3ms"`, `--primary: "x"`, "--load: 0 must be in (0, 10]"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q: %v", want, err)
		}
	}
}

// Without --primary, calibrate counts the workload's one declared
// primary; a workload declaring several is refused before any run, naming
// --primary.
func TestBenchCalibrateDeclaredPrimary(t *testing.T) {
	std, err := os.ReadFile("../../bench/workloads/mixed-priority.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, tc := range []struct {
		name, line, want string
	}{
		{"two", "primary: [interactive=ttft_p99_ms, batch=goodput_rps]", "declares 2 primary metrics"},
	} {
		file := filepath.Join(dir, tc.name+".yaml")
		body := strings.Replace(string(std), "primary: interactive=ttft_p99_ms", tc.line, 1)
		if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		_, _, err := benchMain(t, "calibrate", "--workload", file, "--pool", "10", "--seeds", "10", "--offset", "10")
		if exitCodeOf(err) != 2 || !strings.Contains(err.Error(), "--primary: workload "+file) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: exit %d, %v", tc.name, exitCodeOf(err), err)
		}
	}
}

// --build calibrates another build (the one a team gates with): every run
// is that binary's bench simulate, with its mesh's policy, recorded in the
// provenance. A --build that is not an exec: arm is refused first.
func TestBenchCalibrateBuild(t *testing.T) {
	bin := llmeshCopies(t, 1)[0]
	dir := t.TempDir()
	wf := filepath.Join(dir, "w.yaml")
	mustWrite(t, wf, []byte(tinySimWorkload), 0o644)
	mesh := abMesh(t, dir, "fifo", 16)
	js := filepath.Join(dir, "cal.json")
	_, errOut, err := benchMain(t, "calibrate", "--build", "exec:"+bin+",mesh="+mesh, "--workload", wf, "--rate", "3", "--duration", "10s",
		"--pool", "4", "--seeds", "2", "--comparisons", "5", "--planted", "", "--json", js)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	data, err := os.ReadFile(js)
	if err != nil {
		t.Fatal(err)
	}
	var o calibrateOutput
	if err := json.Unmarshal(data, &o); err != nil {
		t.Fatal(err)
	}
	if o.Policy != "fifo" || o.AA.Comparisons != 5 || o.Planted != nil {
		t.Errorf("policy %q, A/A %+v, planted %+v; want fifo, 5 comparisons, none planted", o.Policy, o.AA, o.Planted)
	}
	if b := o.Provenance.Builds["A"]; b.Path != bin || b.SHA256 == "" || o.Provenance.Builds["B"].Path != bin || o.Provenance.Files["mesh "+mesh] == "" {
		t.Errorf("provenance %+v: want the calibrated binary on both arms and its mesh", o.Provenance)
	}
	_, _, err = benchMain(t, "calibrate", "--build", "preemptive")
	if exitCodeOf(err) != 2 || !strings.Contains(err.Error(), `--build: "preemptive": want exec:PATH[,mesh=FILE]`) {
		t.Errorf("--build preemptive: exit %d, %v", exitCodeOf(err), err)
	}
	_, _, err = benchMain(t, "calibrate", "--build", "exec:"+filepath.Join(dir, "nosuch"))
	if exitCodeOf(err) != 2 || !strings.Contains(err.Error(), "--build: exec: ") {
		t.Errorf("--build of a missing binary: exit %d, %v", exitCodeOf(err), err)
	}
}
