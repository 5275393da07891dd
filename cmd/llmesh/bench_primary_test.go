package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/bench/benchtest"
	"github.com/llmesh/llmesh/bench/result"
)

// writeTwoClassReports writes one bench run report per unit: interactive
// TTFT P99 and batch goodput as given, every other metric equal.
func writeTwoClassReports(t *testing.T, dir, arm string, ttft, goodput []float64) string {
	t.Helper()
	var paths []string
	for i := range ttft {
		rep := result.Report{Valid: true, Classes: map[string]*result.ClassReport{
			"interactive": {TTFTMs: result.Percentiles{P99: ttft[i]}, GoodputRPS: 1, SLOAttainment: 1},
			"batch":       {TTFTMs: result.Percentiles{P99: 900}, GoodputRPS: goodput[i], SLOAttainment: 1},
		}}
		data, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, arm+string(rune('0'+i))+".json")
		mustWrite(t, p, data, 0o644)
		paths = append(paths, p)
	}
	return strings.Join(paths, ",")
}

type primaryDoc struct {
	Verdict     string            `json:"verdict"`
	Primary     map[string]string `json:"primary"`
	PrimaryFrom string            `json:"primary_from"`
	Metrics     []struct {
		Name    string `json:"name"`
		Primary bool   `json:"primary"`
	} `json:"metrics"`
}

func readPrimaryDoc(t *testing.T, path string) primaryDoc {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d primaryDoc
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	return d
}

// B is slower for interactive first tokens and faster for batch goodput:
// the verdict is whatever the declared primary says, mixed when none is
// declared, and --primary overrides the workload's declaration.
func TestBenchCompareDeclaredPrimary(t *testing.T) {
	dir := t.TempDir()
	a := writeTwoClassReports(t, dir, "a", []float64{100, 120, 90, 110, 105}, []float64{10, 12, 9, 11, 10})
	b := writeTwoClassReports(t, dir, "b", []float64{130, 152, 118, 141, 133}, []float64{13, 15.5, 11.6, 14.4, 13.1})
	workloadWith := func(name, primary string) string {
		p := filepath.Join(dir, name+".yaml")
		mustWrite(t, p, []byte(`requests: 10
arrival: {rate: 1}
classes:
  - {name: interactive, share: 1, prompt_tokens: {value: 1}, output_tokens: {value: 1}}
  - {name: batch, share: 1, prompt_tokens: {value: 1}, output_tokens: {value: 1}}
`+primary), 0o644)
		return p
	}
	ttftW := workloadWith("ttft", "primary: interactive=ttft_p99_ms\n")
	goodW := workloadWith("good", "primary: [batch=goodput_rps]\n")
	noneW := workloadWith("none", "")
	for _, c := range []struct {
		name          string
		args          []string
		verdict, from string
		primary       string // CLASS.METRIC marked primary; "" none
	}{
		{"interactive declared", []string{"--workload", ttftW}, "worse", "workload " + ttftW, "interactive.ttft_p99_ms"},
		{"batch declared", []string{"--workload", goodW}, "better", "workload " + goodW, "batch.goodput_rps"},
		{"none declared", []string{"--workload", noneW}, "mixed", "none", ""},
		{"no workload", nil, "mixed", "none", ""},
		{"flag overrides", []string{"--workload", ttftW, "--primary", "batch=goodput_rps"}, "better", "--primary", "batch.goodput_rps"},
	} {
		out := filepath.Join(dir, "cmp.json")
		os.Remove(out)
		stdout, stderr, code := runCompare(append([]string{"bench", "compare", "--json", out, a, b}, c.args...)...)
		if code != 0 {
			t.Fatalf("%s: exit %d\n%s\n%s", c.name, code, stdout, stderr)
		}
		d := readPrimaryDoc(t, out)
		if d.Verdict != c.verdict || d.PrimaryFrom != c.from {
			t.Errorf("%s: verdict %s from primary %v (%s), want %s from %s", c.name, d.Verdict, d.Primary, d.PrimaryFrom, c.verdict, c.from)
		}
		var marked []string
		for _, m := range d.Metrics {
			if m.Primary {
				marked = append(marked, m.Name)
			}
		}
		if strings.Join(marked, ",") != c.primary {
			t.Errorf("%s: metrics marked primary %v, want %q", c.name, marked, c.primary)
		}
		if want := "Primary metrics: " + c.primary + " (from " + c.from + ")"; c.primary != "" && !strings.Contains(stdout, want) {
			t.Errorf("%s: summary lacks %q:\n%s", c.name, want, stdout)
		}
	}

	// A declaration naming a class the reports lack, or a bad one, is an
	// error naming the field before anything is written.
	out := filepath.Join(dir, "bad.json")
	os.Remove(out)
	for _, c := range []struct{ primary, want string }{
		{"primary: chat=ttft_p99_ms\n", `primary[0]: "chat=ttft_p99_ms": no class "chat" in the workload`},
		{"primary: interactive=ttft_p99\n", `(did you mean "ttft_p99_ms"?)`},
	} {
		w := workloadWith("bad", c.primary)
		_, stderr, code := runCompare("bench", "compare", "--json", out, "--workload", w, a, b)
		if code != 2 || !strings.Contains(stderr, "--workload: ") || !strings.Contains(stderr, c.want) {
			t.Errorf("%q: exit %d, stderr %q; want 2 naming %q", c.primary, code, stderr, c.want)
		}
	}
	if _, stderr, code := runCompare("bench", "compare", "--json", out, "--primary", "interactive=ttft", a, b); code != 2 || !strings.Contains(stderr, `--primary[0] "interactive=ttft": metric "ttft" is not one of`) {
		t.Errorf("--primary typo: exit %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a rejected comparison wrote %s", out)
	}
}

