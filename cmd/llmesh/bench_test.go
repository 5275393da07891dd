package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/bench/benchtest"
	"github.com/llmesh/llmesh/bench/report"
	"github.com/llmesh/llmesh/bench/sweep"
)

func benchMain(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errb bytes.Buffer
	err := Main(context.Background(), append([]string{"bench"}, args...), &out, &errb)
	return out.String(), errb.String(), err
}

func exitCodeOf(err error) int {
	var ec *exitCode
	if errors.As(err, &ec) {
		return ec.code
	}
	if err != nil {
		return 1
	}
	return 0
}

func TestBenchRunQuickAndReport(t *testing.T) {
	srv := benchtest.Start(t, benchtest.Config{})
	dir := t.TempDir()
	js, jl := filepath.Join(dir, "run.json"), filepath.Join(dir, "run.jsonl")
	out, _, err := benchMain(t, "run", "--target", srv.HTTPURL, "--rate", "200", "--requests", "50", "--prompt-tokens", "16", "--max-tokens", "4", "--json", js, "--jsonl", jl, "--quiet")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "50 requests") || !strings.Contains(out, "default") {
		t.Errorf("table output:\n%s", out)
	}
	f, err := os.Open(js)
	if err != nil {
		t.Fatal(err)
	}
	rep, err := report.ReadJSON(f)
	f.Close()
	if err != nil || rep.Completed != 50 {
		t.Fatalf("report %v, completed %d", err, rep.Completed)
	}
	lines, _ := os.ReadFile(jl)
	if n := strings.Count(string(lines), "\n"); n != 50 {
		t.Errorf("%d JSONL lines, want 50", n)
	}
	// The JSONL export alone rebuilds the same statistics.
	wl := filepath.Join(dir, "w.yaml")
	mustWrite(t, wl, []byte("requests: 50\narrival: {rate: 200}\nclasses: [{name: default, prompt_tokens: {value: 16}, output_tokens: {value: 4}, send_priority: false}]\n"), 0o644)
	mustWrite(t, jl+".cut", append(lines, []byte("{\"index\": 99, \"cla")...), 0o644)
	re, _, err := benchMain(t, "report", "--records", jl+".cut", "--workload", wl, "--format", "json")
	if err == nil || !strings.Contains(err.Error(), "line 51") || !strings.Contains(err.Error(), "summarizing the 50 records") {
		t.Errorf("records with a cut-off last line: %v", err)
	}
	back, rerr := report.ReadJSON(strings.NewReader(re))
	if rerr != nil || back.Completed != 50 || back.P99TTFTMs != rep.P99TTFTMs {
		t.Errorf("rebuilt report: %v, completed %d, p99 %v vs %v", rerr, back.Completed, back.P99TTFTMs, rep.P99TTFTMs)
	}
	md, _, err := benchMain(t, "report", js, "--format", "markdown")
	if err != nil || !strings.HasPrefix(md, "## quick") {
		t.Errorf("report markdown: %v\n%s", err, md)
	}
	// The gate: an SLO nobody can meet fails with exit code 3.
	_, _, err = benchMain(t, "run", "--target", srv.HTTPURL, "--rate", "200", "--requests", "20", "--max-tokens", "2", "--ttft-slo", "1ns", "--slo-gate", "--max-lag", "10s", "--quiet")
	if exitCodeOf(err) != 3 || !strings.Contains(err.Error(), "attainment target missed") {
		t.Errorf("slo gate: exit %d, %v", exitCodeOf(err), err)
	}
}

func TestBenchBadInput(t *testing.T) {
	dir := t.TempDir()
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	dead := "http://" + l.Addr().String()
	l.Close()
	js := filepath.Join(dir, "dead.json")
	_, _, err := benchMain(t, "run", "--target", dead, "--rate", "100", "--requests", "5", "--json", js, "--quiet")
	if err == nil || !strings.Contains(err.Error(), "no request completed (5 failed)") || !strings.Contains(err.Error(), "refused") {
		t.Errorf("unreachable target: %v", err)
	}
	if b, _ := os.ReadFile(js); !strings.Contains(string(b), `"failed": 5`) {
		t.Errorf("partial report not written:\n%.300s", b)
	}

	// Every flag problem at once, exit code 2.
	_, _, err = benchMain(t, "run", "--rate", "-1", "--format", "pdf", "--prompt-tokens", "-3")
	if exitCodeOf(err) != 2 {
		t.Errorf("exit %d, want 2", exitCodeOf(err))
	}
	for _, want := range []string{"--target: required", `--format: "pdf"`, "arrival.rate: -1", "classes[0].prompt_tokens.value: -3"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("flag errors lack %q: %v", want, err)
		}
	}

	bad := filepath.Join(dir, "bad.yaml")
	mustWrite(t, bad, []byte("requests: 5\narrival: {process: trace, trace: t.csv}\nclasses: [{name: a, slo: {ttft: -5ms}}]\n"), 0o644)
	mustWrite(t, filepath.Join(dir, "t.csv"), []byte("TIMESTAMP,ContextTokens,GeneratedTokens\n1,2,3\n2,x,3\n"), 0o644)
	_, _, err = benchMain(t, "run", "--target", dead, "--workload", bad)
	if exitCodeOf(err) != 2 || err == nil || !strings.Contains(err.Error(), `classes[0].slo.ttft: "-5ms" must be positive`) {
		t.Errorf("bad workload: exit %d %v", exitCodeOf(err), err)
	}
	mustWrite(t, bad, []byte("arrival: {process: trace, trace: t.csv}\nclasses: [{name: a}]\n"), 0o644)
	_, _, err = benchMain(t, "run", "--target", dead, "--workload", bad)
	if err == nil || !strings.Contains(err.Error(), "arrival.trace:") || !strings.Contains(err.Error(), `line 3: ContextTokens: "x"`) {
		t.Errorf("bad trace: %v", err)
	}
	_, _, err = benchMain(t, "report", filepath.Join(dir, "t.csv"))
	if err == nil || !strings.Contains(err.Error(), "not a JSON report") {
		t.Errorf("report of a non-report: %v", err)
	}
	_, _, err = benchMain(t, "report", "base.json", "patched.json")
	if exitCodeOf(err) != 2 || !strings.Contains(err.Error(), "run `llmesh bench compare base.json patched.json`") {
		t.Errorf("report of two files: exit %d %v; want a pointer to bench compare", exitCodeOf(err), err)
	}
}

