package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// llmeshCopies puts n copies of this tree's llmesh into t.TempDir(): the
// test binary, which runs main when started with docExecEnv set (TestMain),
// so the copies are the current tree's build without a second compile. The
// environment is set for the test so that exec: arms (and this binary as a
// policy arm) start as llmesh.
func llmeshCopies(t *testing.T, n int) []string {
	t.Helper()
	t.Setenv(docExecEnv, "llmesh")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for range n {
		p := filepath.Join(t.TempDir(), "llmesh")
		mustWrite(t, p, src, 0o755)
		out = append(out, p)
	}
	return out
}

const tinySimWorkload = `
name: tiny
seed: 3
duration: 20s
arrival: {process: poisson, rate: 4}
classes:
  - {name: interactive, priority: 0, share: 0.3, slo: {ttft: 500ms, tpot: 30ms},
     prompt_tokens: {kind: fixed, value: 256}, output_tokens: {kind: fixed, value: 32}}
  - {name: batch, priority: 10, share: 0.7, slo: {ttft: 5s, tpot: 100ms},
     prompt_tokens: {kind: fixed, value: 1024}, output_tokens: {kind: fixed, value: 128}}
`

// abMesh is bench/meshes/preemptive.yaml with the policy and capacity
// replaced.
func abMesh(t *testing.T, dir, policy string, maxInflight int) string {
	t.Helper()
	data, err := os.ReadFile("../../bench/meshes/preemptive.yaml")
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(data), "policy: preemptive", "policy: "+policy, 1)
	s = strings.Replace(s, "max_inflight: 64", "max_inflight: "+itoa(maxInflight), 1)
	p := filepath.Join(dir, policy+itoa(maxInflight)+".yaml")
	mustWrite(t, p, []byte(s), 0o644)
	return p
}

func itoa(i int) string { return strconv.Itoa(i) }

type simABDoc struct {
	Verdict string  `json:"verdict"`
	Units   int     `json:"units"`
	RateRPS float64 `json:"rate_rps"`
	Rate    string  `json:"rate_from"`
	Metrics []struct {
		Name   string `json:"name"`
		Status string `json:"status"`
		Reason string `json:"reason"`
	} `json:"metrics"`
	Provenance struct {
		Builds map[string]struct {
			Path   string `json:"path"`
			SHA256 string `json:"sha256"`
		} `json:"builds"`
		Files map[string]string `json:"files"`
		Seeds []int64           `json:"seeds"`
		Host  struct {
			Cores int `json:"cores"`
		} `json:"host"`
	} `json:"provenance"`
}