// bench simulate records the workload's declared primary in its --json
// file, bench compare of two such files uses it, and bench simulate
// --a/--b judges by it and says so.
func TestBenchSimulateDeclaredPrimary(t *testing.T) {
	llmeshCopies(t, 0)
	dir := t.TempDir()
	wf := filepath.Join(dir, "w.yaml")
	mustWrite(t, wf, []byte(tinySimWorkload+"primary: batch=goodput_rps\n"), 0o644)
	common := []string{"--workload", wf, "--seeds", "2", "--rate", "6", "--max-inflight", "16"}
	abJSON := filepath.Join(dir, "ab.json")
	if _, errOut, err := benchMain(t, append([]string{"simulate", "--a", "fifo", "--b", "preemptive", "--json", abJSON}, common...)...); err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	d := readPrimaryDoc(t, abJSON)
	if d.Primary["batch"] != "goodput_rps" || len(d.Primary) != 1 || d.PrimaryFrom != "workload "+wf {
		t.Errorf("simulate A/B: primary %v from %q, want batch=goodput_rps from the workload", d.Primary, d.PrimaryFrom)
	}
	var files []string
	for _, p := range []string{"fifo", "preemptive"} {
		f := filepath.Join(dir, p+".json")
		if _, errOut, err := benchMain(t, append([]string{"simulate", "--policies", p, "--json", f}, common...)...); err != nil {
			t.Fatalf("%v\n%s", err, errOut)
		}
		files = append(files, f)
	}
	cmpJSON := filepath.Join(dir, "cmp.json")
	if _, errOut, err := benchMain(t, "compare", "--json", cmpJSON, files[0], files[1]); err != nil {
		t.Fatalf("%v\n%s", err, errOut)
	}
	c := readPrimaryDoc(t, cmpJSON)
	if c.Primary["batch"] != "goodput_rps" || c.PrimaryFrom != "inputs" || c.Verdict != d.Verdict {
		t.Errorf("compare: %s by primary %v from %q; want the A/B's verdict %s by batch=goodput_rps from the inputs", c.Verdict, c.Primary, c.PrimaryFrom, d.Verdict)
	}
	// Inputs that declare different primaries need --primary or --workload.
	other := filepath.Join(dir, "other.json")
	data, err := os.ReadFile(files[1])
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, other, []byte(strings.Replace(string(data), `"batch": "goodput_rps"`, `"interactive": "ttft_p99_ms"`, 1)), 0o644)
	_, _, err = benchMain(t, "compare", files[0], other)
	if exitCodeOf(err) != 2 || !strings.Contains(err.Error(), "inputs declare different primary metrics") {
		t.Errorf("disagreeing inputs: exit %d, %v", exitCodeOf(err), err)
	}
	if _, errOut, err := benchMain(t, "compare", files[0], other, "--primary", "batch=goodput_rps"); err != nil {
		t.Errorf("disagreeing inputs with --primary: %v\n%s", err, errOut)
	}
}