func TestBenchTargetErrorsKeepPartialResults(t *testing.T) {
	srv := benchtest.Start(t, benchtest.Config{})
	dir := t.TempDir()
	wl := filepath.Join(dir, "w.yaml")
	mustWrite(t, wl, []byte(`
requests: 40
arrival: {process: constant, rate: 400}
classes:
  - {name: good, share: 1, prompt_tokens: {value: 4}, output_tokens: {value: 2}}
  - {name: broken, share: 1, prompt_tokens: {value: 4}, output_tokens: {value: 2}, headers: {x-benchtest-fault: "500"}}
`), 0o644)
	js := filepath.Join(dir, "r.json")
	out, _, err := benchMain(t, "run", "--target", srv.HTTPURL, "--workload", wl, "--json", js, "--quiet")
	if err != nil {
		t.Fatal(err)
	}
	f, _ := os.Open(js)
	rep, err := report.ReadJSON(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	g, b := rep.Classes["good"], rep.Classes["broken"]
	if g.Completed != g.Requests || b.Completed != 0 || b.Violations.Error != b.Requests || g.Requests+b.Requests != 40 {
		t.Errorf("good %+v\nbroken %+v\n%s", g, b, out)
	}
}

func mustWrite(t *testing.T, path string, data []byte, perm os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, data, perm); err != nil {
		t.Fatal(err)
	}
}

// bench ab and bench sweep write every run's records to one --jsonl file;
// bench report --records rebuilds one run's report from it with --run and
// refuses to mix runs without it. Sweep renders Markdown and HTML like run.
func TestBenchMultiRunOutputs(t *testing.T) {
	srv := benchtest.Start(t, benchtest.Config{})
	dir := t.TempDir()
	wl := filepath.Join(dir, "w.yaml")
	mustWrite(t, wl, []byte("requests: 20\narrival: {rate: 200}\nmax_schedule_lag_p99: 1s\nclasses: [{name: default, prompt_tokens: {value: 16}, output_tokens: {value: 4}, send_priority: false}]\n"), 0o644)
	abl := filepath.Join(dir, "ab.jsonl")
	if _, _, err := benchMain(t, "ab", "--workload", wl, "--a", srv.HTTPURL, "--b", srv.HTTPURL, "--repeats", "2", "--resamples", "100", "--jsonl", abl, "--quiet"); err != nil {
		t.Fatal(err)
	}
	_, _, err := benchMain(t, "report", "--records", abl, "--workload", wl)
	if exitCodeOf(err) != exitUsage || !strings.Contains(err.Error(), "records of 4 runs (A/1, B/1, A/2, B/2): pick one with --run") {
		t.Errorf("report of a multi-run export without --run: exit %d, %v", exitCodeOf(err), err)
	}
	js, _, err := benchMain(t, "report", "--records", abl, "--workload", wl, "--run", "B/2", "--format", "json")
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := report.ReadJSON(strings.NewReader(js)); err != nil || rep.Completed != 20 {
		t.Errorf("report of run B/2: %v, %+v", err, rep)
	}
	if _, _, err := benchMain(t, "report", "--records", abl, "--workload", wl, "--run", "C/1"); exitCodeOf(err) != exitUsage || !strings.Contains(err.Error(), `no records of run "C/1"`) {
		t.Errorf("--run of a run the file lacks: exit %d, %v", exitCodeOf(err), err)
	}

	swl, html := filepath.Join(dir, "sweep.jsonl"), filepath.Join(dir, "sweep.html")
	md, _, err := benchMain(t, "sweep", "--workload", wl, "--target", srv.HTTPURL, "--rates", "100,200", "--jsonl", swl, "--html", html, "--format", "markdown", "--slo-gate", "--quiet")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(md, "# llmesh bench sweep:") || !strings.Contains(md, "| 200 |") {
		t.Errorf("sweep --format markdown:\n%s", md)
	}
	if b, err := os.ReadFile(html); err != nil || !strings.Contains(string(b), `<figure class="chart"`) {
		t.Errorf("sweep --html: %v", err)
	}
	if _, _, err := benchMain(t, "report", "--records", swl, "--workload", wl, "--run", "rate=100"); err != nil {
		t.Errorf("report of the sweep's rate=100 run: %v", err)
	}
	// No class can meet a 1 ns TTFT: no operating point, exit 3.
	_, _, err = benchMain(t, "sweep", "--target", srv.HTTPURL, "--rate", "100", "--rates", "100", "--requests", "10", "--ttft-slo", "1ns", "--max-lag", "10s", "--slo-gate", "--quiet")
	if exitCodeOf(err) != 3 || !errors.Is(err, sweep.ErrNoOperatingPoint) {
		t.Errorf("sweep --slo-gate without an operating point: exit %d, %v", exitCodeOf(err), err)
	}
}