func readSimAB(t *testing.T, path string) simABDoc {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d simABDoc
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// Two copies of one build are an A/A: every seed's run is the same on both
// arms, so every metric is identical and the verdict is no_difference. A
// mesh that changes the policy makes an A/B, run at one rate fixed from
// arm A's saturation, with each build and file recorded.
func TestBenchSimulateABExecArms(t *testing.T) {
	bins := llmeshCopies(t, 2)
	dir := t.TempDir()
	wf := filepath.Join(dir, "w.yaml")
	mustWrite(t, wf, []byte(tinySimWorkload), 0o644)
	fifo, pre := abMesh(t, dir, "fifo", 16), abMesh(t, dir, "preemptive", 16)

	aa := filepath.Join(dir, "aa.json")
	out, errOut, err := benchMain(t, "simulate", "--a", "exec:"+bins[0]+",mesh="+pre, "--b", "exec:"+bins[1]+",mesh="+pre,
		"--workload", wf, "--seeds", "3", "--rate", "6", "--json", aa)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	d := readSimAB(t, aa)
	if d.Verdict != "no_difference" || d.Units != 3 || d.RateRPS != 6 {
		t.Fatalf("A/A: verdict %s, %d units at %v req/s; want no_difference, 3 units at 6\n%s", d.Verdict, d.Units, d.RateRPS, out)
	}
	for _, m := range d.Metrics {
		if m.Status != "no_difference" || m.Reason != "identical on every unit" {
			t.Errorf("A/A %s: %s (%s), want identical", m.Name, m.Status, m.Reason)
		}
	}
	pa, pb := d.Provenance.Builds["A"], d.Provenance.Builds["B"]
	if pa.Path != bins[0] || pb.Path != bins[1] || pa.SHA256 == "" || pa.SHA256 != pb.SHA256 {
		t.Errorf("builds: A %+v B %+v; want each path with one hash", pa, pb)
	}
	if got := d.Provenance.Seeds; len(got) != 3 || got[0] != 3 || got[2] != 5 {
		t.Errorf("seeds %v, want 3 4 5", got)
	}
	if d.Provenance.Files["workload "+wf] == "" || d.Provenance.Files["A mesh "+pre] == "" || d.Provenance.Host.Cores < 1 {
		t.Errorf("provenance files %v host %+v", d.Provenance.Files, d.Provenance.Host)
	}
	for _, want := range []string{"### A/B verdict: **no_difference**", "| build B | `" + bins[1], "| seeds | 3…5 (3) |"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}

	ab := filepath.Join(dir, "ab.json")
	md := filepath.Join(dir, "ab.md")
	_, errOut, err = benchMain(t, "simulate", "--a", "exec:"+bins[0]+",mesh="+fifo, "--b", "exec:"+bins[1]+",mesh="+pre,
		"--workload", wf, "--seeds", "2", "--loads", "0.9", "--json", ab, "--markdown", md)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	d = readSimAB(t, ab)
	if !(d.RateRPS > 0) || !strings.Contains(d.Rate, "load 0.9 × arm A's saturation") {
		t.Fatalf("rate %v from %q", d.RateRPS, d.Rate)
	}
	if !strings.Contains(errOut, "(fifo)") || !strings.Contains(errOut, "(preemptive)") {
		t.Errorf("stderr does not name each arm's policy:\n%s", errOut)
	}
	identical := 0
	for _, m := range d.Metrics {
		if m.Reason == "identical on every unit" {
			identical++
		}
	}
	if identical == len(d.Metrics) {
		t.Errorf("fifo and preemptive meshes ran identically: the mesh's policy was not applied")
	}
	if data, _ := os.ReadFile(md); !strings.Contains(string(data), "provenance") {
		t.Errorf("markdown lacks the provenance:\n%s", data)
	}
}

// With policy arms the A/B prints what bench compare prints for the two
// files that this build's bench simulate writes for each policy.
func TestBenchSimulateABMatchesCompare(t *testing.T) {
	llmeshCopies(t, 0)
	dir := t.TempDir()
	wf := filepath.Join(dir, "w.yaml")
	mustWrite(t, wf, []byte(tinySimWorkload), 0o644)
	common := []string{"--workload", wf, "--seeds", "3", "--rate", "6", "--max-inflight", "16"}
	abOut, errOut, err := benchMain(t, append([]string{"simulate", "--a", "fifo", "--b", "preemptive", "--primary", "interactive=ttft_p99_ms"}, common...)...)
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	var files []string
	for _, p := range []string{"fifo", "preemptive"} {
		f := filepath.Join(dir, p+".json")
		if _, errOut, err := benchMain(t, append([]string{"simulate", "--policies", p, "--json", f}, common...)...); err != nil {
			t.Fatalf("%v\n%s", err, errOut)
		}
		files = append(files, f)
	}
	cmpOut, errOut, err := benchMain(t, "compare", files[0], files[1], "--primary", "interactive=ttft_p99_ms")
	if err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	cut := func(s string) string { before, _, _ := strings.Cut(s, "<details>"); return before }
	if cut(abOut) != cut(cmpOut) || !strings.Contains(abOut, "| metric |") {
		t.Errorf("A/B summary differs from bench compare's:\n%s\n---\n%s", abOut, cmpOut)
	}
}

// Every arm is checked before anything runs or any file is written.
func TestBenchSimulateABRejects(t *testing.T) {
	bins := llmeshCopies(t, 1)
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	mustWrite(t, plain, []byte("not a binary"), 0o644)
	badMesh := filepath.Join(dir, "bad.yaml")
	mustWrite(t, badMesh, []byte("pools: [{name: p, capacity: {max_inflight: 0}}]\n"), 0o644)
	out := filepath.Join(dir, "out.json")
	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"missing binary", []string{"--a", "exec:" + filepath.Join(dir, "nope"), "--b", "fifo"}, []string{"--a: exec:", "no such file"}},
		{"not executable", []string{"--a", "exec:" + plain, "--b", "fifo"}, []string{"--a: exec: " + plain + " is not executable"}},
		{"directory", []string{"--a", "exec:" + dir, "--b", "fifo"}, []string{"is not a regular file"}},
		{"bad mesh", []string{"--a", "fifo", "--b", "exec:" + bins[0] + ",mesh=" + badMesh}, []string{"--b: mesh " + badMesh, "max_inflight"}},
		{"missing mesh", []string{"--a", "fifo", "--b", "exec:" + bins[0] + ",mesh=" + filepath.Join(dir, "none.yaml")}, []string{"--b: mesh:"}},
		{"unknown option", []string{"--a", "exec:" + bins[0] + ",cores=2", "--b", "fifo"}, []string{`unknown option "cores"`}},
		{"unknown policy", []string{"--a", "fifoo", "--b", "fifo"}, []string{`--a: "fifoo" is neither`}},
		{"one arm", []string{"--a", "fifo"}, []string{"--b: required with --a"}},
		{"exec without policy", []string{"--a", "exec:" + bins[0], "--b", "exec:" + bins[0]}, []string{"--a exec:" + bins[0] + ": an exec: arm without mesh=FILE"}},
		{"policies with policy arm", []string{"--a", "fifo", "--b", "edf", "--policies", "fifo"}, []string{"--policies: not with a policy arm"}},
		{"two loads", []string{"--a", "fifo", "--b", "edf", "--loads", "0.5,0.9"}, []string{"--loads: 2 load factors"}},
		{"gate", []string{"--a", "fifo", "--b", "edf", "--fail-on", "ttft>5%"}, []string{"--fail-on"}},
		{"gate without arms", []string{"--fail-on", "interactive.ttft_p99_ms>+5%"}, []string{"--fail-on: only with --a and --b"}},
	} {
		_, errOut, err := benchMain(t, append([]string{"simulate", "--json", out, "--seeds", "2"}, c.args...)...)
		if exitCodeOf(err) != 2 {
			t.Errorf("%s: exit %d (%v), want 2\n%s", c.name, exitCodeOf(err), err, errOut)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %q lacks %q", c.name, err, w)
			}
		}
		if _, serr := os.Stat(out); serr == nil {
			t.Fatalf("%s: %s written by a rejected A/B", c.name, out)
		}
	}
}

func FuzzParseArmSpec(f *testing.F) {
	for _, s := range []string{"fifo", "exec:/bin/llmesh", "exec:./llmesh,mesh=m.yaml", "exec:", "exec:a,mesh=", "exec:a,mesh=x,mesh=y", "exec:a,b", "a,b", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		a, err := parseArmSpec(s)
		if err != nil {
			if !strings.Contains(err.Error(), strconv.Quote(s)) {
				t.Fatalf("error %q does not quote the spec %q", err, s)
			}
			return
		}
		if (a.Exe == "") == (a.Policy == "") {
			t.Fatalf("%q: exactly one of exe %q and policy %q must be set", s, a.Exe, a.Policy)
		}
		if a.Policy != "" && a.Mesh != "" {
			t.Fatalf("%q: a policy arm with a mesh", s)
		}
		if a.Exe != "" && !strings.HasPrefix(s, "exec:"+a.Exe) {
			t.Fatalf("%q: exe %q is not what follows exec:", s, a.Exe)
		}
	})
}