// bench run records the primary it was given (--primary, else the
// workload's), bench compare over two such reports judges by it, and
// reports recording different primaries are refused naming both.
func TestBenchRunRecordsPrimary(t *testing.T) {
	srv := benchtest.Start(t, benchtest.Config{})
	dir := t.TempDir()
	workloadWith := func(name, primary string) string {
		p := filepath.Join(dir, name+".yaml")
		mustWrite(t, p, []byte(`seed: 5
requests: 20
arrival: {rate: 200}
max_schedule_lag_p99: 1s
classes:
  - {name: interactive, share: 1, prompt_tokens: {value: 16}, output_tokens: {value: 4}, send_priority: false}
  - {name: batch, share: 1, prompt_tokens: {value: 16}, output_tokens: {value: 4}, send_priority: false}
`+primary), 0o644)
		return p
	}
	ttftW := workloadWith("ttft", "primary: interactive=ttft_p99_ms\n")
	goodW := workloadWith("good", "primary: batch=goodput_rps\n")
	run := func(name string, args ...string) string {
		t.Helper()
		js := filepath.Join(dir, name+".json")
		if _, errOut, err := benchMain(t, append([]string{"run", "--target", srv.HTTPURL, "--json", js, "--quiet"}, args...)...); err != nil {
			t.Fatalf("bench run %s: %v\n%s", name, err, errOut)
		}
		return js
	}
	a, b := run("a", "--workload", ttftW), run("b", "--workload", ttftW)
	md := filepath.Join(dir, "a.md")
	c := run("c", "--workload", goodW, "--markdown", md)
	flagged := run("flagged", "--workload", ttftW, "--primary", "batch=tpot_p99_ms")
	quick := run("quick", "--rate", "200", "--requests", "5", "--prompt-tokens", "16", "--max-tokens", "2")
	for _, r := range []struct {
		path, primary, from string
	}{
		{a, "interactive=ttft_p99_ms", "workload " + ttftW},
		{c, "batch=goodput_rps", "workload " + goodW},
		{flagged, "batch=tpot_p99_ms", "--primary"},
		{quick, "", ""},
	} {
		d := readPrimaryDoc(t, r.path)
		var got []string
		for cl, m := range d.Primary {
			got = append(got, cl+"="+m)
		}
		if strings.Join(got, ",") != r.primary || d.PrimaryFrom != r.from {
			t.Errorf("%s records primary %v from %q, want %q from %q", r.path, got, d.PrimaryFrom, r.primary, r.from)
		}
	}
	if raw, _ := os.ReadFile(quick); strings.Contains(string(raw), `"primary`) {
		t.Errorf("a quick run without primaries records one:\n%s", raw)
	}
	if m, _ := os.ReadFile(md); !strings.Contains(string(m), "- primary metrics: batch.goodput_rps (from workload "+goodW+")") {
		t.Errorf("bench run markdown lacks the primary line:\n%s", m)
	}

	// Two reports recording the same primary: compare judges by it.
	out := filepath.Join(dir, "cmp.json")
	stdout, stderr, code := runCompare("bench", "compare", "--json", out, a, b)
	if code != 0 {
		t.Fatalf("compare a b: exit %d\n%s\n%s", code, stdout, stderr)
	}
	d := readPrimaryDoc(t, out)
	var marked []string
	for _, m := range d.Metrics {
		if m.Primary {
			marked = append(marked, m.Name)
		}
	}
	if d.Primary["interactive"] != "ttft_p99_ms" || len(d.Primary) != 1 || d.PrimaryFrom != "inputs" || strings.Join(marked, ",") != "interactive.ttft_p99_ms" {
		t.Errorf("compare a b: primary %v from %q, marked %v; want interactive=ttft_p99_ms from the inputs", d.Primary, d.PrimaryFrom, marked)
	}
	if want := "Primary metrics: interactive.ttft_p99_ms (from inputs)"; !strings.Contains(stdout, want) {
		t.Errorf("compare summary lacks %q:\n%s", want, stdout)
	}

	// Reports recording different primaries are refused, naming both, and
	// nothing is written; --workload or --primary settles it.
	os.Remove(out)
	stdout, stderr, code = runCompare("bench", "compare", "--json", out, a, c)
	for _, want := range []string{"inputs declare different primary metrics", "A " + a + ": interactive.ttft_p99_ms", "B " + c + ": batch.goodput_rps"} {
		if code != 2 || !strings.Contains(stderr, want) {
			t.Errorf("compare a c: exit %d, stderr %q; want 2 naming %q", code, stderr, want)
		}
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a refused comparison wrote %s", out)
	}
	for _, s := range []struct {
		args []string
		from string
	}{
		{[]string{"--workload", goodW}, "workload " + goodW},
		{[]string{"--primary", "interactive=ttft_p99_ms"}, "--primary"},
	} {
		stdout, stderr, code = runCompare(append([]string{"bench", "compare", "--json", out, a, c}, s.args...)...)
		if code != 0 {
			t.Errorf("compare a c %v: exit %d\n%s\n%s", s.args, code, stdout, stderr)
			continue
		}
		if d := readPrimaryDoc(t, out); d.PrimaryFrom != s.from {
			t.Errorf("compare a c %v: primary from %q, want %q", s.args, d.PrimaryFrom, s.from)
		}
	}

	// A bad --primary on bench run is a usage error naming the flag.
	for _, bad := range []struct{ flag, want string }{
		{"chat=ttft_p99_ms", `--primary chat=ttft_p99_ms: no class "chat" in the workload (classes: interactive, batch)`},
		{"interactive=ttft", `--primary[0] "interactive=ttft": metric "ttft" is not one of`},
	} {
		_, _, err := benchMain(t, "run", "--target", srv.HTTPURL, "--workload", ttftW, "--primary", bad.flag, "--quiet")
		if exitCodeOf(err) != 2 || !strings.Contains(err.Error(), bad.want) {
			t.Errorf("bench run --primary %s: exit %d, %v; want 2 naming %q", bad.flag, exitCodeOf(err), err, bad.want)
		}
	}
}
